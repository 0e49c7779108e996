//! # `ring` — an election that travels the ring
//!
//! **Source.** The ring algorithm of Tanenbaum, *Distributed Operating Systems*
//! (1995), §3.3.2: the
//! nodes form a logical ring by id; a node that notices the coordinator is
//! gone sends an ELECTION message holding its own id to its successor,
//! skipping successors that are down; each node adds its id and passes it
//! on. When the message is back at its starter it becomes a COORDINATOR
//! message naming the highest id collected and goes round once more, so
//! that everyone learns the coordinator and the members of the ring.
//!
//! **Assumptions.** Reliable FIFO links while both ends are up; crash-stop
//! failures reported by the failure detector (it tells a node which
//! successors to skip).
//!
//! **Messages per election.** 2N with one starter (N ELECTION hops, N
//! COORDINATOR hops); each further simultaneous starter adds 2N.
//!
//! **One change from the textbook: deferring.** When the coordinator is
//! lost, every live node hears of it at about the same moment, and in the
//! textbook every one of them starts: N elections of 2N hops each, all to
//! elect the highest live node. Here only the highest live node (by this
//! node's detector) starts; the others wait for the announcement as long
//! as a starter waits for its own election to come back (four failure
//! timeouts: 2N hops on a busy ring of a hundred nodes take longer than
//! one), and start their own if none came or the coordinator it named is
//! gone too (so a hang of that node on top costs the wait), or at once
//! when every node above them is reported down meanwhile. One election,
//! 2N messages, one new epoch. (Chang and Roberts, "An improved algorithm for
//! decentralized extrema-finding in circular configurations of
//! processes", CACM 1979, cut the same cost by swallowing the messages of
//! lower starters; deferring keeps the ring's collected membership.) The
//! same holds for bully, whose module says so.
//!
//! **Joining.** A node holds no election before the engine says it has
//! joined (see the engine's join). On joining it learns a coordinator above
//! it instead of circling the ring only to confirm it: it follows the one
//! announced to it already, or, if its peers' heartbeats name one, waits
//! for that one's word, which a sitting coordinator sends straight to
//! every lower node that comes up (a COORDINATOR whose `visited` names its
//! receiver, so that it goes no further). A node that is the highest live
//! one elects; any other waits, as after a lost coordinator. So a cluster
//! that starts together elects once: measured on 128 node processes on two
//! cores, 15 to 26 rounds at start before this, and 1 after.
//!
//! **Epochs.** The ELECTION message carries the highest epoch any node it
//! passed has seen; the starter picks the next round, with the winner's id
//! in the low bits. Simultaneous starters collect the same ids and the same
//! highest round, so they pick the same epoch: one answer, however many
//! messages circulate. A COORDINATOR of an older epoch than the one a node
//! follows is dropped.
//!
//! **State walk.** Idle (following a coordinator, or none) → on the
//! coordinator's failure or on joining, the highest live node *starts*
//! and the others *wait* (above); on hearing of a newer epoch than its
//! own, or when a wait ends with no announcement, a node starts: it sends
//! ELECTION to its first live successor and arms a timer. Any node
//! receiving ELECTION adds itself and passes it on. Back at the starter it
//! becomes COORDINATOR, which every node adopts (if newer) and passes on,
//! once round: it ends at its starter, or at the first node it already
//! passed when the starter has died.
//!
//! **Confirming, not re-electing.** An election also records the term of
//! any sitting coordinator it passes. If that coordinator is still the
//! highest live id and its term is the newest seen, the election confirms
//! the term instead of opening a new one, so a node that merely catches up
//! (it heard of a newer term in a heartbeat, and waited one failure timeout
//! for the announcement in vain) causes no change of epoch. The exception
//! is a coordinator asked for a new term (its mutual exclusion ran out of
//! fences, `handle_renew`): it starts a round, and until it takes a newer
//! epoch no round confirms its term, a round that passed it before
//! included (seeing its term confirmed, it starts another).
//!
//! **Missed nodes.** Nodes that have just restarted may not yet know a
//! peer is up and pass an election round it. A node announced a coordinator
//! lower than itself therefore elects again, and the highest live id wins.
//!
//! **Stale news of oneself.** A restarted node drops an announcement that
//! names itself for a term no newer than the newest it had seen before the
//! restart (its state file keeps it): that is its previous incarnation's
//! term, in a message passed on again after a crash, and if it took it
//! (and confirmed it with its own election, as a sitting coordinator's
//! term) it would hand out that term's fences a second time, its grant
//! counter starting over. The simulator found it, with two crashes. It
//! elects on joining, if it is the highest, and a fresh epoch settles it.
//!
//! **Lost messages.** A node remembers what it last passed on and to whom;
//! if that successor is reported down before the message could have gone
//! round, it passes it to the next live successor instead. An ELECTION that
//! comes back to a node other than its starter means the starter died: it
//! is dropped, and the node starts an election of its own. A starter whose
//! message has not come back when its timer fires starts again.

use crate::algorithm::{AlgoConfig, Algorithm, ElectionAlgorithm, Out};
use crate::outbox::{message_kinds, timers, Time};
use crate::types::{Epoch, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// The messages of [`Ring`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum RingMsg {
    /// Collecting the live ids.
    Election {
        /// The node that started this election.
        starter: NodeId,
        /// The ids it has passed, in ring order.
        ids: Vec<NodeId>,
        /// The highest epoch seen by any node it passed.
        seen: Epoch,
        /// The term of a sitting coordinator it passed, if any.
        incumbent: Option<Epoch>,
    },
    /// Announcing the result.
    Coordinator {
        /// The node whose ELECTION came back and turned into this.
        starter: NodeId,
        /// The new coordinator: the highest id collected.
        leader: NodeId,
        /// Its epoch.
        epoch: Epoch,
        /// The members of the ring, as collected.
        members: Vec<NodeId>,
        /// The nodes this announcement has passed: it goes round once,
        /// ending at its starter or at the first node it passed already
        /// (when the starter has died).
        visited: Vec<NodeId>,
    },
}

message_kinds!(RingMsg {
    Election => "election",
    Coordinator => "coordinator",
});

timers! {
    /// The timers of [`Ring`].
    pub enum RingTimer {
        /// The starter's own election has not come back in time.
        Return,
        /// A peer follows a newer term: wait for its announcement before electing.
        CatchUp,
    }
}

/// The ring election; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Ring {
    id: NodeId,
    members: Vec<NodeId>,
    alive: BTreeSet<NodeId>,
    /// The highest epoch seen anywhere.
    seen: Epoch,
    /// The highest epoch this node had seen before it (re)started, from
    /// its state file: no term up to it can be this node's now.
    boot: Epoch,
    /// Whom this node follows, and for which epoch.
    current: Option<(NodeId, Epoch)>,
    /// Whether the node has joined; before that it starts no election.
    started: bool,
    /// Whether this node's own election is circulating.
    electing: bool,
    /// Whether this node, as coordinator, was asked for a new term (its
    /// mutual exclusion ran out of fences): until a newer epoch is taken,
    /// no election confirms its term, its own or another node's.
    renewing: bool,
    /// Whether the catch-up timer is armed: waiting for an announcement
    /// (of a newer term, or of the successor of a lost coordinator).
    catching_up: bool,
    /// The newest coordinator peers' heartbeats named (a joining node's
    /// lesson), with its epoch.
    hinted: Option<(NodeId, Epoch)>,
    /// The last message passed on, and to whom, until it can no longer be
    /// lost to that successor's crash.
    passed: Option<(NodeId, RingMsg)>,
    /// How long a starter waits for its election to come back.
    timeout: Duration,
    /// How long a node that heard of a newer term waits for its
    /// announcement before electing.
    catch_up: Duration,
}

impl Ring {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        Ring {
            id: cfg.id,
            members: cfg.members.clone(),
            alive: BTreeSet::new(),
            seen: crate::Restored::epoch_of(cfg),
            boot: crate::Restored::epoch_of(cfg),
            current: None,
            started: false,
            electing: false,
            renewing: false,
            catching_up: false,
            hinted: None,
            passed: None,
            // A safety net for a message lost in a way the failure detector
            // did not report: a round takes a few message delays.
            timeout: cfg.timing.failure_timeout * 4,
            catch_up: cfg.timing.failure_timeout,
        }
    }

    /// The first live node after this one in ring order (this node itself
    /// when it is alone).
    fn successor(&self) -> NodeId {
        let after = self.members.iter().copied().filter(|&m| m > self.id);
        let before = self.members.iter().copied().filter(|&m| m < self.id);
        after.chain(before).find(|m| self.alive.contains(m)).unwrap_or(self.id)
    }

    /// Passes `msg` to the successor, or handles it here when alone.
    fn pass(&mut self, now: Time, msg: RingMsg, out: &mut Out<Ring>) {
        let next = self.successor();
        if next == self.id {
            self.passed = None;
            self.receive(now, msg, out);
        } else {
            self.passed = Some((next, msg.clone()));
            out.send(next, msg);
        }
    }

    /// Whether no live peer has a higher id: the node the ring would elect.
    fn highest_alive(&self) -> bool {
        self.alive.iter().all(|&p| p < self.id)
    }

    /// Waits as long as an election may take to go round for the
    /// announcement of the node that starts (see *Deferring*), then elects
    /// if none came.
    fn defer(&mut self, now: Time, out: &mut Out<Ring>) {
        self.catching_up = true;
        out.set_timer(RingTimer::CatchUp, now + self.timeout);
    }

    /// Starts an election if this is the highest live node, or waits for
    /// that node's (see *Deferring*).
    fn start_or_defer(&mut self, now: Time, out: &mut Out<Ring>) {
        if self.highest_alive() {
            self.start(now, out);
        } else {
            self.defer(now, out);
        }
    }

    /// This node's term, if it is the sitting coordinator.
    fn own_term(&self) -> Option<Epoch> {
        self.current.filter(|(leader, _)| *leader == self.id).map(|(_, e)| e)
    }

    /// The term an election passing here may confirm: this node's own,
    /// unless it asked for a new one.
    fn confirmable(&self) -> Option<Epoch> {
        self.own_term().filter(|_| !self.renewing)
    }

    fn start(&mut self, now: Time, out: &mut Out<Ring>) {
        if !self.started {
            return;
        }
        self.electing = true;
        out.set_timer(RingTimer::Return, now + self.timeout);
        let msg = RingMsg::Election {
            starter: self.id,
            ids: vec![self.id],
            seen: self.seen,
            incumbent: self.confirmable(),
        };
        self.pass(now, msg, out);
    }

    fn follow(&mut self, leader: NodeId, epoch: Epoch, out: &mut Out<Ring>) {
        if self.current.is_none_or(|(_, current)| epoch > current) {
            self.renewing = false;
            if std::mem::take(&mut self.catching_up) {
                out.cancel_timer(RingTimer::CatchUp);
            }
            self.current = Some((leader, epoch));
            out.coordinator(leader, epoch);
        }
    }

    fn receive(&mut self, now: Time, msg: RingMsg, out: &mut Out<Ring>) {
        match msg {
            RingMsg::Election { starter, mut ids, seen, incumbent } => {
                self.seen = self.seen.max(seen);
                if starter == self.id {
                    // Home: the ids collected are the live ring.
                    self.electing = false;
                    out.cancel_timer(RingTimer::Return);
                    let leader = ids.iter().copied().max().unwrap_or(self.id);
                    // A sitting coordinator that is still the highest live
                    // node, in the newest term anyone has seen, is confirmed
                    // rather than re-elected (a restarted one sits on no
                    // term, so it gets a fresh epoch).
                    let epoch = match incumbent {
                        Some(term)
                            if term.leader() == leader && term == self.seen && !self.renewing =>
                        {
                            term
                        }
                        _ => self.seen.next_for(leader),
                    };
                    self.seen = epoch;
                    self.follow(leader, epoch, out);
                    let visited = vec![self.id];
                    let announce =
                        RingMsg::Coordinator { starter, leader, epoch, members: ids, visited };
                    self.pass(now, announce, out);
                } else if ids.contains(&self.id) {
                    // Round twice without its starter: the starter died.
                    self.start(now, out);
                } else {
                    ids.push(self.id);
                    let seen = self.seen;
                    let incumbent = incumbent.max(self.confirmable());
                    self.pass(now, RingMsg::Election { starter, ids, seen, incumbent }, out);
                }
            }
            RingMsg::Coordinator { starter, leader, epoch, members, mut visited } => {
                if epoch.leader() != leader {
                    return; // an epoch names its winner; this one is forged
                }
                self.seen = self.seen.max(epoch);
                if self.current.is_some_and(|(_, current)| epoch < current) {
                    return; // an older result
                }
                if leader == self.id && epoch <= self.boot {
                    return; // this node's term before it restarted: stale
                }
                self.follow(leader, epoch, out);
                if starter == self.id || visited.contains(&self.id) {
                    // Once round: done (or a coordinator's word to a
                    // newcomer, which goes no further).
                    if matches!(&self.passed, Some((_, RingMsg::Coordinator { epoch: e, .. })) if *e == epoch)
                    {
                        self.passed = None;
                    }
                } else {
                    visited.push(self.id);
                    let announce =
                        RingMsg::Coordinator { starter, leader, epoch, members, visited };
                    self.pass(now, announce, out);
                }
                // An election that missed this node (its peers did not see
                // it yet) named a lower one: elect again, this node included.
                // So does a coordinator that wants a new term and sees its
                // old one confirmed by a round that passed it before.
                let confirmed = self.renewing && Some(epoch) == self.own_term();
                if (leader < self.id || confirmed) && !self.electing {
                    self.start(now, out);
                }
            }
        }
    }
}

impl Algorithm for Ring {
    type Msg = RingMsg;
    type Timer = RingTimer;

    fn handle_message(&mut self, now: Time, _from: NodeId, msg: RingMsg, out: &mut Out<Ring>) {
        self.receive(now, msg, out);
    }

    fn handle_timer(&mut self, now: Time, timer: RingTimer, out: &mut Out<Ring>) {
        match timer {
            RingTimer::Return if self.electing => self.start(now, out),
            RingTimer::CatchUp => {
                self.catching_up = false;
                let behind = self.current.is_none_or(|(leader, current)| {
                    current < self.seen || (leader != self.id && !self.alive.contains(&leader))
                });
                if behind && !self.electing {
                    self.start(now, out);
                }
            }
            _ => {}
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<Ring>) {
        self.alive.insert(peer);
        // A lower newcomer would wait for an announcement: tell it who
        // coordinates, directly (`visited` names it, so it goes no
        // further). A higher one elects and takes over.
        if let Some(epoch) = self.own_term().filter(|_| peer < self.id) {
            let mut members: Vec<NodeId> = self.alive.iter().copied().collect();
            members.push(self.id);
            members.sort();
            let visited = vec![self.id, peer];
            out.send(
                peer,
                RingMsg::Coordinator { starter: self.id, leader: self.id, epoch, members, visited },
            );
        }
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Out<Ring>) {
        self.alive.remove(&peer);
        // What was passed to it may be lost: pass it to the next one.
        if let Some((to, msg)) = self.passed.take() {
            if to == peer {
                self.pass(now, msg, out);
            } else {
                self.passed = Some((to, msg));
            }
        }
        let leader_lost = self.current.is_some_and(|(leader, _)| leader == peer);
        // Waiting for a higher node that is now gone too, or for nobody
        // higher at all: no need to wait on.
        let waiting_for_it = self.catching_up && peer > self.id && self.highest_alive();
        if (leader_lost || waiting_for_it) && !self.electing {
            self.start_or_defer(now, out);
        }
    }
}

impl ElectionAlgorithm for Ring {
    /// Learns a coordinator above this node, or elects: see *Joining*.
    fn handle_start(&mut self, now: Time, out: &mut Out<Ring>) {
        self.started = true;
        let above = |(leader, epoch): (NodeId, Epoch)| leader > self.id && epoch == self.seen;
        if self.current.is_some_and(above) {
            return;
        }
        if self.hinted.is_some_and(above) {
            self.defer(now, out);
            return;
        }
        self.start_or_defer(now, out);
    }

    /// A sitting coordinator starts a round that confirms no term: it
    /// comes back as a new epoch (for this node, if it is still the
    /// highest live one).
    fn handle_renew(&mut self, now: Time, out: &mut Out<Ring>) {
        if self.own_term().is_none() || self.renewing {
            return;
        }
        self.renewing = true;
        if !self.electing {
            self.start(now, out);
        }
    }

    fn handle_epoch_hint(
        &mut self,
        now: Time,
        _from: NodeId,
        epoch: Epoch,
        coordinator: Option<NodeId>,
        out: &mut Out<Ring>,
    ) {
        if let Some(leader) = coordinator {
            if epoch.leader() == leader && self.hinted.is_none_or(|(_, e)| e < epoch) {
                self.hinted = Some((leader, epoch));
            }
        }
        self.seen = self.seen.max(epoch);
        // A peer follows a newer term. Its announcement is probably on the
        // way round: give it a failure timeout before electing, or every
        // node the announcement has yet to reach would start an election.
        let behind = self.current.is_none_or(|(_, current)| current < epoch);
        if behind && !self.electing && !self.catching_up && self.started {
            self.catching_up = true;
            out.set_timer(RingTimer::CatchUp, now + self.catch_up);
        }
    }

    fn coordinator(&self) -> Option<NodeId> {
        self.current.map(|(leader, _)| leader)
    }

    fn epoch(&self) -> Epoch {
        self.current.map_or(self.seen, |(_, e)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::RingMsg::*;
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    fn ids(v: &[u32]) -> Vec<NodeId> {
        v.iter().map(|&i| n(i)).collect()
    }

    fn node(id: u32, members: u32, up: &[u32]) -> Ring {
        let mut r =
            with_up(Ring::new(&AlgoConfig::for_test(id, members)), up.iter().map(|&p| n(p)));
        r.started = true;
        r
    }

    /// Passes a message round the ring by hand, returning what each node
    /// did, until nobody sends anything.
    fn circulate(nodes: &mut [Ring], first: (NodeId, RingMsg)) -> Vec<Action<RingMsg, RingTimer>> {
        let mut coordinator_actions = Vec::new();
        let mut next = vec![first];
        while let Some((to, msg)) = next.pop() {
            let node = nodes.iter_mut().find(|r| r.id == to).unwrap();
            let mut out = Out::<Ring>::new();
            node.handle_message(T, n(0), msg, &mut out);
            for a in out.take() {
                match a {
                    Action::Send { to, msg } => next.push((to, msg)),
                    a @ Action::Coordinator { .. } => coordinator_actions.push(a),
                    _ => {}
                }
            }
        }
        coordinator_actions
    }

    #[test]
    fn election_skips_dead_successors_and_collects_the_live_ids() {
        // 2 starts; 3 is down, so 4 is its successor.
        let mut r = node(2, 5, &[1, 4, 5]);
        let mut out = Out::<Ring>::new();
        r.start(T, &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(
                n(4),
                Election { starter: n(2), ids: ids(&[2]), seen: Epoch(0), incumbent: None }
            )]
        );
        // Node 4 adds itself and passes to 5, which passes to 1 (wrapping).
        let mut r4 = node(4, 5, &[1, 2, 5]);
        r4.handle_message(
            T,
            n(2),
            Election { starter: n(2), ids: ids(&[2]), seen: Epoch(0), incumbent: None },
            &mut out,
        );
        assert_eq!(
            sends(&mut out),
            vec![(
                n(5),
                Election { starter: n(2), ids: ids(&[2, 4]), seen: Epoch(0), incumbent: None }
            )]
        );
    }

    #[test]
    fn back_home_the_election_becomes_a_coordinator_announcement() {
        let mut r = node(2, 5, &[1, 4, 5]);
        let mut out = Out::<Ring>::new();
        r.start(T, &mut out);
        out.take();
        let back = Election {
            starter: n(2),
            ids: ids(&[2, 4, 5, 1]),
            seen: Epoch::new(3, n(5)),
            incumbent: None,
        };
        r.handle_message(T, n(1), back, &mut out);
        let epoch = Epoch::new(4, n(5));
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: RingTimer::Return },
                Action::Coordinator { leader: n(5), epoch },
                Action::Send {
                    to: n(4),
                    msg: Coordinator {
                        starter: n(2),
                        leader: n(5),
                        epoch,
                        members: ids(&[2, 4, 5, 1]),
                        visited: ids(&[2]),
                    }
                },
            ]
        );
    }

    #[test]
    fn two_simultaneous_starters_end_in_one_answer() {
        let mut nodes: Vec<Ring> = (1..=4).map(|i| node(i, 4, &[1, 2, 3, 4])).collect();
        let mut out = Out::<Ring>::new();
        nodes[1].start(T, &mut out); // node 2
        let from2 = sends(&mut out).remove(0);
        nodes[3].start(T, &mut out); // node 4
        let from4 = sends(&mut out).remove(0);
        // Node 2's round completes first; node 4's message, started before
        // it, picks up the epoch it left behind and settles one round later.
        let mut results = circulate(&mut nodes, from2);
        results.extend(circulate(&mut nodes, from4));
        assert!(results
            .iter()
            .all(|a| matches!(a, Action::Coordinator { leader, .. } if *leader == n(4))));
        let settled = nodes[0].current;
        assert_eq!(settled.map(|(leader, _)| leader), Some(n(4)));
        assert!(nodes.iter().all(|r| r.current == settled), "one answer everywhere");
    }

    #[test]
    fn a_message_passed_to_a_node_that_dies_goes_to_the_next() {
        let mut r = node(1, 4, &[2, 3, 4]);
        let mut out = Out::<Ring>::new();
        r.start(T, &mut out);
        out.take();
        r.handle_peer_down(T, n(2), &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(
                n(3),
                Election { starter: n(1), ids: ids(&[1]), seen: Epoch(0), incumbent: None }
            )]
        );
    }

    #[test]
    fn an_election_whose_starter_died_is_replaced() {
        let mut r = node(3, 4, &[1, 2, 4]);
        let mut out = Out::<Ring>::new();
        let orphan =
            Election { starter: n(1), ids: ids(&[1, 3, 4]), seen: Epoch(0), incumbent: None };
        r.handle_message(T, n(2), orphan, &mut out);
        assert_eq!(
            sends(&mut out),
            vec![(
                n(4),
                Election { starter: n(3), ids: ids(&[3]), seen: Epoch(0), incumbent: None }
            )]
        );
    }

    #[test]
    fn a_lone_node_elects_itself() {
        let mut r = node(1, 3, &[]);
        let mut out = Out::<Ring>::new();
        r.handle_start(T, &mut out);
        assert!(out
            .take()
            .contains(&Action::Coordinator { leader: n(1), epoch: Epoch::new(1, n(1)) }));
    }

    #[test]
    fn an_older_announcement_is_dropped() {
        let mut r = node(2, 4, &[1, 3, 4]);
        let mut out = Out::<Ring>::new();
        r.current = Some((n(4), Epoch::new(5, n(4))));
        let old = Coordinator {
            starter: n(1),
            leader: n(3),
            epoch: Epoch::new(4, n(3)),
            members: ids(&[1, 3]),
            visited: ids(&[1]),
        };
        r.handle_message(T, n(1), old, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn a_sitting_highest_coordinator_is_confirmed_not_re_elected() {
        let term = Epoch::new(7, n(4));
        let mut r = node(2, 4, &[1, 3, 4]);
        r.current = Some((n(4), term));
        r.seen = term;
        let mut out = Out::<Ring>::new();
        r.start(T, &mut out);
        out.take();
        // Node 4, the sitting coordinator, recorded its term on the way.
        let back =
            Election { starter: n(2), ids: ids(&[2, 3, 4, 1]), seen: term, incumbent: Some(term) };
        r.handle_message(T, n(1), back, &mut out);
        let announced = sends(&mut out);
        assert!(
            matches!(&announced[0].1, Coordinator { epoch, .. } if *epoch == term),
            "{announced:?}"
        );
    }

    #[test]
    fn an_announcement_whose_starter_died_stops_after_one_round() {
        // Node 2 started, then died; its announcement reaches a lone node 1.
        let mut r = node(1, 3, &[]);
        let mut out = Out::<Ring>::new();
        let epoch = Epoch::new(1, n(3));
        let members = ids(&[2, 3, 1]);
        let orphan = Coordinator {
            starter: n(2),
            leader: n(3),
            epoch,
            members: members.clone(),
            visited: ids(&[2, 3]),
        };
        r.handle_message(T, n(3), orphan, &mut out);
        // Alone, node 1 passes it to itself, sees it has been here, and stops.
        assert_eq!(out.take(), vec![Action::Coordinator { leader: n(3), epoch }]);
        assert!(r.passed.is_none());
    }

    #[test]
    fn a_higher_node_announced_a_lower_coordinator_elects_again() {
        let mut r = node(3, 3, &[1, 2]);
        let mut out = Out::<Ring>::new();
        let epoch = Epoch::new(2, n(2));
        let announce = Coordinator {
            starter: n(1),
            leader: n(2),
            epoch,
            members: ids(&[1, 2]),
            visited: ids(&[1, 2]),
        };
        r.handle_message(T, n(2), announce, &mut out);
        let sent = sends(&mut out);
        assert!(
            sent.iter().any(|(_, m)| matches!(m, Election { starter, .. } if *starter == n(3))),
            "{sent:?}"
        );
    }

    #[test]
    fn on_losing_the_coordinator_only_the_highest_live_node_starts() {
        let term = Epoch::new(1, n(4));
        let mut lower = node(2, 4, &[1, 3, 4]);
        let mut highest = node(3, 4, &[1, 2, 4]);
        for r in [&mut lower, &mut highest] {
            r.current = Some((n(4), term));
            r.seen = term;
        }
        let mut out = Out::<Ring>::new();
        highest.handle_peer_down(T, n(4), &mut out);
        let sent = sends(&mut out);
        assert!(
            matches!(&sent[..], [(to, Election { starter, .. })] if *to == n(1) && *starter == n(3))
        );
        // Node 2 waits for node 3's announcement...
        lower.handle_peer_down(T, n(4), &mut out);
        let waited = out.take();
        assert!(
            matches!(&waited[..], [Action::SetTimer { timer: RingTimer::CatchUp, .. }]),
            "{waited:?}"
        );
        // ... and starts its own only if none came.
        lower.handle_timer(T, RingTimer::CatchUp, &mut out);
        let sent = sends(&mut out);
        assert!(
            matches!(&sent[..], [(_, Election { starter, .. })] if *starter == n(2)),
            "{sent:?}"
        );
        // Had it come, the wait would have ended quietly.
        let mut lower = node(2, 4, &[1, 3, 4]);
        lower.current = Some((n(4), term));
        lower.seen = term;
        lower.handle_peer_down(T, n(4), &mut out);
        out.take();
        let next = Epoch::new(2, n(3));
        let announce = Coordinator {
            starter: n(3),
            leader: n(3),
            epoch: next,
            members: ids(&[3, 1, 2]),
            visited: ids(&[3, 1]),
        };
        lower.handle_message(T, n(1), announce, &mut out);
        let acts = out.take();
        assert!(acts.contains(&Action::CancelTimer { timer: RingTimer::CatchUp }), "{acts:?}");
        assert_eq!(lower.current, Some((n(3), next)));
    }

    #[test]
    fn a_joining_node_learns_the_coordinator_above_it_without_an_election() {
        let term = Epoch::new(3, n(3));
        // The sitting coordinator tells a lower newcomer directly.
        let mut coordinator = node(3, 3, &[2]);
        coordinator.current = Some((n(3), term));
        coordinator.seen = term;
        let mut out = Out::<Ring>::new();
        coordinator.handle_peer_up(T, n(1), &mut out);
        let sent = sends(&mut out);
        let [(to, word)] = &sent[..] else { panic!("{sent:?}") };
        assert_eq!(*to, n(1));
        // The newcomer, hinted by a peer's heartbeat, waits rather than
        // circling the ring...
        let mut newcomer = with_up(Ring::new(&AlgoConfig::for_test(1, 3)), [n(2), n(3)]);
        newcomer.handle_epoch_hint(T, n(2), term, Some(n(3)), &mut out);
        newcomer.handle_start(T, &mut out);
        let acts = out.take();
        assert!(
            matches!(&acts[..], [Action::SetTimer { timer: RingTimer::CatchUp, .. }]),
            "{acts:?}"
        );
        // ... follows the word, and passes it on to nobody.
        newcomer.handle_message(T, n(3), word.clone(), &mut out);
        let acts = out.take();
        assert!(acts.contains(&Action::Coordinator { leader: n(3), epoch: term }), "{acts:?}");
        assert!(!acts.iter().any(|a| matches!(a, Action::Send { .. })), "{acts:?}");
        // A newcomer above the coordinator is not told; it elects.
        coordinator.handle_peer_up(T, n(4), &mut out);
        assert!(sends(&mut out).is_empty());
        // And a cluster starting together: the highest node elects, the
        // others wait for it.
        let mut top = with_up(Ring::new(&AlgoConfig::for_test(3, 3)), [n(1), n(2)]);
        top.handle_start(T, &mut out);
        assert!(
            matches!(&sends(&mut out)[..], [(_, Election { starter, .. })] if *starter == n(3))
        );
        let mut other = with_up(Ring::new(&AlgoConfig::for_test(2, 3)), [n(1), n(3)]);
        other.handle_start(T, &mut out);
        assert!(sends(&mut out).is_empty());
    }
}

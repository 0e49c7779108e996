//! # `bully` — the highest live id wins
//!
//! **Source.** Garcia-Molina (1982), as told by Tanenbaum, *Distributed Operating
//! Systems* (1995), §3.3.1: a node that notices
//! the coordinator is gone sends ELECTION to every higher node; any higher
//! node that is alive answers OK and takes over the election; a node that
//! hears no OK wins and announces itself with COORDINATOR to everyone. A node
//! that comes back up holds an election, so the biggest id always wins.
//!
//! **Assumptions.** Reliable links while both ends are up; crash-stop
//! failures; a failure detector that eventually reports every crash. A
//! node wins only when the detector counts no higher node alive (see
//! *Winning*); the answer timeout paces asking again.
//!
//! **Messages per election.** With the failure detector's help only live
//! higher nodes are asked. When the highest live node starts, it sends no
//! ELECTION at all and only N-1 COORDINATOR messages; when the lowest
//! starts, about N²/2 messages in all, as in the textbook.
//!
//! **One change from the textbook.** When the coordinator is lost, every
//! live node hears of it at about the same moment (its connections close,
//! or its silence runs out everywhere), and in the textbook every one of
//! them holds an election: N²/2 ELECTIONs and as many OKs, all to elect
//! the highest live node. Here only the highest live node (by this node's
//! detector) starts; it has nobody to ask and wins at once. The others
//! wait for its COORDINATOR as if it had answered OK, and hold an election
//! of their own only if none comes within the timeout. A lost coordinator
//! then costs N-2 COORDINATOR messages instead of about N²; measured on 64
//! node processes on two cores, agreement after a kill went from 74 ms to
//! 25 ms (median). Joining does the same (see *Joining*). A challenge
//! from below and a newer epoch still start a textbook election, as does
//! a wait that no announcement ends within the timeout.
//!
//! **Winning: by the detector, not by a clock.** In the textbook a node
//! that hears no OK within its timeout wins. Here it wins once its failure
//! detector counts no higher node alive: at once if none was (the highest
//! live node), the moment the last is reported down, and never while one it
//! still counts alive is merely slow, which is asked again each timeout
//! instead. The textbook's rule makes two clocks judge the same node, the
//! answer timeout and the detector's, and under load they disagree: on 128
//! node processes on two cores, the node just below a coordinator slowed by
//! a burst of challenges won when its answer came late, and the
//! coordinator, alive, bullied its way back. Each such pair of new terms
//! rebuilt every lock's grants and set off more challenges: once 56 rounds
//! where 3 were due. In ten alternating pairs of `coterie demo --nodes 128`
//! runs (start, kill, restart: 3 rounds due), before this rule 3 runs took
//! more (14, 9 and 35 rounds; one kill took 3.4 s to settle, one restart
//! 10.8 s), entries median 409; with it, every run that started took the 3
//! rounds, entries median 690. (One run did not start: its 128 processes
//! took longer than the demo then waited for them.) A higher node that is
//! alive answers every ELECTION (an OK always goes back), so the wait ends;
//! one that is gone is reported, so it ends then.
//!
//! **Epochs.** The winner takes the round after every round it has seen
//! (every message and heartbeat carries the sender's highest epoch), with
//! its own id in the epoch, so epochs only grow and no two winners share
//! one. A COORDINATOR of an older epoch is stale and ignored. A coordinator
//! that hears of a newer epoch than its own holds a fresh election.
//!
//! **Joining.** A node holds no election before the engine says it has
//! joined (heard from every peer, or waited for them): until then it does
//! not know who is alive and would wrongly win. It answers OK meanwhile, as
//! it will hold its own election the moment it joins. A node that joins a
//! cluster whose coordinator is above it learns that coordinator instead
//! of challenging it (the textbook's election would only confirm it): it
//! follows the one that announced itself already, or waits, as after an
//! OK, for the announcement of the one its peers' heartbeats name, and
//! elects only if none comes within the timeout. A node above the
//! coordinator still bullies. On 128 node processes started together on
//! two cores, the challenges of joining nodes that a starved coordinator
//! answered late had won spurious rounds: 36 to 58 at start-up. A node
//! that joins with no coordinator known at all, as in a cluster started
//! together, does as after a lost coordinator: the highest live node
//! elects (and wins at once), and the others wait for its COORDINATOR,
//! electing only if none comes within the timeout. The textbook has each
//! of them challenge every node above it, about N²/2 ELECTIONs and as
//! many OKs to reach the same result; on those 128 processes the start
//! took 328 ms (median of five, 85–560, one with five rounds) with them
//! and 50 ms (44–94, one round each) without.
//!
//! **State walk.** *Idle* (following a coordinator, or none yet) → on the
//! coordinator's failure, *deferred* (above) unless it is the highest live
//! node; on joining, *deferred* too, unless it is the highest live node
//! or a coordinator above it is known (see *Joining*); on an ELECTION from
//! a lower node, or a deferral that timed out,
//! *electing*: ELECTION sent to the live higher nodes, waiting for an OK.
//! Every higher node reported down: win. No OK before the timeout while
//! one is still counted alive: ask again, and wait again.
//! An OK: *deferred*, waiting for the winner's COORDINATOR; none before the
//! timeout: elect again. COORDINATOR from a higher node: follow it, idle.
//! A challenge from a lower node to a sitting coordinator is answered with
//! OK and a fresh COORDINATOR of the same epoch, not a new election.
//!
//! **Catching up.** A coordinator announces itself to every peer that comes
//! up after its election. A node whose peers' heartbeats name a newer epoch
//! than the one it follows missed an announcement: it holds an election,
//! which the sitting coordinator answers.

use crate::algorithm::{AlgoConfig, Algorithm, ElectionAlgorithm, Out};
use crate::outbox::{message_kinds, timers, Time};
use crate::types::{Epoch, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// The messages of [`Bully`]. Each carries the highest epoch its sender has
/// seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum BullyMsg {
    /// To a higher node: are you alive? I am holding an election.
    Election {
        /// The sender's highest epoch seen.
        epoch: Epoch,
    },
    /// To a lower node: I am alive and will take over.
    Ok {
        /// The sender's highest epoch seen.
        epoch: Epoch,
    },
    /// To everyone: I am the coordinator for `epoch`.
    Coordinator {
        /// The new epoch.
        epoch: Epoch,
    },
}

message_kinds!(BullyMsg {
    Election => "election",
    Ok => "ok",
    Coordinator => "coordinator",
});

timers! {
    /// The timers of [`Bully`].
    pub enum BullyTimer {
        /// Waiting for an OK from a higher node.
        Answer,
        /// Waiting for the COORDINATOR of the node that said OK.
        Announce,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Electing,
    Deferred,
}

/// The bully algorithm; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Bully {
    id: NodeId,
    alive: BTreeSet<NodeId>,
    /// The highest epoch seen anywhere.
    seen: Epoch,
    /// Whom this node follows, and for which epoch.
    current: Option<(NodeId, Epoch)>,
    phase: Phase,
    /// Whether the node has joined; before that it holds no election.
    started: bool,
    /// How long to wait for an OK or a COORDINATOR.
    timeout: Duration,
    /// The coordinator peers' heartbeats name, with its epoch (the
    /// newest named): what a joining node learns before it hears from
    /// the coordinator itself.
    hinted: Option<(NodeId, Epoch)>,
}

impl Bully {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        Bully {
            id: cfg.id,
            alive: BTreeSet::new(),
            seen: crate::Restored::epoch_of(cfg),
            current: None,
            phase: Phase::Idle,
            started: false,
            timeout: cfg.timing.failure_timeout,
            hinted: None,
        }
    }

    fn observe(&mut self, epoch: Epoch) {
        self.seen = self.seen.max(epoch);
    }

    fn higher_alive(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.alive.range(NodeId(self.id.0 + 1)..).copied()
    }

    fn is_coordinator(&self) -> bool {
        self.current.is_some_and(|(leader, _)| leader == self.id)
    }

    fn hold_election(&mut self, now: Time, out: &mut Out<Bully>) {
        if !self.started {
            return;
        }
        let higher: Vec<NodeId> = self.higher_alive().collect();
        if higher.is_empty() {
            self.win(out);
            return;
        }
        out.broadcast(higher, BullyMsg::Election { epoch: self.seen });
        self.phase = Phase::Electing;
        out.cancel_timer(BullyTimer::Announce);
        out.set_timer(BullyTimer::Answer, now + self.timeout);
    }

    /// The coordinator was lost. Every live node hears of it at about the
    /// same moment (its connections close, or its silence runs out
    /// everywhere), and the highest live one wins at once: the others
    /// wait for its COORDINATOR, as after an OK, and hold an election of
    /// their own only if none comes within the timeout. Without the wait,
    /// all of them elect at once, and N live nodes send each other about
    /// N²/2 ELECTIONs and as many OKs to reach the same result.
    fn await_successor(&mut self, now: Time, out: &mut Out<Bully>) {
        if !self.started || self.higher_alive().next().is_none() {
            self.hold_election(now, out);
            return;
        }
        self.phase = Phase::Deferred;
        out.cancel_timer(BullyTimer::Answer);
        out.set_timer(BullyTimer::Announce, now + self.timeout);
    }

    /// No OK came within the timeout: a higher node still counted alive is
    /// slow, not gone, and is asked again; with none left, this node wins
    /// (*Winning* in the module documentation).
    fn unanswered(&mut self, now: Time, out: &mut Out<Bully>) {
        let higher: Vec<NodeId> = self.higher_alive().collect();
        if higher.is_empty() {
            self.win(out);
            return;
        }
        out.broadcast(higher, BullyMsg::Election { epoch: self.seen });
        out.set_timer(BullyTimer::Answer, now + self.timeout);
    }

    fn win(&mut self, out: &mut Out<Bully>) {
        let epoch = self.seen.next_for(self.id);
        self.seen = epoch;
        self.phase = Phase::Idle;
        out.cancel_timer(BullyTimer::Answer);
        out.cancel_timer(BullyTimer::Announce);
        out.broadcast(self.alive.iter().copied(), BullyMsg::Coordinator { epoch });
        self.follow(self.id, epoch, out);
    }

    fn follow(&mut self, leader: NodeId, epoch: Epoch, out: &mut Out<Bully>) {
        if self.current != Some((leader, epoch)) {
            self.current = Some((leader, epoch));
            out.coordinator(leader, epoch);
        }
    }
}

impl Algorithm for Bully {
    type Msg = BullyMsg;
    type Timer = BullyTimer;

    fn handle_message(&mut self, now: Time, from: NodeId, msg: BullyMsg, out: &mut Out<Bully>) {
        match msg {
            BullyMsg::Election { epoch } => {
                self.observe(epoch);
                if from > self.id {
                    return; // elections only go upwards
                }
                out.send(from, BullyMsg::Ok { epoch: self.seen });
                if let (true, Some((_, current))) = (self.is_coordinator(), self.current) {
                    if current == self.seen {
                        // Still the highest live node: confirm, don't re-elect.
                        out.send(from, BullyMsg::Coordinator { epoch: current });
                        return;
                    }
                }
                if self.phase == Phase::Idle {
                    self.hold_election(now, out);
                }
            }
            BullyMsg::Ok { epoch } => {
                self.observe(epoch);
                if self.phase == Phase::Electing && from > self.id {
                    self.phase = Phase::Deferred;
                    out.cancel_timer(BullyTimer::Answer);
                    out.set_timer(BullyTimer::Announce, now + self.timeout);
                }
            }
            BullyMsg::Coordinator { epoch } => {
                if epoch.leader() != from {
                    return; // an epoch names its winner; this one is forged
                }
                let stale = epoch < self.seen;
                self.observe(epoch);
                if from < self.id {
                    // A lower node thinks it leads while this one is alive.
                    if self.phase == Phase::Idle {
                        self.hold_election(now, out);
                    }
                    return;
                }
                if stale {
                    return;
                }
                self.phase = Phase::Idle;
                out.cancel_timer(BullyTimer::Answer);
                out.cancel_timer(BullyTimer::Announce);
                self.follow(from, epoch, out);
            }
        }
    }

    fn handle_timer(&mut self, now: Time, timer: BullyTimer, out: &mut Out<Bully>) {
        match (timer, self.phase) {
            (BullyTimer::Answer, Phase::Electing) => self.unanswered(now, out),
            (BullyTimer::Announce, Phase::Deferred) => self.hold_election(now, out),
            _ => {} // a timer that outlived its phase
        }
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<Bully>) {
        self.alive.insert(peer);
        // A lower newcomer missed the announcement: tell it who coordinates.
        // A higher one is not told: it holds its own election and takes
        // over, and a claim from below would only make it elect twice.
        if let (true, Some((_, epoch))) = (self.is_coordinator(), self.current) {
            if peer < self.id {
                out.send(peer, BullyMsg::Coordinator { epoch });
            }
        }
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Out<Bully>) {
        self.alive.remove(&peer);
        let leader_lost = self.current.is_some_and(|(leader, _)| leader == peer);
        let no_one_higher = peer > self.id && self.higher_alive().next().is_none();
        match self.phase {
            Phase::Idle if leader_lost => self.await_successor(now, out),
            // Nobody higher is left to answer or announce: no need to wait.
            Phase::Electing | Phase::Deferred if no_one_higher => self.win(out),
            _ => {}
        }
    }
}

impl ElectionAlgorithm for Bully {
    /// Learns a coordinator above this node, or elects: see *Joining* in
    /// the module documentation.
    fn handle_start(&mut self, now: Time, out: &mut Out<Bully>) {
        self.started = true;
        if self.current.is_some_and(|(leader, epoch)| leader > self.id && epoch == self.seen) {
            return;
        }
        if self.hinted.is_some_and(|(leader, epoch)| leader > self.id && epoch == self.seen) {
            self.phase = Phase::Deferred;
            out.set_timer(BullyTimer::Announce, now + self.timeout);
            return;
        }
        // No coordinator yet, as in a cluster started together: the
        // highest live node elects, the others wait for its word.
        self.await_successor(now, out);
    }

    /// A sitting coordinator with no election under way holds one: it is
    /// the highest live node, so it wins at once, with the next epoch.
    fn handle_renew(&mut self, now: Time, out: &mut Out<Bully>) {
        if self.phase == Phase::Idle && self.current.is_some_and(|(leader, _)| leader == self.id) {
            self.hold_election(now, out);
        }
    }

    fn handle_epoch_hint(
        &mut self,
        now: Time,
        _from: NodeId,
        epoch: Epoch,
        coordinator: Option<NodeId>,
        out: &mut Out<Bully>,
    ) {
        if let Some(leader) = coordinator {
            if epoch.leader() == leader && self.hinted.is_none_or(|(_, e)| e < epoch) {
                self.hinted = Some((leader, epoch));
            }
        }
        self.observe(epoch);
        // A peer follows a newer term than this node: a coordinator is out
        // of date, a follower missed an announcement. Either way an election
        // settles it (a sitting coordinator answers with a fresh COORDINATOR).
        let behind = self.current.is_none_or(|(_, current)| current < epoch);
        if behind && self.phase == Phase::Idle {
            self.hold_election(now, out);
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
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    fn node(id: u32, members: u32, up: &[u32]) -> Bully {
        let cfg = AlgoConfig::for_test(id, members);
        let mut b = with_up(Bully::new(&cfg), up.iter().map(|&p| n(p)));
        b.started = true;
        b
    }

    fn e(round: u64, leader: u32) -> Epoch {
        Epoch::new(round, n(leader))
    }

    /// Node 1 of 3 joining: not yet started, with its peers up.
    fn joining(id: u32) -> Bully {
        let cfg = AlgoConfig::for_test(id, 3);
        with_up(Bully::new(&cfg), cfg.peers())
    }

    #[test]
    fn a_joining_node_follows_the_coordinator_above_it_that_announced_itself() {
        let mut b = joining(1);
        let mut out = Out::<Bully>::new();
        b.handle_message(T, n(3), BullyMsg::Coordinator { epoch: e(1, 3) }, &mut out);
        out.take();
        b.handle_start(T, &mut out);
        assert!(out.is_empty(), "no challenge: {:?}", out.take());
        assert_eq!(b.coordinator(), Some(n(3)));
    }

    #[test]
    fn a_joining_node_waits_for_the_coordinator_its_peers_name() {
        let mut b = joining(1);
        let mut out = Out::<Bully>::new();
        b.handle_epoch_hint(T, n(2), e(4, 3), Some(n(3)), &mut out);
        b.handle_start(T, &mut out);
        let wait = Duration::from_millis(250);
        assert_eq!(
            out.take(),
            vec![Action::SetTimer { timer: BullyTimer::Announce, at: T + wait }]
        );
        b.handle_message(T, n(3), BullyMsg::Coordinator { epoch: e(4, 3) }, &mut out);
        assert_eq!(b.coordinator(), Some(n(3)));
        // None coming in time: the textbook election.
        let mut b = joining(1);
        b.handle_epoch_hint(T, n(2), e(4, 3), Some(n(3)), &mut out);
        b.handle_start(T, &mut out);
        out.take();
        b.handle_timer(T + wait, BullyTimer::Announce, &mut out);
        assert!(out.take().contains(&send(3, BullyMsg::Election { epoch: e(4, 3) })));
    }

    #[test]
    fn a_node_above_the_coordinator_still_bullies_on_joining() {
        let mut b = joining(3);
        let mut out = Out::<Bully>::new();
        b.handle_message(T, n(2), BullyMsg::Coordinator { epoch: e(1, 2) }, &mut out);
        out.take();
        b.handle_start(T, &mut out);
        assert!(b.coordinator() == Some(n(3)), "it took over");
    }

    #[test]
    fn highest_live_node_wins_at_once() {
        let mut b = node(5, 5, &[1, 2, 3, 4]);
        let mut out = Out::<Bully>::new();
        b.handle_start(T, &mut out);
        let mut expected: Vec<_> = (1..=4)
            .map(|p| Action::Send { to: n(p), msg: BullyMsg::Coordinator { epoch: e(1, 5) } })
            .collect();
        expected.insert(0, Action::CancelTimer { timer: BullyTimer::Announce });
        expected.insert(0, Action::CancelTimer { timer: BullyTimer::Answer });
        expected.push(Action::Coordinator { leader: n(5), epoch: e(1, 5) });
        assert_eq!(out.take(), expected);
    }

    #[test]
    fn lower_node_asks_the_live_higher_ones_and_defers_on_ok() {
        let mut b = node(3, 5, &[1, 2, 4, 5]);
        let mut out = Out::<Bully>::new();
        let wait = Duration::from_millis(250);
        // Joining with no coordinator yet: the highest live node's word is
        // waited for first (*Joining*).
        b.handle_start(T, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: BullyTimer::Answer },
                Action::SetTimer { timer: BullyTimer::Announce, at: T + wait },
            ]
        );
        // None came: the textbook election.
        b.handle_timer(T + wait, BullyTimer::Announce, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::Send { to: n(4), msg: BullyMsg::Election { epoch: Epoch(0) } },
                Action::Send { to: n(5), msg: BullyMsg::Election { epoch: Epoch(0) } },
                Action::CancelTimer { timer: BullyTimer::Announce },
                Action::SetTimer { timer: BullyTimer::Answer, at: T + wait * 2 },
            ]
        );
        b.handle_message(T + wait, n(4), BullyMsg::Ok { epoch: Epoch(0) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: BullyTimer::Answer },
                Action::SetTimer { timer: BullyTimer::Announce, at: T + wait * 2 },
            ]
        );
        b.handle_message(T + wait, n(5), BullyMsg::Coordinator { epoch: e(1, 5) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: BullyTimer::Answer },
                Action::CancelTimer { timer: BullyTimer::Announce },
                Action::Coordinator { leader: n(5), epoch: e(1, 5) },
            ]
        );
    }

    #[test]
    fn coordinator_crash_elects_next_highest_with_a_larger_epoch() {
        let mut b = node(4, 5, &[1, 2, 3, 5]);
        let mut out = Out::<Bully>::new();
        b.handle_message(T, n(5), BullyMsg::Coordinator { epoch: e(7, 5) }, &mut out);
        out.take();
        b.handle_peer_down(T, n(5), &mut out);
        let actions = out.take();
        assert_eq!(actions.last(), Some(&Action::Coordinator { leader: n(4), epoch: e(8, 4) }));
        let announced = actions
            .iter()
            .filter(|a| {
                matches!(a, Action::Send { msg: BullyMsg::Coordinator { epoch }, .. } if *epoch == e(8, 4))
            })
            .count();
        assert_eq!(announced, 3);
    }

    #[test]
    fn a_lower_node_that_loses_the_coordinator_waits_for_the_highest_live_one() {
        let mut b = node(2, 5, &[1, 3, 4, 5]);
        let mut out = Out::<Bully>::new();
        b.handle_message(T, n(5), BullyMsg::Coordinator { epoch: e(7, 5) }, &mut out);
        out.take();
        // n4 sees the same failure and wins at once: n2 sends nothing.
        b.handle_peer_down(T, n(5), &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::CancelTimer { timer: BullyTimer::Answer },
                Action::SetTimer { timer: BullyTimer::Announce, at: Duration::from_millis(250) },
            ]
        );
        b.handle_message(T, n(4), BullyMsg::Coordinator { epoch: e(8, 4) }, &mut out);
        assert_eq!(out.take().last(), Some(&Action::Coordinator { leader: n(4), epoch: e(8, 4) }));
        // Had no announcement come, it would have held the election itself.
        let mut b = node(2, 5, &[1, 3, 4, 5]);
        b.handle_message(T, n(5), BullyMsg::Coordinator { epoch: e(7, 5) }, &mut out);
        b.handle_peer_down(T, n(5), &mut out);
        out.take();
        b.handle_timer(T, BullyTimer::Announce, &mut out);
        let asked: Vec<_> = out
            .take()
            .into_iter()
            .filter_map(|a| match a {
                Action::Send { to, msg: BullyMsg::Election { .. } } => Some(to),
                _ => None,
            })
            .collect();
        assert_eq!(asked, vec![n(3), n(4)]);
    }

    #[test]
    fn no_answer_from_a_live_node_means_asking_again_and_its_loss_victory() {
        let mut b = node(2, 3, &[3]);
        let mut out = Out::<Bully>::new();
        let wait = Duration::from_millis(250);
        b.handle_start(T, &mut out);
        b.handle_timer(T + wait, BullyTimer::Announce, &mut out);
        out.take();
        // Node 3 is slow, not reported down: asked again, no victory.
        b.handle_timer(T + wait * 2, BullyTimer::Answer, &mut out);
        assert_eq!(
            out.take(),
            vec![
                send(3, BullyMsg::Election { epoch: Epoch(0) }),
                Action::SetTimer { timer: BullyTimer::Answer, at: T + wait * 3 },
            ]
        );
        assert_eq!(b.coordinator(), None);
        // The detector reports it down: victory at once.
        b.handle_peer_down(T + wait * 2, n(3), &mut out);
        assert_eq!(out.take().last(), Some(&Action::Coordinator { leader: n(2), epoch: e(1, 2) }));
    }

    #[test]
    fn silent_winner_after_ok_restarts_the_election() {
        let mut b = node(2, 3, &[3]);
        let mut out = Out::<Bully>::new();
        b.handle_start(T, &mut out);
        b.handle_message(T, n(3), BullyMsg::Ok { epoch: Epoch(0) }, &mut out);
        out.take();
        b.handle_timer(Duration::from_millis(500), BullyTimer::Announce, &mut out);
        assert_eq!(
            out.take()[0],
            Action::Send { to: n(3), msg: BullyMsg::Election { epoch: Epoch(0) } }
        );
    }

    #[test]
    fn sitting_coordinator_confirms_itself_to_a_challenger() {
        let mut b = node(5, 5, &[1, 2, 3, 4]);
        let mut out = Out::<Bully>::new();
        b.handle_start(T, &mut out);
        out.take();
        b.handle_message(T, n(2), BullyMsg::Election { epoch: e(1, 5) }, &mut out);
        assert_eq!(
            out.take(),
            vec![
                Action::Send { to: n(2), msg: BullyMsg::Ok { epoch: e(1, 5) } },
                Action::Send { to: n(2), msg: BullyMsg::Coordinator { epoch: e(1, 5) } },
            ]
        );
    }

    #[test]
    fn stale_coordinator_is_ignored() {
        let mut b = node(2, 5, &[4, 5]);
        let mut out = Out::<Bully>::new();
        b.handle_message(T, n(5), BullyMsg::Coordinator { epoch: e(3, 5) }, &mut out);
        out.take();
        b.handle_message(T, n(4), BullyMsg::Coordinator { epoch: e(2, 4) }, &mut out);
        assert!(out.is_empty());
        assert_eq!(b.coordinator(), Some(n(5)));
    }

    #[test]
    fn lower_claimant_is_bullied() {
        let mut b = node(4, 4, &[1]);
        let mut out = Out::<Bully>::new();
        b.handle_message(T, n(1), BullyMsg::Coordinator { epoch: e(1, 1) }, &mut out);
        assert_eq!(out.take().last(), Some(&Action::Coordinator { leader: n(4), epoch: e(2, 4) }));
    }

    #[test]
    fn coordinator_that_hears_a_newer_epoch_re_elects() {
        let mut b = node(5, 5, &[4]);
        let mut out = Out::<Bully>::new();
        b.handle_start(T, &mut out);
        out.take();
        b.handle_epoch_hint(T, n(4), e(9, 4), Some(n(4)), &mut out);
        assert_eq!(out.take().last(), Some(&Action::Coordinator { leader: n(5), epoch: e(10, 5) }));
    }

    #[test]
    fn coordinator_announces_itself_to_a_lower_newcomer_only() {
        let mut b = node(5, 6, &[4]);
        let mut out = Out::<Bully>::new();
        b.handle_start(T, &mut out);
        out.take();
        b.handle_peer_up(T, n(2), &mut out);
        b.handle_peer_up(T, n(6), &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send { to: n(2), msg: BullyMsg::Coordinator { epoch: e(1, 5) } }]
        );
    }

    #[test]
    fn follower_that_missed_an_announcement_catches_up() {
        let mut b = node(2, 5, &[4, 5]);
        let mut out = Out::<Bully>::new();
        b.handle_message(T, n(4), BullyMsg::Coordinator { epoch: e(2, 4) }, &mut out);
        out.take();
        // Node 4's heartbeat says it now follows epoch 3 (node 5's).
        b.handle_epoch_hint(T, n(4), e(3, 5), Some(n(5)), &mut out);
        let sent: Vec<_> =
            out.take().into_iter().filter(|a| matches!(a, Action::Send { .. })).collect();
        assert_eq!(
            sent,
            vec![
                Action::Send { to: n(4), msg: BullyMsg::Election { epoch: e(3, 5) } },
                Action::Send { to: n(5), msg: BullyMsg::Election { epoch: e(3, 5) } },
            ]
        );
        // A hint of the term it already follows changes nothing.
        let mut c = node(2, 5, &[5]);
        c.handle_message(T, n(5), BullyMsg::Coordinator { epoch: e(3, 5) }, &mut out);
        out.take();
        c.handle_epoch_hint(T, n(5), e(3, 5), Some(n(5)), &mut out);
        assert!(out.is_empty());
    }
}

//! # `token-ring` — one token, passed round a logical ring
//!
//! **Source.** The token-ring algorithm (Tanenbaum 1995, §3.2; Jones's
//! lecture notes, 22C:116, Iowa, 2002): the live nodes
//! form a ring in id order, a single token travels round it, and only the
//! node holding the token may enter. The usual textbook exercise supplies the
//! repair: a regenerated token carries a higher sequence number (here, a
//! *generation*) and a token of an older generation is discarded.
//!
//! **Assumptions.** Reliable FIFO links while both ends are up; crash-stop
//! failures reported by the failure detector; an elected coordinator (the
//! election layer provides one) to regenerate a lost token. No partitions:
//! a holder wrongly suspected would see its token regenerated elsewhere.
//!
//! **Messages per entry.** Under contention the token goes straight from
//! one wanting node to the next: 1 message per entry, whoever is next on
//! the ring. An idle ring does not spin: a token that completes a lap in
//! which nobody entered *parks* where the lap began, and every node saw
//! where that is as the lap went by. A node that wants the critical section
//! then sends one WANT to the parker, which sends the token straight to
//! it; after the entry the token makes one more lap and parks at the last
//! holder. So an isolated entry costs N + 2 messages: the textbook's
//! "1 .. N" counts only the hops toward the requester, and pays for it
//! with a token that never stops. The parker's own entries cost nothing:
//! it enters on its parked token (or on the token back from an idle lap
//! that began there, if it asked again before the lap was over), every
//! node already looks for the token there, and unless another node asked
//! for it meanwhile, it stays parked there when the holder leaves (0
//! messages; with a WANT, the lap as before). A client that takes the
//! same lock again and again at one node pays the N + 2 once.
//!
//! **State walk.** A node is *idle*, *wanting* or *holding*, and
//! separately may have the token *parked* with it. Receiving the token:
//! a wanting node enters (the token's entry counter goes up; it becomes
//! the new start of the idle lap); an idle node passes it on to its
//! successor among the live nodes, unless the idle lap started with itself,
//! in which case it parks it. Leaving, the holder sends the token on a lap
//! (which passes it straight to the next wanting node); a holder that
//! entered where every node looks for the token, with no WANT or probe
//! since, parks it again instead. A WANT that reaches the start of a lap
//! after the lap passed the wanter sends the token round once more when
//! it is back, instead of parking it.
//!
//! **Losing and regenerating the token.** Only the coordinator makes a
//! token, and only after a *probe round*: it picks a generation higher than
//! any it has seen (a ballot: a counter and its own id, so two coordinators
//! never pick the same one) and asks every live node to promise to discard
//! tokens of older generations. A node holding a token sets it aside,
//! unused (or, inside the critical section, passes it on to nobody when it
//! leaves), and answers with the token's generation and entry count;
//! otherwise it answers no. Once every live node has answered, the
//! coordinator tells the node with the newest token to KEEP it, relabelled
//! with the new generation, and any other holder the new generation, which
//! makes theirs stale. If nobody has one, any token still in flight is one
//! every node will discard on arrival, and the coordinator makes a fresh
//! one and sends it round the ring. The coordinator runs a round when it
//! takes office, when a node goes down (it may have had the token, or had
//! it in flight to it), and when a node that has waited far longer than a
//! lap asks (MISSING).
//!
//! Why the verdict waits for every answer: there may be two tokens. A
//! holder wrongly suspected (a hung process, a long pause) keeps its token
//! while a round it was left out of makes another; if each holder relabelled
//! its own on the next probe, as the holder does in the textbook's repair,
//! both would carry the new generation, and both grants would pass a
//! resource that checks fences. Keeping only the newest leaves the old one
//! a generation behind, and its holder's grants stale.
//!
//! **Newcomers.** A node that (re)starts knows no generation, so it cannot
//! tell a stale token from the live one. It keeps any token that reaches
//! it in quarantine, unused, until the coordinator tells it the current
//! generation, then uses the token if it is current and drops it
//! otherwise; or until it is probed, when it reports the token like any
//! holder and waits for the verdict.
//!
//! **Many locks.** Each lock name has a token of its own (and an instance
//! of this algorithm at every node that uses it). A lock new to the
//! cluster has none yet: the first node that wants it sends its WANT to
//! the coordinator, whose instance, new too, starts with a probe round,
//! finds no token and makes one; a node that never saw a lock's token
//! likewise asks the coordinator, which knows where it parks (or, if it
//! forgot, finds out with a round). An idle lock's token stays parked
//! where it last served, and sends nothing. Once idle for a while every
//! node forgets the lock ([`forgettable`](crate::MutexAlgorithm::forgettable)),
//! the parker its parked token with it, and keeps only the generation it
//! knew (its remnant): a stale token still on its way is refused by the
//! next instance as by this one, and the next use, finding no token (a
//! WANT reaches the coordinator, from the wanter or from a node that
//! knows nothing of the token), makes another in a probe round above
//! every remnant's generation: fences still rise.
//!
//! **Fences.** The token carries its generation and the number of entries
//! made with it in that generation; a grant's fence is (generation,
//! entries). Entries within a generation count up (from 0 again when a
//! round relabels the token), and a lock's new generation is higher than
//! every earlier one of that lock, so its fences rise with every grant,
//! also across regenerations. A generation's count has room for 2²⁴ − 1
//! entries (fewer with `fence_room`): the holder that finds it full sets
//! the token aside and asks the coordinator for a round (MISSING), whose
//! verdict relabels the token with a new generation before the next
//! entry. The highest generation seen is the node's watermark, which the
//! engine keeps a reserve above in stable storage: after a restart of
//! every node the next generation is above all earlier ones, and so are
//! its fences.
//!
//! **Sharing a generation.** Fences are compared per lock, so a lock's
//! generation need only be above every earlier generation of that lock.
//! A new instance starts from the node's floor, the highest generation
//! any lock has seen here or at a peer (which is what lets a remnant be
//! dropped, and a paused holder's token be outranked by a coordinator
//! that never saw its lock). Taking a round above it for every new lock
//! would climb a round per lock made, and a fence's major part holds the
//! round in 24 bits (its other 16 name the coordinator): fences would
//! stop rising after 2²⁴ locks. So a coordinator gives a lock that has
//! never had a generation here the highest one it has seen, if that is
//! the highest it proposed itself in this run, for any lock (the engine
//! keeps it, in memory only: [`made`](MutexAlgorithm::made)). That one
//! is above every earlier generation of the lock that the floor covers,
//! as a round above it would be, and the lock never had it: only this
//! run of this node made it, and the instance here that got it would
//! remember it (as a remnant once forgotten, or in the floor of remnants
//! dropped for room, which a shared generation must be above). A restart
//! or a reset starts the node's own from nothing, so a node that lost its
//! stable storage, which cannot tell what it made before, never shares
//! one of those. New locks thus share their first generation, and the
//! rounds are spent by regenerations (a lost or full token, a new
//! coordinator), by restarts, and by remnants dropped at or above the
//! shared one, not by each lock made.
//!
//! **Stable storage.** The watermark is the highest generation seen; the
//! reserve is kept [`RESERVE_ROUNDS`] rounds ahead of it, so a node
//! writes once per that many rounds, and a restart skips at most that
//! many.

use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out};
use crate::outbox::{message_kinds, timers, Time};
use crate::types::{CsState, Epoch, Fence, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::Duration;

/// The token. Its generation is a ballot ([`Epoch`]): a round counter in
/// the high bits and the id of the coordinator that made it in the low ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Token {
    /// The generation; tokens of older generations are discarded.
    pub generation: Epoch,
    /// Critical-section entries made with this token so far.
    pub entries: u64,
    /// Where the current run of idle hops began: the token parks when it
    /// gets back there with nobody having entered.
    pub idle_since: NodeId,
}

/// The messages of [`TokenRing`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum TokenMsg {
    /// The token itself.
    Token(Token),
    /// `wanter` wants the critical section; sent to the node believed to
    /// park the token, and forwarded along fresher beliefs (`hops` so far).
    Want {
        /// The node that wants to enter.
        wanter: NodeId,
        /// Times the request was forwarded.
        hops: u32,
    },
    /// The coordinator's probe: discard tokens older than `generation`,
    /// and say whether you have the token.
    Probe {
        /// The generation being set up.
        generation: Epoch,
    },
    /// The answer to a [`TokenMsg::Probe`].
    ProbeAck {
        /// The generation probed.
        generation: Epoch,
        /// The token the answering node set aside for the verdict, if any:
        /// its generation and entry count.
        held: Option<(Epoch, u64)>,
        /// The highest generation the node knows; above `generation` when
        /// the probe came too late.
        known: Epoch,
    },
    /// The coordinator's verdict to the node with the newest token: keep
    /// it, relabelled with `generation`, and use it.
    Keep {
        /// The generation settled on.
        generation: Epoch,
    },
    /// The coordinator tells a newcomer the current generation (and a
    /// holder of an older token that its token is dead).
    Generation {
        /// The current generation.
        generation: Epoch,
    },
    /// A waiter has not seen the token for far longer than a lap.
    Missing,
}

message_kinds!(TokenMsg {
    Token => "token",
    Want => "want",
    Probe => "probe",
    ProbeAck => "probe-ack",
    Keep => "keep",
    Generation => "generation",
    Missing => "missing",
});

timers! {
    /// The timers of [`TokenRing`].
    pub enum TokenTimer {
        /// The patience timer of a waiting node.
        Patience,
    }
}

/// The coordinator's probe round in progress.
#[derive(Debug, Clone, Hash)]
struct Round {
    generation: Epoch,
    awaiting: BTreeSet<NodeId>,
    /// Nodes that answered with a token set aside, this one included.
    holders: BTreeSet<NodeId>,
    /// The newest of those tokens (generation, entries) and its holder.
    newest: Option<(Epoch, u64, NodeId)>,
}

impl Round {
    fn held(&mut self, by: NodeId, held: Option<(Epoch, u64)>) {
        let Some((generation, entries)) = held else {
            return;
        };
        self.holders.insert(by);
        if self.newest.is_none_or(|(g, e, _)| (generation, entries) > (g, e)) {
            self.newest = Some((generation, entries, by));
        }
    }
}

/// The token-ring algorithm; see the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct TokenRing {
    id: NodeId,
    failure_timeout: Duration,
    /// The entries a generation may number ([`MutexOptions::fence_room`](crate::algorithm::MutexOptions::fence_room)).
    room: u64,
    alive: BTreeSet<NodeId>,
    coordinator: Option<NodeId>,
    state: CsState,
    /// The token, while this node holds the critical section or parks it.
    token: Option<Token>,
    /// A token kept unused: it arrived before this node knew the current
    /// generation, or it is set aside for a probe round's verdict.
    quarantine: Option<Token>,
    /// The token in use inside the critical section was reported to a
    /// probe round: on leaving, it is set aside for the verdict.
    pending: bool,
    /// The oldest generation this node accepts; `None` until it is told.
    generation: Option<Epoch>,
    /// The highest generation seen anywhere, to pick a higher one.
    highest: Epoch,
    /// Where the token is believed to park.
    parker: Option<NodeId>,
    /// Inside with the token, entered where every node looks for it: on
    /// the token parked here, or on one back from an idle lap that began
    /// here. Unless [`wanted`](Self::wanted), it parks here again on
    /// leaving, and sends nothing.
    stays: bool,
    /// A WANT (or MISSING) reached this node that it could not answer with
    /// a parked token: when the token next leaves here it goes on a lap,
    /// which passes the wanter, and not back to park.
    wanted: bool,
    /// Coordinator only: the probe round in progress.
    round: Option<Round>,
    /// Coordinator only: the generation its last round settled on.
    settled: Option<Epoch>,
    /// The highest generation this node proposed in this run, for any
    /// lock (the engine's [`made`](MutexAlgorithm::made)).
    made: Epoch,
    /// The highest remnant of any lock the engine dropped for room: this
    /// lock may have been one of them.
    dropped: Epoch,
}

impl TokenRing {
    /// A node with nobody known to be up yet.
    pub fn new(cfg: &AlgoConfig) -> Self {
        TokenRing {
            id: cfg.id,
            failure_timeout: cfg.timing.failure_timeout,
            room: cfg.mutex_options.fence_room(),
            alive: BTreeSet::new(),
            coordinator: None,
            state: CsState::Idle,
            token: None,
            quarantine: None,
            pending: false,
            generation: None,
            highest: Epoch::default(),
            parker: None,
            stays: false,
            wanted: false,
            round: None,
            settled: None,
            made: Epoch::default(),
            dropped: Epoch::default(),
        }
    }

    /// The next live node after this one in id order, wrapping round.
    fn successor(&self) -> Option<NodeId> {
        let after = self.alive.range(self.id..).find(|&&p| p != self.id);
        after.or_else(|| self.alive.iter().next()).copied()
    }

    fn is_coordinator(&self) -> bool {
        self.coordinator == Some(self.id)
    }

    /// How long a waiter waits before suspecting the token is lost: a lap
    /// of failure timeouts, far longer than a lap normally takes.
    fn patience(&self) -> Duration {
        self.failure_timeout * (self.alive.len() as u32 + 2)
    }

    /// Learns that generations older than `generation` are dead.
    fn learn(&mut self, generation: Epoch) {
        self.highest = self.highest.max(generation);
        if self.generation.is_none_or(|g| generation > g) {
            self.generation = Some(generation);
        }
    }

    /// A token arrived (or was released from quarantine).
    fn receive(&mut self, now: Time, token: Token, out: &mut Out<TokenRing>) {
        self.highest = self.highest.max(token.generation);
        let Some(current) = self.generation else {
            // Cannot tell yet whether it is stale: keep it, unused.
            self.put_aside(token);
            return;
        };
        if token.generation < current {
            return; // a token of a dead generation
        }
        self.generation = Some(token.generation);
        if let Some(mine) = self.token {
            // Two live tokens cannot exist; keep the newer, defensively.
            if mine.generation >= token.generation {
                return;
            }
        }
        self.token = None;
        // Back from a lap that began here with nobody entering: every node
        // it passed now looks for it here.
        let known_here = token.idle_since == self.id;
        self.hold_or_pass(now, token, known_here, out);
    }

    /// Enters with `token` if this node wants to, otherwise passes it on
    /// (or parks it after an idle lap). `known_here`: every node looks for
    /// the token at this node, so that an entry may leave it parked here.
    fn hold_or_pass(
        &mut self,
        now: Time,
        mut token: Token,
        known_here: bool,
        out: &mut Out<TokenRing>,
    ) {
        if self.state == CsState::Wanting {
            if token.entries >= self.room {
                // This generation has granted its last fence. The token is
                // set aside, unused, and a probe round asked for: its
                // verdict relabels the token with a new generation, entries
                // from 0.
                self.put_aside(token);
                self.ask_for_round(now, out);
                // Asked again if the round does not come (a lost MISSING).
                out.set_timer(TokenTimer::Patience, now + self.patience());
                return;
            }
            self.stays = known_here;
            token.entries += 1;
            token.idle_since = self.id;
            self.state = CsState::Held;
            self.token = Some(token);
            out.cancel_timer(TokenTimer::Patience);
            out.grant(Fence::new(token.generation.0, token.entries));
            return;
        }
        if token.idle_since != self.id && !self.alive.contains(&token.idle_since) {
            token.idle_since = self.id; // the lap's start is gone: start anew
        }
        match self.successor() {
            Some(next) if token.idle_since != self.id => {
                // Who asked here has not seen this lap yet: it passes them.
                self.wanted = false;
                self.parker = Some(token.idle_since);
                out.send(next, TokenMsg::Token(token));
            }
            // Back from an idle lap, but a node asked here meanwhile, after
            // the lap had passed it: once more round, past that node.
            Some(_) if self.wanted => self.lap(token, out),
            _ => self.park(token),
        }
    }

    fn park(&mut self, token: Token) {
        self.token = Some(token);
        self.parker = Some(self.id);
    }

    /// Sends the token on a lap that starts here.
    fn lap(&mut self, mut token: Token, out: &mut Out<TokenRing>) {
        self.wanted = false;
        token.idle_since = self.id;
        match self.successor() {
            Some(next) => {
                self.parker = Some(self.id);
                out.send(next, TokenMsg::Token(token));
            }
            None => self.park(token),
        }
    }

    /// Another node asks this one for the token and is not served on the
    /// spot: if the token is here or on a lap from here (this node is
    /// where every node looks for it), it goes on a lap when it leaves
    /// here. A node that only passes the WANT on has nothing to remember.
    fn asked(&mut self) {
        if self.parker == Some(self.id) {
            self.wanted = true;
        }
    }

    /// A parked token goes straight to `wanter`.
    fn unpark_to(&mut self, wanter: NodeId, out: &mut Out<TokenRing>) -> bool {
        if self.state != CsState::Idle || wanter == self.id || !self.alive.contains(&wanter) {
            return false;
        }
        let Some(token) = self.token.take() else {
            return false;
        };
        // The wanter's release sends it on a lap, past any other wanter.
        self.wanted = false;
        self.parker = Some(wanter);
        out.send(wanter, TokenMsg::Token(token));
        true
    }

    /// A probe came: whatever token is here is set aside, unused, until
    /// the round's verdict. Returns its generation and entry count.
    fn set_aside(&mut self) -> Option<(Epoch, u64)> {
        if self.state == CsState::Held {
            if let Some(t) = self.token {
                // Whatever the verdict, the waiters may no longer know
                // where the token parks: it goes on a lap after all.
                self.stays = false;
                self.pending = true;
                self.quarantine = None;
                return Some((t.generation, t.entries));
            }
        }
        if let Some(t) = self.token.take() {
            self.put_aside(t);
        }
        self.quarantine.map(|q| (q.generation, q.entries))
    }

    /// The verdict: this node's token is the newest. It takes
    /// `generation` and goes to a waiter here or round the ring: a round
    /// means something went wrong, and the nodes that wait may no longer
    /// know where the token parks.
    fn keep(&mut self, now: Time, generation: Epoch, out: &mut Out<TokenRing>) {
        if self.generation.is_some_and(|g| generation < g) {
            return; // the verdict of an abandoned round
        }
        self.learn(generation);
        // Relabelled, the token counts its entries from 0 again: every
        // fence of the new generation is above every fence of the old.
        if self.pending {
            self.pending = false;
            if let Some(t) = &mut self.token {
                t.generation = generation;
                t.entries = 0;
            }
            return;
        }
        let Some(mut token) = self.quarantine.take() else {
            return;
        };
        token.generation = generation;
        token.entries = 0;
        if self.state == CsState::Wanting {
            self.hold_or_pass(now, token, false, out);
        } else {
            self.lap(token, out);
        }
    }

    /// Keeps `token` in quarantine, unused, unless a newer one is there.
    fn put_aside(&mut self, token: Token) {
        if self.quarantine.is_none_or(|q| q.generation < token.generation) {
            self.quarantine = Some(token);
        }
    }

    /// Has the coordinator run a probe round (this node's own, if it
    /// coordinates): MISSING.
    fn ask_for_round(&mut self, now: Time, out: &mut Out<TokenRing>) {
        match self.coordinator {
            Some(c) if c == self.id && self.round.is_none() => self.start_round(now, out),
            Some(c) if c == self.id => {}
            Some(c) if self.alive.contains(&c) => out.send(c, TokenMsg::Missing),
            _ => {}
        }
    }

    /// Coordinator: starts a probe round for a new generation.
    fn start_round(&mut self, now: Time, out: &mut Out<TokenRing>) {
        let generation = self.next_generation();
        self.made = self.made.max(generation);
        self.learn(generation);
        let mut round = Round {
            generation,
            awaiting: self.alive.clone(),
            holders: BTreeSet::new(),
            newest: None,
        };
        round.held(self.id, self.set_aside());
        out.broadcast(self.alive.iter().copied(), TokenMsg::Probe { generation });
        self.round = Some(round);
        self.finish_round(now, out);
    }

    /// Coordinator: the generation a new round proposes. One above every
    /// generation seen, unless this lock has had none here and the highest
    /// seen is one this node made in this run, which a lock that never
    /// had it may share (see "Sharing a generation" above).
    fn next_generation(&self) -> Epoch {
        let highest = self.highest;
        let shared = self.generation.is_none()
            && highest == self.made
            && highest > self.dropped
            && highest != Epoch::default();
        if shared {
            highest
        } else {
            highest.next_for(self.id)
        }
    }

    /// Coordinator: settles the round once every live node has answered.
    fn finish_round(&mut self, now: Time, out: &mut Out<TokenRing>) {
        let Some(round) = &self.round else {
            return;
        };
        if !round.awaiting.is_empty() {
            return;
        }
        let Round { generation, holders, newest, .. } = self.round.take().expect("checked");
        if self.highest > generation {
            // Some node had seen a newer generation: try above it.
            return self.start_round(now, out);
        }
        self.settled = Some(generation);
        match newest {
            Some((_, _, keeper)) => {
                for other in holders.into_iter().filter(|&h| h != keeper && h != self.id) {
                    out.send(other, TokenMsg::Generation { generation });
                }
                if keeper == self.id {
                    self.keep(now, generation, out);
                } else {
                    // This node's own token, if it had an older one, is
                    // dead: the generation it learnt makes it stale.
                    self.drop_stale();
                    out.send(keeper, TokenMsg::Keep { generation });
                }
            }
            None => {
                let token = Token { generation, entries: 0, idle_since: self.id };
                if self.state == CsState::Wanting {
                    self.hold_or_pass(now, token, false, out);
                } else {
                    self.lap(token, out); // round the ring, past every waiter
                }
            }
        }
    }

    /// `wanter` wants the token, and `from` (the wanter, or a node that
    /// believed the token parks here) asks this node for it.
    fn want(
        &mut self,
        now: Time,
        from: NodeId,
        wanter: NodeId,
        hops: u32,
        out: &mut Out<TokenRing>,
    ) {
        if self.unpark_to(wanter, out) {
            return;
        }
        self.asked();
        if hops as usize >= self.alive.len() {
            return;
        }
        // Not parked here: pass the request on to a fresher belief.
        if let Some(p) = self.parker.filter(|&p| p != self.id && p != wanter && p != from) {
            return out.send(p, TokenMsg::Want { wanter, hops: hops + 1 });
        }
        if self.is_coordinator() {
            // The node it believed parks the token says it does not (it
            // forgot the lock, its parked token with it), or it knows of
            // no token: find the token, or make another, with a round.
            // Otherwise the token is circulating and passes the wanter.
            let lost = self.parker.is_none_or(|p| p == from);
            if lost && self.token.is_none() && self.round.is_none() {
                self.start_round(now, out);
            }
        } else if self.parker.is_none() && self.token.is_none() {
            // Knows nothing of the token (its instance is new): the
            // coordinator knows, or finds out.
            let c = self.coordinator.filter(|&c| c != from && self.alive.contains(&c));
            if let Some(c) = c {
                out.send(c, TokenMsg::Want { wanter, hops: hops + 1 });
            }
        }
    }

    /// Drops a token set aside that is older than the current generation.
    fn drop_stale(&mut self) {
        let Some(current) = self.generation else {
            return;
        };
        if self.quarantine.is_some_and(|q| q.generation < current) {
            self.quarantine = None;
        }
        if self.pending && self.token.is_some_and(|t| t.generation < current) {
            // Still inside with it: its fence is stale; it goes nowhere.
            self.pending = false;
            self.token = None;
        }
    }
}

impl Algorithm for TokenRing {
    type Msg = TokenMsg;
    type Timer = TokenTimer;

    fn handle_message(&mut self, now: Time, from: NodeId, msg: TokenMsg, out: &mut Out<TokenRing>) {
        match msg {
            TokenMsg::Token(token) => self.receive(now, token, out),
            TokenMsg::Want { wanter, hops } => self.want(now, from, wanter, hops, out),
            TokenMsg::Probe { generation } => {
                self.highest = self.highest.max(generation);
                if self.generation.is_some_and(|g| generation < g) {
                    let known = self.highest;
                    out.send(from, TokenMsg::ProbeAck { generation, held: None, known });
                    return;
                }
                self.learn(generation);
                let held = self.set_aside();
                out.send(from, TokenMsg::ProbeAck { generation, held, known: generation });
            }
            TokenMsg::ProbeAck { generation, held, known } => {
                self.highest = self.highest.max(known);
                let Some(round) = &mut self.round else {
                    return;
                };
                if round.generation != generation {
                    return; // an answer to an abandoned round
                }
                round.awaiting.remove(&from);
                round.held(from, held);
                self.finish_round(now, out);
            }
            TokenMsg::Keep { generation } => self.keep(now, generation, out),
            TokenMsg::Generation { generation } => {
                if self.generation.is_some_and(|g| generation < g) {
                    return; // news of a round since overtaken
                }
                self.learn(generation);
                self.drop_stale();
                if let Some(q) = self.quarantine.take() {
                    self.receive(now, q, out);
                }
            }
            TokenMsg::Missing => {
                if self.unpark_to(from, out) {
                    return;
                }
                self.asked();
                if !self.is_coordinator() || self.round.is_some() {
                    return;
                }
                self.start_round(now, out);
            }
        }
    }

    fn handle_timer(&mut self, now: Time, timer: TokenTimer, out: &mut Out<TokenRing>) {
        if timer != TokenTimer::Patience || self.state != CsState::Wanting {
            return;
        }
        // The token has not come by for far longer than a lap.
        if let Some(parker) = self.parker.filter(|&p| p != self.id && self.alive.contains(&p)) {
            out.send(parker, TokenMsg::Want { wanter: self.id, hops: 0 });
        }
        self.ask_for_round(now, out);
        out.set_timer(TokenTimer::Patience, now + self.patience());
    }

    fn handle_peer_up(&mut self, _now: Time, peer: NodeId, out: &mut Out<TokenRing>) {
        self.alive.insert(peer);
        if !self.is_coordinator() {
            return;
        }
        if let Some(round) = &mut self.round {
            round.awaiting.insert(peer);
            out.send(peer, TokenMsg::Probe { generation: round.generation });
        } else if let Some(generation) = self.settled {
            out.send(peer, TokenMsg::Generation { generation });
        }
    }

    fn handle_peer_down(&mut self, now: Time, peer: NodeId, out: &mut Out<TokenRing>) {
        self.alive.remove(&peer);
        if self.parker == Some(peer) {
            self.parker = None;
        }
        if self.is_coordinator() {
            // It may have had the token, or had it in flight to it.
            self.start_round(now, out);
        }
    }
}

/// How many rounds ahead of the highest generation stable storage keeps
/// its reserve (see the module documentation).
pub const RESERVE_ROUNDS: u64 = 64;

impl MutexAlgorithm for TokenRing {
    const WATERMARK_RESERVE: u64 = Epoch::new(RESERVE_ROUNDS, NodeId(0)).0;

    fn handle_request(&mut self, now: Time, out: &mut Out<TokenRing>) {
        if self.state != CsState::Idle {
            return;
        }
        self.state = CsState::Wanting;
        if let Some(token) = self.token.take() {
            let known_here = self.parker == Some(self.id);
            return self.hold_or_pass(now, token, known_here, out);
        }
        // Ask where the token was last seen to park; a node that never saw
        // it (the lock is new to it) asks the coordinator, which made it
        // or will make it, and knows where it parks or forwards the WANT.
        let ask = self.parker.or(self.coordinator);
        if let Some(to) = ask.filter(|&p| p != self.id && self.alive.contains(&p)) {
            out.send(to, TokenMsg::Want { wanter: self.id, hops: 0 });
        }
        out.set_timer(TokenTimer::Patience, now + self.patience());
    }

    fn handle_release(&mut self, _now: Time, out: &mut Out<TokenRing>) {
        if self.state != CsState::Held {
            return;
        }
        self.state = CsState::Idle;
        if let Some(token) = self.token.take() {
            if self.pending {
                // Reported to a probe round: set aside for its verdict.
                self.pending = false;
                self.quarantine = Some(token);
            } else if self.stays && !self.wanted {
                self.park(token);
            } else {
                self.lap(token, out);
            }
        }
        self.stays = false;
    }

    fn handle_coordinator(
        &mut self,
        now: Time,
        leader: NodeId,
        _epoch: Epoch,
        out: &mut Out<TokenRing>,
    ) {
        self.coordinator = Some(leader);
        if leader == self.id {
            self.start_round(now, out);
        } else {
            self.round = None;
            self.settled = None;
        }
    }

    fn cs_state(&self) -> CsState {
        self.state
    }

    fn watermark(&self) -> u64 {
        self.highest.0
    }

    /// Idle, with no token set aside and no round under way. A token
    /// parked here goes with the lock: the next use finds no token and
    /// makes another with a probe round, whose generation is above this
    /// one's (the remnant says so), so fences still rise. Parked tokens
    /// would otherwise keep an instance of every lock ever used, one at
    /// some node each.
    fn forgettable(&self) -> bool {
        self.state == CsState::Idle
            && self.quarantine.is_none()
            && !self.pending
            && self.round.is_none()
    }

    /// The oldest generation it accepts (a parked token's, here): a token
    /// older than that, still on its way, is stale for the next instance
    /// too, and the next probe round picks a generation above it.
    fn remnant(&self) -> Option<u64> {
        let parked = self.token.map(|t| t.generation);
        self.generation.max(parked).map(|g| g.0)
    }

    fn observe_remnant(&mut self, own: Option<u64>, floor: u64) {
        // A dropped remnant is not guessed from other locks': without one
        // the new instance keeps a token that reaches it until it is told
        // the generation, as a newcomer does. But it may have been this
        // lock's, so no generation at or below it is shared with it.
        if let Some(generation) = own {
            self.learn(Epoch(generation));
        }
        self.dropped = self.dropped.max(Epoch(floor));
    }

    fn observe_watermark(&mut self, watermark: u64) {
        self.highest = self.highest.max(Epoch(watermark));
    }

    fn made(&self) -> u64 {
        self.made.0
    }

    fn observe_made(&mut self, made: u64) {
        self.made = self.made.max(Epoch(made));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Action;
    use crate::testkit::*;

    /// Node `id` of `1..=members`, every peer up, `coordinator` in office.
    fn node(id: u32, members: u32, coordinator: u32) -> (TokenRing, Out<TokenRing>) {
        let cfg = AlgoConfig::for_test(id, members);
        let mut t = TokenRing::new(&cfg);
        let mut out = Out::<TokenRing>::new();
        for p in cfg.peers() {
            t.handle_peer_up(T, p, &mut out);
        }
        t.handle_coordinator(T, n(coordinator), Epoch::default(), &mut out);
        (t, out)
    }

    fn generation(round: u64, by: u32) -> Epoch {
        Epoch::new(round, n(by))
    }

    fn token(round: u64, entries: u64, idle_since: u32) -> Token {
        Token { generation: generation(round, 3), entries, idle_since: n(idle_since) }
    }

    fn sends(actions: Vec<Action<TokenMsg, TokenTimer>>) -> Vec<Action<TokenMsg, TokenTimer>> {
        actions.into_iter().filter(|a| matches!(a, Action::Send { .. })).collect()
    }

    /// A follower that has learned generation 1 (made by node 3).
    fn follower(id: u32) -> TokenRing {
        let (mut t, mut out) = node(id, 3, 3);
        t.handle_message(T, n(3), TokenMsg::Generation { generation: generation(1, 3) }, &mut out);
        t
    }

    #[test]
    fn coordinator_probes_then_makes_the_token_and_parks_it_after_a_lap() {
        let (mut c, mut out) = node(3, 3, 3);
        let g = generation(1, 3);
        let probe = TokenMsg::Probe { generation: g };
        assert_eq!(out.take(), vec![send(1, probe.clone()), send(2, probe)]);
        let no = TokenMsg::ProbeAck { generation: g, held: None, known: g };
        c.handle_message(T, n(1), no.clone(), &mut out);
        assert!(out.is_empty(), "still waiting for node 2");
        c.handle_message(T, n(2), no, &mut out);
        // Nobody has it: a fresh token goes round the ring from here.
        assert_eq!(out.take(), vec![send(1, TokenMsg::Token(token(1, 0, 3)))]);
        // The lap comes back with nobody having entered: it parks.
        c.handle_message(T, n(2), TokenMsg::Token(token(1, 0, 3)), &mut out);
        assert!(out.is_empty());
        c.handle_request(T, &mut out);
        let grant = Action::Grant { fence: Fence::new(g.0, 1) };
        assert_eq!(out.take(), vec![Action::CancelTimer { timer: TokenTimer::Patience }, grant]);
    }

    /// The generation coordinator 3 of three probes for on taking office
    /// in a new instance built as the engine builds one: from `cfg`, at
    /// the node's `floor`, after the node `made` that generation in this
    /// run, with what `remnant` says (own, dropped floor).
    fn first_probe(
        cfg: &AlgoConfig,
        floor: Epoch,
        made: Epoch,
        remnant: Option<(Option<Epoch>, Epoch)>,
    ) -> Epoch {
        let mut t = TokenRing::new(cfg);
        t.observe_watermark(floor.0);
        t.observe_made(made.0);
        if let Some((own, dropped)) = remnant {
            t.observe_remnant(own.map(|g| g.0), dropped.0);
        }
        let mut out = Out::<TokenRing>::new();
        for p in cfg.peers() {
            t.handle_peer_up(T, p, &mut out);
        }
        t.handle_coordinator(T, n(3), Epoch::default(), &mut out);
        match sends(out.take()).first() {
            Some(Action::Send { msg: TokenMsg::Probe { generation }, .. }) => *generation,
            other => panic!("no probe: {other:?}"),
        }
    }

    #[test]
    fn new_locks_share_the_generation_their_coordinator_made_last_in_this_run() {
        let cfg = AlgoConfig::for_test(3, 3);
        let floor = generation(10, 2); // another coordinator's, seen on a heartbeat
                                       // Nothing made in this run yet: a round above the floor.
        let first = first_probe(&cfg, floor, Epoch(0), None);
        assert_eq!(first, generation(11, 3));
        // The floor and what this run made are that generation: the next
        // new lock shares it, and the one after, so the floor stays put.
        assert_eq!(first_probe(&cfg, first, first, None), first);
        assert_eq!(first_probe(&cfg, first, first, None), first);
        // A lock that had it (its remnant says so) goes above it, ...
        let above = generation(12, 3);
        assert_eq!(first_probe(&cfg, first, first, Some((Some(first), Epoch(0)))), above);
        // ... and so does one that may have had it, its remnant dropped.
        assert_eq!(first_probe(&cfg, first, first, Some((None, first))), above);
        // A remnant dropped below it keeps nothing from sharing.
        assert_eq!(first_probe(&cfg, first, first, Some((None, generation(5, 3)))), first);
        // A floor above what this run made: perhaps this lock's, so above.
        assert_eq!(first_probe(&cfg, generation(12, 2), first, None), generation(13, 3));
        // A generation of this node's in the floor that this run did not
        // make (one from before a restart that lost its state, on a peer's
        // heartbeat) is never shared: the lock may have had it.
        assert_eq!(first_probe(&cfg, first, Epoch(0), None), above);
        // A peer that knows a higher generation of the lock makes the
        // round try above it, as for any round.
        let mut t = TokenRing::new(&cfg);
        t.observe_watermark(first.0);
        t.observe_made(first.0);
        let mut out = Out::<TokenRing>::new();
        for p in cfg.peers() {
            t.handle_peer_up(T, p, &mut out);
        }
        t.handle_coordinator(T, n(3), Epoch::default(), &mut out);
        out.take();
        let known = above.next_for(n(2));
        t.handle_message(
            T,
            n(1),
            TokenMsg::ProbeAck { generation: first, held: None, known },
            &mut out,
        );
        t.handle_message(
            T,
            n(2),
            TokenMsg::ProbeAck { generation: first, held: None, known: first },
            &mut out,
        );
        let again = TokenMsg::Probe { generation: known.next_for(n(3)) };
        assert_eq!(sends(out.take()), vec![send(1, again.clone()), send(2, again)]);
        assert_eq!(t.made(), known.next_for(n(3)).0, "what it made is the engine's to keep");
    }

    #[test]
    fn a_generation_out_of_fences_is_relabelled_before_the_next_entry() {
        let mut t = follower(1);
        let mut out = Out::<TokenRing>::new();
        t.handle_request(T, &mut out);
        out.take();
        // The token comes with its generation's last fence spent.
        let full = token(1, Fence::MINOR_MAX, 2);
        t.handle_message(T, n(3), TokenMsg::Token(full), &mut out);
        assert_eq!(sends(out.take()), vec![send(3, TokenMsg::Missing)], "no grant, a round asked");
        assert_eq!(t.cs_state(), CsState::Wanting);
        // The coordinator's round: the token set aside is named, the
        // verdict relabels it, and the entry counts from 1 again.
        let g2 = generation(2, 3);
        t.handle_message(T, n(3), TokenMsg::Probe { generation: g2 }, &mut out);
        let held = Some((full.generation, Fence::MINOR_MAX));
        let ack = TokenMsg::ProbeAck { generation: g2, held, known: g2 };
        assert_eq!(sends(out.take()), vec![send(3, ack)]);
        t.handle_message(T, n(3), TokenMsg::Keep { generation: g2 }, &mut out);
        let grants: Vec<_> =
            out.take().into_iter().filter(|a| matches!(a, Action::Grant { .. })).collect();
        let next = Fence::new(g2.0, 1);
        assert_eq!(grants, vec![Action::Grant { fence: next }]);
        assert!(next > Fence::new(full.generation.0, Fence::MINOR_MAX));
    }

    /// The coordinator of the test above, with the token parked at it.
    fn parker() -> TokenRing {
        let (mut c, mut out) = node(3, 3, 3);
        let g = generation(1, 3);
        let no = TokenMsg::ProbeAck { generation: g, held: None, known: g };
        c.handle_message(T, n(1), no.clone(), &mut out);
        c.handle_message(T, n(2), no, &mut out);
        c.handle_message(T, n(2), TokenMsg::Token(token(1, 0, 3)), &mut out);
        c
    }

    #[test]
    fn the_parkers_own_entries_leave_the_token_parked_at_no_message() {
        let mut c = parker();
        let mut out = Out::<TokenRing>::new();
        for entry in 1..=3 {
            c.handle_request(T, &mut out);
            let grant = Action::Grant { fence: Fence::new(generation(1, 3).0, entry) };
            assert_eq!(out.take().last(), Some(&grant));
            c.handle_release(T, &mut out);
            assert!(out.is_empty(), "entry {entry}: the token stays");
        }
        // Parked still: a WANT from node 1 takes it straight there.
        c.handle_message(T, n(1), TokenMsg::Want { wanter: n(1), hops: 0 }, &mut out);
        assert_eq!(out.take(), vec![send(1, TokenMsg::Token(token(1, 3, 3)))]);
    }

    #[test]
    fn a_want_while_the_parker_is_inside_sends_the_token_on_a_lap() {
        let mut c = parker();
        let mut out = Out::<TokenRing>::new();
        c.handle_request(T, &mut out);
        out.take();
        c.handle_message(T, n(2), TokenMsg::Want { wanter: n(2), hops: 0 }, &mut out);
        assert!(out.is_empty(), "inside: the release answers it");
        c.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(1, TokenMsg::Token(token(1, 1, 3)))]);
        // A token that came by WANT is not parked here: it laps too.
        let mut t = follower(2);
        t.handle_request(T, &mut out);
        t.handle_message(T, n(3), TokenMsg::Token(token(1, 1, 3)), &mut out);
        out.take();
        t.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(3, TokenMsg::Token(token(1, 2, 2)))]);
    }

    #[test]
    fn a_lap_back_at_a_wanting_start_lets_the_token_stay_after_the_entry() {
        let mut t = follower(2);
        let mut out = Out::<TokenRing>::new();
        t.handle_request(T, &mut out);
        t.handle_message(T, n(1), TokenMsg::Token(token(1, 4, 3)), &mut out);
        out.take();
        t.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(3, TokenMsg::Token(token(1, 5, 2)))]);
        // Asking again before the lap is back: it comes back with nobody
        // having entered, and every node saw it begin here.
        t.handle_request(T, &mut out);
        t.handle_message(T, n(1), TokenMsg::Token(token(1, 5, 2)), &mut out);
        out.take();
        t.handle_release(T, &mut out);
        assert!(out.is_empty(), "the token stays");
    }

    #[test]
    fn a_want_behind_the_lap_sends_it_round_again_instead_of_parking() {
        let mut t = follower(2);
        let mut out = Out::<TokenRing>::new();
        t.handle_request(T, &mut out);
        t.handle_message(T, n(1), TokenMsg::Token(token(1, 4, 3)), &mut out);
        t.handle_release(T, &mut out);
        out.take();
        // Node 3, passed by the lap, asks here, where the lap began.
        t.handle_message(T, n(3), TokenMsg::Want { wanter: n(3), hops: 0 }, &mut out);
        assert!(out.is_empty());
        t.handle_message(T, n(1), TokenMsg::Token(token(1, 5, 2)), &mut out);
        assert_eq!(out.take(), vec![send(3, TokenMsg::Token(token(1, 5, 2)))]);
        // That lap back too, with nobody asking: it parks.
        t.handle_message(T, n(1), TokenMsg::Token(token(1, 5, 2)), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn an_idle_node_passes_the_token_and_remembers_where_it_will_park() {
        let mut t = follower(1);
        let mut out = Out::<TokenRing>::new();
        t.handle_message(T, n(3), TokenMsg::Token(token(1, 4, 3)), &mut out);
        assert_eq!(out.take(), vec![send(2, TokenMsg::Token(token(1, 4, 3)))]);
        // Wanting now: one WANT to the parker, and a patience timer.
        t.handle_request(T, &mut out);
        let actions = out.take();
        assert_eq!(sends(actions.clone()), vec![send(3, TokenMsg::Want { wanter: n(1), hops: 0 })]);
        assert!(matches!(actions[1], Action::SetTimer { timer: TokenTimer::Patience, .. }));
    }

    #[test]
    fn a_wanting_node_enters_with_the_next_fence_and_laps_on_release() {
        let mut t = follower(2);
        let mut out = Out::<TokenRing>::new();
        t.handle_request(T, &mut out);
        out.take();
        t.handle_message(T, n(1), TokenMsg::Token(token(1, 4, 3)), &mut out);
        let fence = Fence::new(generation(1, 3).0, 5);
        assert_eq!(
            out.take(),
            vec![Action::CancelTimer { timer: TokenTimer::Patience }, Action::Grant { fence }]
        );
        t.handle_release(T, &mut out);
        assert_eq!(out.take(), vec![send(3, TokenMsg::Token(token(1, 5, 2)))]);
    }

    #[test]
    fn a_parker_sends_the_token_straight_to_a_wanter() {
        let mut t = follower(2);
        let mut out = Out::<TokenRing>::new();
        t.handle_message(T, n(1), TokenMsg::Token(token(1, 4, 2)), &mut out);
        assert!(out.is_empty(), "idle lap done: parked");
        t.handle_message(T, n(1), TokenMsg::Want { wanter: n(1), hops: 0 }, &mut out);
        assert_eq!(out.take(), vec![send(1, TokenMsg::Token(token(1, 4, 2)))]);
    }

    #[test]
    fn a_token_of_a_dead_generation_is_discarded() {
        let mut t = follower(1);
        let mut out = Out::<TokenRing>::new();
        let g2 = generation(2, 3);
        t.handle_message(T, n(3), TokenMsg::Probe { generation: g2 }, &mut out);
        let no = TokenMsg::ProbeAck { generation: g2, held: None, known: g2 };
        assert_eq!(out.take(), vec![send(3, no)]);
        t.handle_request(T, &mut out);
        out.take();
        t.handle_message(T, n(3), TokenMsg::Token(token(1, 4, 3)), &mut out);
        assert!(out.is_empty(), "a generation-1 token must not be used");
        assert_eq!(t.cs_state(), CsState::Wanting);
    }

    #[test]
    fn a_late_probe_is_told_of_the_newer_generation() {
        let mut t = follower(1);
        let mut out = Out::<TokenRing>::new();
        let g0 = generation(0, 2);
        t.handle_message(T, n(2), TokenMsg::Probe { generation: g0 }, &mut out);
        let known = generation(1, 3);
        assert_eq!(
            out.take(),
            vec![send(2, TokenMsg::ProbeAck { generation: g0, held: None, known })]
        );
    }

    #[test]
    fn a_probed_holder_sets_its_token_aside_until_told_to_keep_it() {
        let mut t = follower(1);
        let mut out = Out::<TokenRing>::new();
        t.handle_request(T, &mut out);
        t.handle_message(T, n(3), TokenMsg::Token(token(1, 4, 3)), &mut out);
        out.take();
        let g2 = generation(2, 3);
        t.handle_message(T, n(3), TokenMsg::Probe { generation: g2 }, &mut out);
        let yes =
            TokenMsg::ProbeAck { generation: g2, held: Some((generation(1, 3), 5)), known: g2 };
        assert_eq!(out.take(), vec![send(3, yes)]);
        // Leaving before the verdict: the token goes nowhere.
        t.handle_release(T, &mut out);
        assert!(out.is_empty(), "set aside for the verdict");
        // Kept: relabelled, its entries counted anew, and sent round the
        // ring.
        t.handle_message(T, n(3), TokenMsg::Keep { generation: g2 }, &mut out);
        let relabelled = Token { generation: g2, entries: 0, idle_since: n(1) };
        assert_eq!(out.take(), vec![send(2, TokenMsg::Token(relabelled))]);
    }

    /// A holder wrongly suspected keeps its token while a round it was
    /// left out of makes another. At the next round both answer; only the
    /// newer token is kept, and the other holder is told the generation
    /// that makes its own stale.
    #[test]
    fn of_two_tokens_only_the_newest_is_kept() {
        let (mut c, mut out) = node(3, 3, 3);
        out.take();
        let g1 = generation(1, 3);
        let old = Some((Epoch::new(0, n(2)), 40));
        let new = Some((Epoch::new(0, n(3)), 7));
        c.handle_message(
            T,
            n(1),
            TokenMsg::ProbeAck { generation: g1, held: new, known: g1 },
            &mut out,
        );
        c.handle_message(
            T,
            n(2),
            TokenMsg::ProbeAck { generation: g1, held: old, known: g1 },
            &mut out,
        );
        let mut verdict = out.take();
        verdict.sort_by_key(|a| format!("{a:?}"));
        assert_eq!(
            verdict,
            vec![
                send(1, TokenMsg::Keep { generation: g1 }),
                send(2, TokenMsg::Generation { generation: g1 })
            ]
        );
        // The one told the generation drops its token, even from inside.
        let mut t = follower(2);
        t.handle_request(T, &mut out);
        t.handle_message(T, n(3), TokenMsg::Token(token(1, 4, 3)), &mut out);
        let g2 = generation(2, 3);
        t.handle_message(T, n(3), TokenMsg::Probe { generation: g2 }, &mut out);
        t.handle_message(T, n(3), TokenMsg::Generation { generation: g2 }, &mut out);
        out.take();
        t.handle_release(T, &mut out);
        assert!(out.is_empty(), "a dead token goes nowhere");
        t.handle_message(T, n(3), TokenMsg::Keep { generation: g2 }, &mut out);
        assert!(out.is_empty(), "nothing left to keep");
    }

    #[test]
    fn a_newcomer_keeps_a_token_unused_until_it_knows_the_generation() {
        let (mut t, mut out) = node(1, 3, 3);
        t.handle_request(T, &mut out);
        out.take();
        t.handle_message(T, n(3), TokenMsg::Token(token(1, 4, 3)), &mut out);
        assert!(out.is_empty(), "quarantined");
        // Told generation 2: the quarantined token is stale and dropped.
        t.handle_message(T, n(3), TokenMsg::Generation { generation: generation(2, 3) }, &mut out);
        assert!(out.is_empty());
        assert_eq!(t.cs_state(), CsState::Wanting);
        // A current token is used.
        t.handle_message(
            T,
            n(2),
            TokenMsg::Token(Token { generation: generation(2, 3), ..token(1, 4, 3) }),
            &mut out,
        );
        assert!(out.take().iter().any(|a| matches!(a, Action::Grant { .. })));
    }

    #[test]
    fn a_lost_token_is_regenerated_in_a_higher_generation() {
        let (mut c, mut out) = node(3, 3, 3);
        let g1 = generation(1, 3);
        for p in [1, 2] {
            let no = TokenMsg::ProbeAck { generation: g1, held: None, known: g1 };
            c.handle_message(T, n(p), no, &mut out);
        }
        out.take();
        // Node 1 crashes; it may have had the token: probe again.
        c.handle_peer_down(T, n(1), &mut out);
        let g2 = generation(2, 3);
        assert_eq!(out.take(), vec![send(2, TokenMsg::Probe { generation: g2 })]);
        c.handle_request(T, &mut out);
        out.take();
        let no = TokenMsg::ProbeAck { generation: g2, held: None, known: g2 };
        c.handle_message(T, n(2), no, &mut out);
        let fence = Fence::new(g2.0, 1);
        assert_eq!(
            out.take(),
            vec![Action::CancelTimer { timer: TokenTimer::Patience }, Action::Grant { fence }]
        );
        assert!(fence > Fence::new(g1.0, 1_000));
    }

    #[test]
    fn a_lone_node_enters_at_once() {
        let (mut t, mut out) = node(1, 1, 1);
        t.handle_request(T, &mut out);
        let grant = Action::Grant { fence: Fence::new(generation(1, 1).0, 1) };
        assert_eq!(out.take(), vec![Action::CancelTimer { timer: TokenTimer::Patience }, grant]);
    }
}

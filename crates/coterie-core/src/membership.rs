//! Who the algorithms count as up, decided by a majority; and the lease
//! without which a node does nothing.
//!
//! Every algorithm in this crate assumes that a peer its node suspects has
//! crashed. On a network cut in two that is false: each side suspects the
//! other, each goes on as if the other had crashed, and both grant. This
//! layer makes the assumption true instead of hoping for it
//! (`partitions = "majority"`, [`Partitions::Majority`]):
//!
//! - **Views.** A peer leaves, or comes back, only through a *view*: an
//!   epoch and a member set holding a majority of the configured nodes
//!   (⌊N/2⌋+1). A node that suspects a member, or hears a node its view
//!   leaves out, *proposes* a view of the nodes it hears. Each member
//!   *accepts* at most one proposal per epoch and never one older than
//!   what it accepted before (its *promise*, kept in stable storage before
//!   it answers). Once every member accepted, the proposer *installs* the
//!   view, and every member installs it on hearing of it from anyone.
//!   Epochs are ballots (round, proposer), so two proposers never make the
//!   same one; any two views' member sets meet, so installed views form
//!   one chain. This is primary-component group membership (Birman's
//!   Isis; G. Chockler, I. Keidar and R. Vitenberg, "Group Communication
//!   Specifications: A Comprehensive Study", ACM Computing Surveys 33(4),
//!   2001), agreed by a Paxos-like promise per epoch.
//! - **Leases.** A node acts — grants, enters, answers with a permission,
//!   passes a token, announces itself coordinator — only while it holds a
//!   lease: a majority of the configured nodes (itself included), all
//!   members of its view, have echoed a heartbeat it sent within the last
//!   `lease` of its own clock. Heartbeats carry the sender's time (`ask`)
//!   and echo the latest time heard from the receiver (`echo`), so the
//!   steady state costs no message. A node that echoes a peer's ask
//!   *vouches* for it: it accepts no view leaving that peer out until the
//!   lease it granted can have run out, `lease · (1+ρ)/(1−ρ)` after the ask
//!   arrived, where ρ is the bound on clock *rate* drift
//!   (`max_clock_drift`; no clock synchronisation is assumed). The lease
//!   rule is that of Chubby's master lease (M. Burrows, "The Chubby Lock
//!   Service for Loosely-Coupled Distributed Systems", OSDI 2006) and of
//!   Raft's leader lease (D. Ongaro, "Consensus: Bridging Theory and
//!   Practice", PhD thesis, Stanford, 2014, §6.4).
//!
//! **Why it is safe.** Say view V′ leaves out node x. Every member of V′
//! accepted it; x's lease needs the echoes of a majority; two majorities
//! meet, so some member z of V′ vouched for x's latest lease, and z
//! accepted V′ only after that lease could have run out, and stopped
//! vouching for x when it promised V′. So by the time any member acts on
//! V′ — counts x down, and with it whatever x held or owed — x has stopped
//! acting for good: its lease is over, and it can get no other from a
//! majority that moved on. To the members of V′, x crashed at the end of
//! its lease, which is exactly the failure the algorithms were built for.
//! A node that holds a lock when its lease runs out loses it then (the
//! engine releases it and says so), so the holder stops before the
//! majority can grant again.
//!
//! **Coming back.** A view's members are *continuing* (they had installed
//! the view the new one is based on, the newest any member had) or
//! *joiners* (every other: a node left out before, a restarted one, one
//! that missed a view). A joiner forgets what its algorithms held (the
//! engine rebuilds them, as after a restart, keeping only stable storage)
//! and meets its peers anew; a continuing member keeps its state, counts
//! down the members left out, and counts each joiner down and up again
//! once the joiner *announces* the view (its first heartbeat of it), which
//! it sends only after its rebuild. Messages a joiner sent before that
//! announcement are dropped, and so is anything from a node outside the
//! view, or sent in a view this node did not install.
//!
//! Messages: none per lock entry. A change of view costs a proposal and an
//! acceptance per member, and an installation from every member to every
//! other (N(N−1)): they are rare.
//!
//! With [`Partitions::Detector`] this layer does nothing: the failure
//! detector's word is taken, as the textbooks do.

use crate::outbox::Time;
use crate::types::{Epoch, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How a node decides that a peer is down. In configuration files it is
/// spelled as [`name`](Self::name) gives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Partitions {
    /// Through views a majority agreed to, acting only under a lease: no
    /// lock is granted on both sides of a partition, and a minority
    /// grants nothing. The default.
    #[default]
    Majority,
    /// The failure detector's word is taken: a suspected peer has
    /// crashed (the textbook assumption). Under a partition both sides
    /// go on, and both may grant.
    Detector,
}

impl Partitions {
    /// Both modes, in the order `--help` lists them.
    pub const ALL: [Partitions; 2] = [Partitions::Majority, Partitions::Detector];

    /// The spelling used in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Partitions::Majority => "majority",
            Partitions::Detector => "detector",
        }
    }
}

impl std::fmt::Display for Partitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A partition mode that is not one of [`Partitions::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown partitions mode {0:?} (known: majority, detector)")]
pub struct UnknownPartitions(pub String);

impl std::str::FromStr for Partitions {
    type Err = UnknownPartitions;

    fn from_str(s: &str) -> Result<Partitions, UnknownPartitions> {
        Partitions::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPartitions(s.to_string()))
    }
}

/// The lease and its bounds, with the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseTiming {
    /// How peers decide who is down.
    pub partitions: Partitions,
    /// How long a majority's echoes let a node act, on its own clock.
    pub lease: Duration,
    /// The bound on how much faster or slower any node's clock runs than
    /// real time, in parts per million.
    pub max_clock_drift_ppm: u32,
}

impl Default for LeaseTiming {
    /// Majority mode, with a lease of 250 ms and 1 % drift.
    fn default() -> LeaseTiming {
        LeaseTiming {
            partitions: Partitions::Majority,
            lease: Duration::from_millis(250),
            max_clock_drift_ppm: 10_000,
        }
    }
}

impl LeaseTiming {
    /// How long a node that vouched for a peer's lease waits, on its own
    /// clock, from the arrival of the ask it echoed before it counts that
    /// lease over: `lease · (1+ρ)/(1−ρ)`, rounded up. The peer's clock may
    /// run slow by ρ (its lease lasts up to `lease/(1−ρ)` of real time) and
    /// this node's fast by ρ (its wait lasts at least `wait/(1+ρ)`).
    pub fn wait(&self) -> Duration {
        let rho = u128::from(self.max_clock_drift_ppm.min(999_999));
        let nanos = self.lease.as_nanos() * (1_000_000 + rho);
        let nanos = nanos.div_ceil(1_000_000 - rho);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// An installed membership: an epoch and the members, a majority of the
/// configured nodes, sorted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct View {
    /// The view's epoch: a ballot of (round, proposer).
    pub epoch: Epoch,
    /// Its members, ascending.
    pub members: Vec<NodeId>,
}

/// What heartbeats carry for the membership layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The epoch of the view the sender has installed, if any: what it
    /// sends from now on belongs to it.
    pub view: Option<Epoch>,
    /// The sender's time when it sent this, in microseconds of its own
    /// clock: a request for the receiver's vouch.
    pub ask: u64,
    /// The receiver's latest `ask` the sender heard, echoed when the
    /// sender vouches for the receiver's lease.
    pub echo: Option<u64>,
}

/// A membership-layer message ([`Envelope::Membership`](crate::wire::Envelope::Membership)).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ViewMsg {
    /// The sender proposes the view `members` at `epoch`.
    Propose {
        /// The proposal's epoch.
        epoch: Epoch,
        /// Its members, ascending.
        members: Vec<NodeId>,
    },
    /// The sender accepted the proposal of `epoch`, having installed the
    /// view of epoch `installed` (none, when it has not installed one
    /// since it started).
    Accept {
        /// The proposal accepted.
        epoch: Epoch,
        /// The epoch of the view the sender had installed.
        installed: Option<Epoch>,
        /// The sender's lease ran out since it installed that view: it
        /// stopped acting meanwhile, and what passed between it and the
        /// others may have been lost, so it comes back as a joiner.
        lapsed: bool,
    },
    /// The sender refuses the proposal of `epoch`: it promised `promised`.
    Reject {
        /// The proposal refused.
        epoch: Epoch,
        /// The sender's promise.
        promised: Epoch,
    },
    /// `view` is installed. Members whose installed view was `base` carry
    /// their state on; `joiners` rebuild theirs.
    Install {
        /// The view.
        view: View,
        /// The newest view any member had installed.
        base: Option<Epoch>,
        /// The members that had not installed `base`, or restarted.
        joiners: Vec<NodeId>,
    },
}

impl ViewMsg {
    /// The message's kind, for the counters.
    pub fn kind(&self) -> &'static str {
        match self {
            ViewMsg::Propose { .. } => "propose",
            ViewMsg::Accept { .. } => "accept",
            ViewMsg::Reject { .. } => "reject",
            ViewMsg::Install { .. } => "install",
        }
    }
}

/// What the membership layer asks of the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// Send `msg` to the peer.
    Send(NodeId, ViewMsg),
    /// The promise rose: it must be durable before anything that follows
    /// leaves.
    Promised,
    /// This node installed a view as a joiner: its algorithms start over
    /// as after a restart, counting nobody up.
    Reset,
    /// The algorithms count the peer up, as a newcomer.
    Up(NodeId),
    /// The algorithms count the peer down, as crashed.
    Down(NodeId),
    /// The view was installed here (after the `Reset` and `Down`s it
    /// brought): every member must hear this node announce it.
    Installed,
}

/// What this node knows of one peer.
#[derive(Clone, Debug, Default, Hash)]
struct Peer {
    /// The view it last announced: what it sends from then on belongs to
    /// it.
    view: Option<Epoch>,
    /// Its latest ask, and when it arrived here.
    ask: Option<(u64, Time)>,
    /// Until when this node must count a lease it vouched for as possibly
    /// running.
    vouched_until: Option<Time>,
    /// The latest time of this node's own that the peer echoed.
    vouched_me: Option<Time>,
    /// Since when it has announced a view other than this node's.
    lagging_since: Option<Time>,
    /// It restarted since this node installed its view: it must come back
    /// as a joiner.
    restarted: bool,
}

#[derive(Clone, Debug, Hash)]
struct Installed {
    view: View,
    base: Option<Epoch>,
    joiners: Vec<NodeId>,
}

#[derive(Clone, Debug, Hash)]
struct Proposal {
    epoch: Epoch,
    members: Vec<NodeId>,
    /// Each member's installed view, and whether its lease ran out since.
    accepts: BTreeMap<NodeId, (Option<Epoch>, bool)>,
    deadline: Time,
}

#[derive(Clone, Debug, Hash)]
struct Deferred {
    proposer: NodeId,
    epoch: Epoch,
    at: Time,
}

/// One node's membership: its views, promise, proposal and lease. See the
/// module documentation.
#[derive(Clone, Debug)]
pub struct Membership {
    id: NodeId,
    /// Every configured node, ascending.
    members: Vec<NodeId>,
    timing: LeaseTiming,
    failure_timeout: Duration,
    heartbeat: Duration,
    installed: Option<Installed>,
    /// The highest epoch accepted or proposed here (zero for none): kept
    /// in stable storage.
    promised: Epoch,
    /// The members of that proposal: this node vouches for no other.
    promised_members: Vec<NodeId>,
    /// When the promise was made.
    promised_at: Time,
    /// The highest view epoch heard of: a proposal goes above it.
    seen: Epoch,
    proposal: Option<Proposal>,
    deferred: Option<Deferred>,
    /// No proposal of this node's before this.
    backoff_until: Time,
    /// Since when this node has wanted another view.
    wanted_since: Option<Time>,
    peers: BTreeMap<NodeId, Peer>,
    /// The peers the algorithms count up.
    counted: BTreeSet<NodeId>,
    /// Members of the installed view that must announce it before they
    /// are counted (again).
    fresh: BTreeSet<NodeId>,
    /// The last view installed here, to send again to a member that
    /// missed it.
    last_install: Option<ViewMsg>,
    /// This node's lease ran out since it installed its view as a joiner
    /// (or since it started): it must come back as a joiner.
    lapsed: bool,
    /// The latest proposal this process accepted: the only view it may
    /// install (an older one, sent again, is what a previous run of it
    /// accepted, with state it no longer has).
    accepted: Option<Epoch>,
}

/// `t` in whole microseconds, as heartbeats carry it.
fn micros(t: Time) -> u64 {
    u64::try_from(t.as_micros()).unwrap_or(u64::MAX)
}

impl Membership {
    /// The layer of node `id` among `members`, with `promised` restored
    /// from stable storage.
    pub fn new(
        id: NodeId,
        members: &[NodeId],
        timing: LeaseTiming,
        failure_timeout: Duration,
        heartbeat: Duration,
        promised: Epoch,
    ) -> Membership {
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let peers = sorted.iter().filter(|&&p| p != id).map(|&p| (p, Peer::default())).collect();
        Membership {
            id,
            members: sorted,
            timing,
            failure_timeout,
            heartbeat,
            installed: None,
            promised,
            promised_members: Vec::new(),
            promised_at: Time::ZERO,
            seen: promised,
            proposal: None,
            deferred: None,
            backoff_until: Time::ZERO,
            wanted_since: None,
            peers,
            counted: BTreeSet::new(),
            fresh: BTreeSet::new(),
            last_install: None,
            lapsed: false,
            accepted: None,
        }
    }

    /// Whether views decide who is down ([`Partitions::Majority`]).
    pub fn majority_mode(&self) -> bool {
        self.timing.partitions == Partitions::Majority
    }

    /// The lease settings.
    pub fn timing(&self) -> LeaseTiming {
        self.timing
    }

    /// How many nodes make a majority of the configured cluster.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The view installed here, if any.
    pub fn view(&self) -> Option<&View> {
        self.installed.as_ref().map(|i| &i.view)
    }

    /// The highest epoch accepted or proposed here.
    pub fn promised(&self) -> Epoch {
        self.promised
    }

    /// When this node's lease ends (`Duration::MAX` when it needs no
    /// other's echo), or `None` without one.
    pub fn lease_end(&self) -> Option<Time> {
        let installed = self.installed.as_ref()?;
        let others = self.majority() - 1;
        if others == 0 {
            return Some(Duration::MAX);
        }
        let mut echoed: Vec<Time> = installed
            .view
            .members
            .iter()
            .filter(|&&m| m != self.id)
            .filter_map(|m| self.peers.get(m).and_then(|p| p.vouched_me))
            .collect();
        if echoed.len() < others {
            return None;
        }
        echoed.sort_unstable_by(|a, b| b.cmp(a));
        Some(echoed[others - 1].saturating_add(self.timing.lease))
    }

    /// Whether this node holds a lease at `now` (always, in detector
    /// mode): a majority vouches for it.
    pub fn quorum(&self, now: Time) -> bool {
        !self.majority_mode() || self.lease_end().is_some_and(|end| now < end)
    }

    /// This node's lease ran out: it stopped acting, and what its peers
    /// sent it meanwhile may be lost. It wants a new view, in which it
    /// comes back as a joiner.
    pub(crate) fn lapse(&mut self) {
        if self.majority_mode() && self.installed.is_some() {
            self.lapsed = true;
        }
    }

    /// Whether this node may act at `now`: always in detector mode; in
    /// majority mode, while it holds a lease in the view it installed and
    /// has promised nothing newer.
    pub fn acting(&self, now: Time) -> bool {
        if !self.majority_mode() {
            return true;
        }
        let Some(installed) = &self.installed else { return false };
        installed.view.epoch == self.promised && self.quorum(now)
    }

    /// Whether every member of the installed view (this node among them)
    /// is counted: the node may join and ask for locks. Always true in
    /// detector mode.
    pub fn settled(&self) -> bool {
        !self.majority_mode() || (self.installed.is_some() && self.fresh.is_empty())
    }

    /// Whether the algorithms count `peer` up from before the view
    /// installed last: messages held for it still mean what they meant.
    pub fn continuing(&self, peer: NodeId) -> bool {
        self.counted.contains(&peer) && !self.fresh.contains(&peer)
    }

    /// Whether the algorithms count `peer` up (majority mode).
    pub fn counts(&self, peer: NodeId) -> bool {
        self.counted.contains(&peer)
    }

    /// Whether the view installed here has epoch `epoch`.
    pub fn installed_is(&self, epoch: Epoch) -> bool {
        self.view().is_some_and(|v| v.epoch == epoch)
    }

    /// The peers the algorithms count up (majority mode).
    pub fn counted(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.counted.iter().copied()
    }

    /// The peers this node hears vouch for it now: those whose echo keeps
    /// its lease, itself included, for a "no quorum" message.
    pub fn vouchers(&self, now: Time) -> Vec<NodeId> {
        let mut hears: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| {
                p.vouched_me.is_some_and(|t| now < t.saturating_add(self.timing.lease))
            })
            .map(|(&id, _)| id)
            .collect();
        hears.push(self.id);
        hears.sort_unstable();
        hears
    }

    /// Whether a message of the algorithms from `from` is to be delivered:
    /// always in detector mode; in majority mode, when `from` is a counted
    /// member of the installed view that sent it in that view or one
    /// before (not one this node refused, nor before it announced itself
    /// as a joiner).
    pub fn admits(&self, from: NodeId) -> bool {
        if !self.majority_mode() {
            return true;
        }
        let Some(installed) = &self.installed else { return false };
        self.counted.contains(&from)
            && !self.fresh.contains(&from)
            && self.peers.get(&from).is_some_and(|p| p.view <= Some(installed.view.epoch))
    }

    /// The lease fields of a heartbeat to `to` at `now`. Echoing the
    /// peer's ask vouches for it: this node will count its lease as
    /// possibly running for [`LeaseTiming::wait`] after the ask came.
    pub fn heartbeat(&mut self, to: NodeId, now: Time) -> Lease {
        if !self.majority_mode() {
            // Nothing: heartbeats stay what they were, byte for byte (a
            // checker merges states alike but for the moment; a time in a
            // message would keep them apart).
            return Lease::default();
        }
        let mut lease = Lease { view: self.view().map(|v| v.epoch), ask: micros(now), echo: None };
        if !self.vouches_for(to) {
            return lease;
        }
        let wait = self.timing.wait();
        if let Some(peer) = self.peers.get_mut(&to) {
            if let Some((ask, at)) = peer.ask {
                lease.echo = Some(ask);
                let until = at.saturating_add(wait);
                peer.vouched_until = Some(peer.vouched_until.map_or(until, |u| u.max(until)));
            }
        }
        lease
    }

    /// Whether this node vouches for `peer`: it is a member of the view
    /// installed here, has announced that view, and is a member of any
    /// newer view this node promised.
    fn vouches_for(&self, peer: NodeId) -> bool {
        let Some(installed) = &self.installed else { return false };
        let epoch = installed.view.epoch;
        installed.view.members.contains(&peer)
            && self.peers.get(&peer).is_some_and(|p| p.view == Some(epoch))
            && (self.promised == epoch || self.promised_members.contains(&peer))
    }

    /// A heartbeat from `from` carried `lease`.
    pub(crate) fn on_heartbeat(
        &mut self,
        from: NodeId,
        lease: &Lease,
        now: Time,
        out: &mut Vec<Event>,
    ) {
        if !self.majority_mode() || !self.peers.contains_key(&from) {
            return;
        }
        if let Some(view) = lease.view {
            self.seen = self.seen.max(view);
        }
        let now_us = micros(now);
        let mine = self.view().map(|v| v.epoch);
        let lagging = self.installed.as_ref().is_some_and(|i| i.view.members.contains(&from))
            && lease.view != mine;
        let peer = self.peers.get_mut(&from).expect("checked above");
        peer.view = lease.view;
        peer.ask = Some((lease.ask, now));
        if let Some(echo) = lease.echo.filter(|&e| e <= now_us) {
            let echo = Duration::from_micros(echo);
            peer.vouched_me = Some(peer.vouched_me.map_or(echo, |v| v.max(echo)));
        }
        if !lagging {
            peer.lagging_since = None;
        } else if peer.lagging_since.is_none() {
            peer.lagging_since = Some(now);
            // It may have missed the installation (cut off while it went
            // round): tell it again, once per spell.
            if lease.view < mine {
                if let Some(install) = self.last_install.clone() {
                    out.push(Event::Send(from, install));
                }
            }
        }
        self.announced(from, lease.view, out);
    }

    /// `peer` said it installed `view`: a joiner of this node's view is
    /// counted from now on (down first, if it was counted in its old
    /// life).
    fn announced(&mut self, peer: NodeId, view: Option<Epoch>, out: &mut Vec<Event>) {
        let Some(installed) = &self.installed else { return };
        if view != Some(installed.view.epoch) || !self.fresh.remove(&peer) {
            return;
        }
        if self.counted.contains(&peer) {
            out.push(Event::Down(peer));
        }
        out.push(Event::Up(peer));
        self.counted.insert(peer);
    }

    /// The failure detector saw `peer` restart: it forgot everything, so
    /// it can come back only as a joiner.
    pub(crate) fn restarted(&mut self, peer: NodeId) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.restarted = true;
            p.view = None;
            p.vouched_me = None;
        }
    }

    /// A membership message from `from`.
    pub(crate) fn handle(&mut self, from: NodeId, msg: ViewMsg, now: Time, out: &mut Vec<Event>) {
        if !self.majority_mode() || !self.peers.contains_key(&from) {
            return;
        }
        match msg {
            ViewMsg::Propose { epoch, members } => {
                self.seen = self.seen.max(epoch);
                if !self.valid(&members) || !members.contains(&from) || epoch.leader() != from {
                    return;
                }
                if epoch <= self.promised {
                    out.push(Event::Send(from, ViewMsg::Reject { epoch, promised: self.promised }));
                } else {
                    self.promise(from, epoch, members, now, out);
                }
            }
            ViewMsg::Accept { epoch, installed, lapsed } => {
                let Some(proposal) = &mut self.proposal else { return };
                if proposal.epoch == epoch && proposal.members.contains(&from) {
                    proposal.accepts.insert(from, (installed, lapsed));
                    self.complete(out);
                }
            }
            ViewMsg::Reject { epoch, promised } => {
                self.seen = self.seen.max(promised);
                if self.proposal.as_ref().is_some_and(|p| p.epoch == epoch) {
                    self.abandon(now);
                }
            }
            ViewMsg::Install { view, base, joiners } => {
                self.seen = self.seen.max(view.epoch);
                if !self.valid(&view.members) || !view.members.contains(&from) {
                    return;
                }
                let epoch = view.epoch;
                self.install(ViewMsg::Install { view, base, joiners }, out);
                // Sent right after the sender installed: an announcement.
                if let Some(peer) = self.peers.get_mut(&from) {
                    peer.view = Some(epoch);
                }
                self.announced(from, Some(epoch), out);
            }
        }
    }

    /// Whether `members` is a view this node could be in: configured
    /// nodes, ascending, a majority, this node among them.
    fn valid(&self, members: &[NodeId]) -> bool {
        members.windows(2).all(|w| w[0] < w[1])
            && members.iter().all(|m| self.members.binary_search(m).is_ok())
            && members.len() >= self.majority()
            && members.contains(&self.id)
    }

    /// Accepts `proposer`'s proposal: promises it (durably, before the
    /// answer), stops vouching for the nodes it leaves out, and answers
    /// once every lease this node vouched for among those can have run
    /// out.
    fn promise(
        &mut self,
        proposer: NodeId,
        epoch: Epoch,
        members: Vec<NodeId>,
        now: Time,
        out: &mut Vec<Event>,
    ) {
        self.promised = epoch;
        self.promised_at = now;
        out.push(Event::Promised);
        if self.proposal.as_ref().is_some_and(|p| p.epoch < epoch) {
            self.proposal = None;
        }
        let wait_until = self
            .peers
            .iter()
            .filter(|(id, _)| !members.contains(id))
            .filter_map(|(_, p)| p.vouched_until)
            .max()
            .filter(|&t| t > now);
        self.promised_members = members;
        match wait_until {
            Some(at) => self.deferred = Some(Deferred { proposer, epoch, at }),
            None => {
                self.deferred = None;
                self.accept(proposer, epoch, out);
            }
        }
    }

    /// Answers `proposer`'s proposal `epoch` with an acceptance.
    fn accept(&mut self, proposer: NodeId, epoch: Epoch, out: &mut Vec<Event>) {
        let installed = self.view().map(|v| v.epoch);
        let lapsed = self.lapsed;
        self.accepted = Some(epoch);
        if proposer != self.id {
            out.push(Event::Send(proposer, ViewMsg::Accept { epoch, installed, lapsed }));
            return;
        }
        if let Some(proposal) = self.proposal.as_mut().filter(|p| p.epoch == epoch) {
            proposal.accepts.insert(self.id, (installed, lapsed));
            self.complete(out);
        }
    }

    /// Installs this node's proposal once every member accepted it.
    fn complete(&mut self, out: &mut Vec<Event>) {
        let Some(proposal) = &self.proposal else { return };
        if proposal.members.iter().any(|m| !proposal.accepts.contains_key(m)) {
            return;
        }
        let base = proposal.accepts.values().map(|&(installed, _)| installed).max().flatten();
        let joiners = proposal
            .members
            .iter()
            .copied()
            .filter(|m| {
                let (installed, lapsed) = proposal.accepts[m];
                installed != base || lapsed || self.peers.get(m).is_some_and(|p| p.restarted)
            })
            .collect();
        let view = View { epoch: proposal.epoch, members: proposal.members.clone() };
        self.proposal = None;
        self.install(ViewMsg::Install { view, base, joiners }, out);
    }

    fn abandon(&mut self, now: Time) {
        self.proposal = None;
        self.backoff_until = now + self.failure_timeout;
    }

    /// Installs the view `msg` names, unless this node installed it or a
    /// newer one, or promised a newer one.
    fn install(&mut self, msg: ViewMsg, out: &mut Vec<Event>) {
        let ViewMsg::Install { view, base, joiners } = &msg else { return };
        let epoch = view.epoch;
        if self.view().is_some_and(|v| v.epoch >= epoch) || epoch < self.promised {
            return;
        }
        let mine = self.view().map(|v| v.epoch);
        let joiner = joiners.contains(&self.id);
        if self.accepted != Some(epoch) || (!joiner && mine != *base) {
            // A view this process did not accept (a previous run of it
            // did), or whose members carry on with what they know of this
            // node when it is not that node (it missed a view): it waits
            // for a view that names it a joiner.
            return;
        }
        self.promised_members = view.members.clone();
        if joiner {
            self.lapsed = false;
            out.push(Event::Reset);
            self.counted.clear();
            self.fresh = view.members.iter().copied().filter(|&m| m != self.id).collect();
        } else {
            let left: Vec<NodeId> =
                self.counted.iter().copied().filter(|m| !view.members.contains(m)).collect();
            for peer in left {
                self.counted.remove(&peer);
                out.push(Event::Down(peer));
            }
            self.fresh = view
                .members
                .iter()
                .copied()
                .filter(|&m| m != self.id && (joiners.contains(&m) || !self.counted.contains(&m)))
                .collect();
        }
        if self.proposal.as_ref().is_some_and(|p| p.epoch <= epoch) {
            self.proposal = None;
        }
        if self.deferred.as_ref().is_some_and(|d| d.epoch <= epoch) {
            self.deferred = None;
        }
        self.wanted_since = None;
        for peer in self.peers.values_mut() {
            peer.restarted = false;
            peer.lagging_since = None;
        }
        self.installed =
            Some(Installed { view: view.clone(), base: *base, joiners: joiners.clone() });
        for &member in &view.members {
            if member != self.id {
                out.push(Event::Send(member, msg.clone()));
            }
        }
        out.push(Event::Installed);
        self.last_install = Some(msg.clone());
        let known: Vec<NodeId> = self
            .fresh
            .iter()
            .copied()
            .filter(|p| self.peers.get(p).is_some_and(|peer| peer.view == Some(epoch)))
            .collect();
        for peer in known {
            self.announced(peer, Some(epoch), out);
        }
    }

    /// Time passed: an acceptance waited out, a proposal given up on, or a
    /// view proposed. `up` are the peers the failure detector counts up.
    pub(crate) fn handle_timeout(
        &mut self,
        now: Time,
        up: impl Iterator<Item = NodeId>,
        out: &mut Vec<Event>,
    ) {
        if !self.majority_mode() {
            return;
        }
        if let Some(d) = self.deferred.clone().filter(|d| d.at <= now) {
            self.deferred = None;
            self.accept(d.proposer, d.epoch, out);
        }
        if self.proposal.as_ref().is_some_and(|p| p.deadline <= now) {
            self.abandon(now);
        }
        let mut desired: Vec<NodeId> = up.chain([self.id]).collect();
        desired.sort_unstable();
        desired.dedup();
        if !self.wants(&desired, now) || desired.len() < self.majority() {
            self.wanted_since = None;
            return;
        }
        let since = *self.wanted_since.get_or_insert(now);
        // The highest node it hears proposes first; the others give it a
        // failure timeout before they try, so that one proposal, not
        // several, usually settles a change.
        let all = desired.len() == self.members.len();
        let settle =
            if self.installed.is_none() && !all { self.failure_timeout } else { self.heartbeat };
        let first = desired.last() == Some(&self.id);
        let delay = if first { settle } else { settle + self.failure_timeout };
        let settle_zero = self.installed.is_none() && all && first;
        if (settle_zero || now >= since + delay)
            && self.proposal.is_none()
            && self.deferred.is_none()
            && now >= self.backoff_until
        {
            self.propose(desired, now, out);
        }
    }

    /// Whether this node wants a view other than the one it installed.
    fn wants(&self, desired: &[NodeId], now: Time) -> bool {
        let Some(installed) = &self.installed else { return true };
        if self.lapsed {
            return true;
        }
        let stuck = self.promised > installed.view.epoch
            && now.saturating_sub(self.promised_at) >= self.proposal_timeout();
        installed.view.members != desired
            || stuck
            || installed.view.members.iter().any(|m| {
                self.peers.get(m).is_some_and(|p| {
                    p.restarted
                        || p.lagging_since
                            .is_some_and(|t| now.saturating_sub(t) >= 2 * self.failure_timeout)
                })
            })
    }

    /// How long a proposal waits for every member's acceptance.
    fn proposal_timeout(&self) -> Duration {
        self.timing.wait() + 2 * self.failure_timeout
    }

    fn propose(&mut self, members: Vec<NodeId>, now: Time, out: &mut Vec<Event>) {
        let round = self.promised.max(self.seen).round();
        let epoch = Epoch::new(round, self.id).next_for(self.id);
        self.proposal = Some(Proposal {
            epoch,
            members: members.clone(),
            accepts: BTreeMap::new(),
            deadline: now + self.proposal_timeout(),
        });
        for &member in &members {
            if member != self.id {
                out.push(Event::Send(member, ViewMsg::Propose { epoch, members: members.clone() }));
            }
        }
        self.promise(self.id, epoch, members, now, out);
    }

    /// The earliest time something here falls due: an acceptance waited
    /// out, a proposal's deadline, the lease's end.
    pub fn next_deadline(&self, now: Time) -> Option<Time> {
        if !self.majority_mode() {
            return None;
        }
        let lease = self.lease_end().filter(|&end| end > now && end != Duration::MAX);
        [self.deferred.as_ref().map(|d| d.at), self.proposal.as_ref().map(|p| p.deadline), lease]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether nothing is under way: a view installed and settled, no
    /// proposal and no acceptance waiting, and no other view wanted.
    pub fn idle(&self) -> bool {
        !self.majority_mode()
            || (self.settled()
                && self.proposal.is_none()
                && self.deferred.is_none()
                && self.wanted_since.is_none()
                && self.installed.as_ref().is_some_and(|i| i.view.epoch == self.promised))
    }

    /// Feeds the state to `h`, its times as seen from `now`.
    pub fn hash_at<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        if !self.majority_mode() {
            return;
        }
        let at = |t: Time| crate::outbox::relative(t, now);
        self.installed.hash(h);
        self.promised.hash(h);
        self.promised_members.hash(h);
        at(self.promised_at).hash(h);
        self.seen.hash(h);
        if let Some(p) = &self.proposal {
            (p.epoch, &p.members, &p.accepts, at(p.deadline)).hash(h);
        }
        if let Some(d) = &self.deferred {
            (d.proposer, d.epoch, at(d.at)).hash(h);
        }
        at(self.backoff_until).hash(h);
        self.wanted_since.map(at).hash(h);
        for (id, p) in &self.peers {
            id.hash(h);
            p.view.hash(h);
            // A peer's ask is its clock, which in the simulator is
            // everyone's: seen from now too.
            let ask = |ask: u64| i128::from(ask) - i128::from(micros(now));
            p.ask.map(|(a, t)| (ask(a), at(t))).hash(h);
            p.vouched_until.map(at).hash(h);
            p.vouched_me.map(at).hash(h);
            p.lagging_since.map(at).hash(h);
            p.restarted.hash(h);
        }
        self.counted.hash(h);
        self.fresh.hash(h);
        self.lapsed.hash(h);
        self.accepted.hash(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn ids(v: &[u32]) -> Vec<NodeId> {
        v.iter().map(|&i| NodeId(i)).collect()
    }

    fn node(id: u32, n: u32) -> Membership {
        let timing = LeaseTiming { partitions: Partitions::Majority, ..LeaseTiming::default() };
        Membership::new(
            NodeId(id),
            &ids(&(1..=n).collect::<Vec<_>>()),
            timing,
            ms(250),
            ms(50),
            Epoch(0),
        )
    }

    /// Delivers every `Send` among `nodes` until none is left, at `now`;
    /// returns the other events, by node.
    fn settle(
        nodes: &mut [Membership],
        now: Time,
        mut pending: Vec<(NodeId, Event)>,
    ) -> Vec<(NodeId, Event)> {
        let mut other = Vec::new();
        let mut rounds = 0;
        while !pending.is_empty() {
            rounds += 1;
            assert!(rounds < 10_000, "messages never stop");
            let (from, event) = pending.remove(0);
            match event {
                Event::Send(to, msg) => {
                    let Some(target) = nodes.iter_mut().find(|m| m.id == to) else { continue };
                    let mut out = Vec::new();
                    target.handle(from, msg, now, &mut out);
                    pending.extend(out.into_iter().map(|e| (to, e)));
                }
                e => other.push((from, e)),
            }
        }
        other
    }

    /// Every node heartbeats every other once, at `now`, over the links
    /// `open` allows.
    fn beat(
        nodes: &mut [Membership],
        now: Time,
        open: impl Fn(NodeId, NodeId) -> bool,
    ) -> Vec<(NodeId, Event)> {
        let ids: Vec<NodeId> = nodes.iter().map(|m| m.id).collect();
        let mut events = Vec::new();
        for &from in &ids {
            for &to in &ids {
                if from == to || !open(from, to) {
                    continue;
                }
                let lease = nodes.iter_mut().find(|m| m.id == from).unwrap().heartbeat(to, now);
                let mut out = Vec::new();
                nodes
                    .iter_mut()
                    .find(|m| m.id == to)
                    .unwrap()
                    .on_heartbeat(from, &lease, now, &mut out);
                events.extend(out.into_iter().map(|e| (to, e)));
            }
        }
        events
    }

    fn tick(
        nodes: &mut [Membership],
        now: Time,
        open: impl Fn(NodeId, NodeId) -> bool + Copy,
    ) -> Vec<(NodeId, Event)> {
        let mut events = beat(nodes, now, open);
        let ids: Vec<NodeId> = nodes.iter().map(|m| m.id).collect();
        for m in nodes.iter_mut() {
            let up: Vec<NodeId> = ids
                .iter()
                .copied()
                .filter(|&p| p != m.id && open(p, m.id) && open(m.id, p))
                .collect();
            let mut out = Vec::new();
            m.handle_timeout(now, up.into_iter(), &mut out);
            events.extend(out.into_iter().map(|e| (m.id, e)));
        }
        // Messages travel over open links only.
        let (sends, other): (Vec<_>, Vec<_>) =
            events.into_iter().partition(|(_, e)| matches!(e, Event::Send(..)));
        let sends = sends
            .into_iter()
            .filter(|(from, e)| matches!(e, Event::Send(to, _) if open(*from, *to)))
            .collect();
        let mut rest = settle(nodes, now, sends);
        rest.extend(other);
        rest
    }

    fn run(
        nodes: &mut [Membership],
        from: u64,
        to: u64,
        open: impl Fn(NodeId, NodeId) -> bool + Copy,
    ) -> Vec<(NodeId, Event)> {
        let mut events = Vec::new();
        for t in (from..to).step_by(50) {
            events.extend(tick(nodes, ms(t), open));
        }
        events
    }

    fn all(_: NodeId, _: NodeId) -> bool {
        true
    }

    #[test]
    fn a_cluster_installs_one_view_of_everyone_and_every_node_holds_a_lease() {
        let mut nodes: Vec<Membership> = (1..=5).map(|i| node(i, 5)).collect();
        let events = run(&mut nodes, 0, 1000, all);
        for m in &nodes {
            let view = m.view().expect("a view is installed");
            assert_eq!(view.members, ids(&[1, 2, 3, 4, 5]));
            assert!(m.settled(), "n{}: every member announced", m.id.0);
            assert!(m.acting(ms(1000)), "n{}: holds a lease", m.id.0);
        }
        // Nobody had a view: nobody starts over, and every node meets
        // every peer once, as it announces the view.
        let ups = events.iter().filter(|(_, e)| matches!(e, Event::Up(_))).count();
        assert_eq!(ups, 5 * 4);
        assert!(!events.iter().any(|(_, e)| *e == Event::Reset));
    }

    #[test]
    fn the_minority_loses_its_lease_before_the_majority_counts_it_down() {
        let mut nodes: Vec<Membership> = (1..=5).map(|i| node(i, 5)).collect();
        run(&mut nodes, 0, 1000, all);
        let first = nodes[0].view().unwrap().epoch;
        // {1,2} | {3,4,5} from t = 1000.
        let side = |n: NodeId| n.0 <= 2;
        let cut = |a: NodeId, b: NodeId| side(a) == side(b);
        let mut lost_at = None;
        let mut down_at = None;
        for t in (1000..3000).step_by(10) {
            let now = ms(t);
            let events = if t % 50 == 0 { tick(&mut nodes, now, cut) } else { Vec::new() };
            if lost_at.is_none() && !nodes[0].quorum(now) && !nodes[1].quorum(now) {
                lost_at = Some(t);
            }
            if down_at.is_none()
                && events.iter().any(|(n, e)| n.0 >= 3 && matches!(e, Event::Down(_)))
            {
                down_at = Some(t);
                assert!(lost_at.is_some_and(|l| l <= t), "the minority stopped first");
            }
            for m in &nodes[..2] {
                if t >= 1400 {
                    assert!(!m.acting(now), "n{} acts in the minority at {t}", m.id.0);
                }
            }
        }
        assert!(down_at.is_some(), "the majority moved on");
        for m in &nodes[2..] {
            let view = m.view().unwrap();
            assert_eq!(view.members, ids(&[3, 4, 5]));
            assert!(view.epoch > first);
            assert!(m.acting(ms(3000)));
        }
        // Healed: the minority comes back as joiners, in a newer view.
        let events = run(&mut nodes, 3000, 5000, all);
        for m in &nodes {
            assert_eq!(m.view().unwrap().members, ids(&[1, 2, 3, 4, 5]));
            assert!(m.acting(ms(5000)), "n{}", m.id.0);
        }
        let mut resets: Vec<NodeId> =
            events.iter().filter(|(_, e)| *e == Event::Reset).map(|(n, _)| *n).collect();
        resets.sort_unstable();
        assert_eq!(resets, ids(&[1, 2]), "only the minority starts over");
    }

    #[test]
    fn an_acceptor_waits_out_the_lease_it_vouched_for() {
        let mut nodes: Vec<Membership> = (1..=3).map(|i| node(i, 3)).collect();
        run(&mut nodes, 0, 1000, all);
        // n3 vouched for n1 at the last beat; a proposal without n1 comes
        // at once: n3 accepts only once n1's lease can have run out.
        let wait = nodes[2].timing.wait();
        let arrived = nodes[2].peers[&NodeId(1)].ask.unwrap().1;
        let epoch = nodes[1].promised().next_for(NodeId(2));
        let mut out = Vec::new();
        nodes[2].handle(
            NodeId(2),
            ViewMsg::Propose { epoch, members: ids(&[2, 3]) },
            ms(960),
            &mut out,
        );
        assert_eq!(out, vec![Event::Promised], "no answer yet");
        assert!(!nodes[2].acting(ms(960)), "a promise of a new view stops it acting");
        let mut out = Vec::new();
        nodes[2].handle_timeout(arrived + wait - ms(1), std::iter::empty(), &mut out);
        assert!(!out.iter().any(|e| matches!(e, Event::Send(_, ViewMsg::Accept { .. }))));
        let mut out = Vec::new();
        nodes[2].handle_timeout(arrived + wait, std::iter::empty(), &mut out);
        assert!(out.iter().any(|e| matches!(e, Event::Send(NodeId(2), ViewMsg::Accept { .. }))));
        // And it vouches for n1 no more.
        assert_eq!(nodes[2].heartbeat(NodeId(1), ms(1000)).echo, None);
    }

    #[test]
    fn an_older_or_equal_proposal_is_rejected() {
        let mut m = node(1, 3);
        let epoch = Epoch::new(5, NodeId(2));
        let mut out = Vec::new();
        m.handle(NodeId(2), ViewMsg::Propose { epoch, members: ids(&[1, 2]) }, ms(0), &mut out);
        assert_eq!(m.promised(), epoch);
        for e in [epoch, Epoch::new(4, NodeId(3))] {
            let mut out = Vec::new();
            m.handle(
                NodeId(e.leader().0),
                ViewMsg::Propose { epoch: e, members: ids(&[1, 2, 3]) },
                ms(1),
                &mut out,
            );
            assert_eq!(
                out,
                vec![Event::Send(e.leader(), ViewMsg::Reject { epoch: e, promised: epoch })]
            );
        }
    }

    #[test]
    fn malformed_views_change_nothing() {
        let mut m = node(1, 5);
        let mut out = Vec::new();
        let bad = [
            ids(&[1, 2]),    // no majority
            ids(&[2, 1, 3]), // unsorted
            ids(&[1, 2, 9]), // a stranger
            ids(&[2, 3, 4]), // without this node
        ];
        for members in bad {
            let epoch = Epoch::new(3, NodeId(2));
            m.handle(
                NodeId(2),
                ViewMsg::Propose { epoch, members: members.clone() },
                ms(0),
                &mut out,
            );
            let view = View { epoch, members };
            m.handle(
                NodeId(2),
                ViewMsg::Install { view, base: None, joiners: vec![] },
                ms(0),
                &mut out,
            );
        }
        // A proposal in another's name.
        let epoch = Epoch::new(3, NodeId(3));
        m.handle(NodeId(2), ViewMsg::Propose { epoch, members: ids(&[1, 2, 3]) }, ms(0), &mut out);
        assert!(out.is_empty());
        assert_eq!(m.promised(), Epoch(0));
        assert!(m.view().is_none());
        // A stranger is not heard at all.
        m.handle(NodeId(9), ViewMsg::Reject { epoch, promised: Epoch(u64::MAX) }, ms(0), &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn the_wait_covers_the_drift_both_ways() {
        let t = LeaseTiming {
            partitions: Partitions::Majority,
            lease: ms(1000),
            max_clock_drift_ppm: 10_000,
        };
        // 1000 · 1.01 / 0.99 = 1020.2… ms
        assert_eq!(t.wait(), Duration::from_nanos(1_020_202_021));
        let none = LeaseTiming { max_clock_drift_ppm: 0, ..t };
        assert_eq!(none.wait(), ms(1000));
    }

    #[test]
    fn detector_mode_is_inert() {
        let mut m = Membership::new(
            NodeId(1),
            &ids(&[1, 2, 3]),
            LeaseTiming { partitions: Partitions::Detector, ..LeaseTiming::default() },
            ms(250),
            ms(50),
            Epoch(0),
        );
        assert!(m.acting(ms(0)) && m.quorum(ms(0)) && m.admits(NodeId(2)) && m.settled());
        let mut out = Vec::new();
        m.handle_timeout(ms(1000), [NodeId(2)].into_iter(), &mut out);
        m.handle(
            NodeId(2),
            ViewMsg::Propose { epoch: Epoch::new(1, NodeId(2)), members: ids(&[1, 2]) },
            ms(0),
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(m.heartbeat(NodeId(2), ms(5)).echo, None);
    }
}

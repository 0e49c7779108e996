//! The engine's locks: one instance of the mutual-exclusion algorithm per
//! [`Name`], each with the grant it gave this node and the request it holds
//! back until the node joins.
//!
//! Instances are independent: each has its own state, messages and timers,
//! and they share only the node's peers, its coordinator and its clock
//! *floor*, the highest watermark (Lamport clock, ticket, generation) any
//! of them has reached or any peer has announced. A new instance starts
//! above the floor, and so does every request, so stamps and fences issued
//! under any name stay above whatever the node has seen under any other:
//! one value for heartbeats to carry and for stable storage to reserve
//! above, whatever the number of names.
//!
//! **Forgetting.** An instance that holds nothing a new one would lack
//! ([`forgettable`](crate::MutexAlgorithm::forgettable)) for a while
//! ([`Forgetting::after`]) is dropped, and made anew when the lock is next
//! used here: an idle lock costs nothing. What must outlive it (a
//! coordinator's last fence, the token's generation) is kept as its
//! *remnant*, one number, and handed to the next instance; at most
//! [`Forgetting::remnants`] of them, the oldest dropped beyond that, their
//! highest value kept as the *remnant floor*. A remnant is filed under a
//! 64-bit hash of its lock's name, not the name (16 bytes a lock, whatever
//! its name's length); should two names ever share a hash, they share the
//! higher remnant, which every algorithm takes as safely as its own (a
//! fence counted on from higher up; a generation that makes a live token
//! look stale, which costs a new token, never a second one). The
//! `default` lock is never forgotten: every command uses it.
//!
//! The engine creates an instance on first use, here or at a peer (see
//! [`Engine`](crate::Engine)); this module only keeps them.

use crate::algorithm::{AlgoConfig, Forgetting};
use crate::erased::DynMutex;
use crate::name::Name;
use crate::outbox::Time;
use crate::stable::WATERMARK_RESERVE;
use crate::types::{CsState, Fence, Mode};
use std::collections::{HashMap, VecDeque};

/// The instances' table: looked up on every message of every lock, kept in
/// no order (what must go in name order sorts first).
type Table = HashMap<Name, Instance, foldhash::fast::FixedState>;

/// The remnants, by the hash of their lock's name.
type Remnants = HashMap<u64, u64, foldhash::fast::FixedState>;

/// A name's hash, under which its remnant is filed: the same in every run.
fn remnant_key(name: &Name) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x7265_6d6e_616e_7473).hash_one(name.as_str())
}

/// One lock's algorithm instance and what the engine keeps beside it.
pub(crate) struct Instance {
    /// The algorithm.
    pub(crate) mutex: Box<dyn DynMutex>,
    /// The fences of this node's current grants, oldest first: one at
    /// most, but for an algorithm that counts sessions.
    pub(crate) fences: Vec<Fence>,
    /// Requests made before the node joined, held until then.
    pub(crate) pending: u32,
    /// Requests handed to the algorithm and not granted yet.
    pub(crate) wanting: u32,
    /// Of the requests `pending` and `wanting` count, the reads
    /// ([`Mode::Read`]), in that order.
    pub(crate) reads: (u32, u32),
    /// How many may hold the lock at once.
    pub(crate) permits: u32,
    /// Since when it has been forgettable, if it is.
    idle_since: Option<Time>,
}

impl Instance {
    /// Where this node stands with respect to this lock.
    pub(crate) fn cs_state(&self) -> CsState {
        if !self.fences.is_empty() {
            CsState::Held
        } else if self.pending > 0 {
            CsState::Wanting
        } else {
            self.mutex.cs_state()
        }
    }

    /// The grants this node holds or has asked for (or will ask for once
    /// joined).
    pub(crate) fn outstanding(&self) -> u32 {
        self.fences.len() as u32 + self.pending + self.wanting
    }

    /// The grants in `mode` this node holds or has asked for.
    pub(crate) fn outstanding_in(&self, mode: Mode) -> u32 {
        let held = self.fences.iter().filter(|&&f| self.mutex.mode_of(f) == mode).count() as u32;
        let reads = self.reads.0 + self.reads.1;
        match mode {
            Mode::Read => held + reads,
            Mode::Write => held + (self.pending + self.wanting).saturating_sub(reads),
        }
    }

    /// One more request in `mode`, held until the node joins (`pending`)
    /// or handed to the algorithm.
    pub(crate) fn count_request(&mut self, mode: Mode, pending: bool) {
        let read = u32::from(mode == Mode::Read);
        if pending {
            self.pending += 1;
            self.reads.0 += read;
        } else {
            self.wanting += 1;
            self.reads.1 += read;
        }
    }

    fn forgettable(&self) -> bool {
        self.pending == 0 && self.fences.is_empty() && self.mutex.forgettable()
    }
}

impl Clone for Instance {
    fn clone(&self) -> Instance {
        Instance {
            mutex: self.mutex.clone_box(),
            fences: self.fences.clone(),
            pending: self.pending,
            wanting: self.wanting,
            reads: self.reads,
            permits: self.permits,
            idle_since: self.idle_since,
        }
    }
}

/// Every lock instance at this node; see the module documentation.
#[derive(Clone)]
pub(crate) struct Resources {
    build: fn(&AlgoConfig) -> Box<dyn DynMutex>,
    map: Table,
    floor: u64,
    /// The highest value any instance made itself in this run
    /// ([`MutexAlgorithm::made`](crate::MutexAlgorithm::made)).
    made: u64,
    /// How far above the floor stable storage keeps its watermark (the
    /// algorithm's `WATERMARK_AHEAD`) and how much further it writes
    /// (`WATERMARK_RESERVE`): constants of the algorithm, read off each
    /// instance as it is made.
    ahead: u64,
    reserve: u64,
    forgetting: Option<Forgetting>,
    /// Instances that became forgettable, in the order they did (an entry
    /// whose instance changed since is passed over).
    idle: VecDeque<(Time, Name)>,
    /// What forgotten instances left, by lock.
    remnants: Remnants,
    /// The locks with a remnant, oldest first (an entry may be stale).
    remnant_order: VecDeque<u64>,
    /// The highest remnant dropped for room.
    remnant_floor: u64,
}

impl Resources {
    /// No instances yet, the clock floor at zero; instances are forgotten
    /// as `forgetting` says.
    pub(crate) fn new(
        build: fn(&AlgoConfig) -> Box<dyn DynMutex>,
        forgetting: Option<Forgetting>,
    ) -> Resources {
        Resources {
            build,
            map: Table::with_hasher(foldhash::fast::FixedState::with_seed(0)),
            floor: 0,
            made: 0,
            ahead: 0,
            reserve: WATERMARK_RESERVE,
            forgetting,
            idle: VecDeque::new(),
            remnants: Remnants::with_hasher(foldhash::fast::FixedState::with_seed(0)),
            remnant_order: VecDeque::new(),
            remnant_floor: 0,
        }
    }

    /// Builds `name`'s instance from `cfg` (whose `name`, `capacity` and
    /// stored record are that lock's), above the clock floor and with what
    /// its forgotten predecessor left, and keeps it. The caller tells it
    /// about peers and the coordinator.
    pub(crate) fn create(&mut self, cfg: &AlgoConfig) -> &mut Instance {
        let mut mutex = (self.build)(cfg);
        (self.ahead, self.reserve) = (mutex.watermark_ahead(), mutex.watermark_reserve());
        mutex.observe_watermark(self.floor);
        mutex.observe_made(self.made);
        // The remnant stays: it is still a bound for the instance after
        // this one (which leaves a higher one), and a name that shares its
        // hash keeps it too.
        let own = self.remnants.get(&remnant_key(&cfg.name)).copied();
        if own.is_some() || self.remnant_floor > 0 {
            mutex.observe_remnant(own, self.remnant_floor);
        }
        let permits = u32::try_from(cfg.capacity).unwrap_or(u32::MAX);
        let instance = Instance {
            mutex,
            fences: Vec::new(),
            pending: 0,
            wanting: 0,
            reads: (0, 0),
            permits,
            idle_since: None,
        };
        self.map.entry(cfg.name.clone()).or_insert(instance)
    }

    /// `name`'s instance, if it has one.
    pub(crate) fn get(&self, name: &Name) -> Option<&Instance> {
        self.map.get(name)
    }

    /// The same, to change.
    pub(crate) fn get_mut(&mut self, name: &Name) -> Option<&mut Instance> {
        self.map.get_mut(name)
    }

    /// Drops `name`'s instance, keeping nothing of it.
    pub(crate) fn remove(&mut self, name: &Name) {
        self.map.remove(name);
    }

    /// Whether `name` has an instance.
    pub(crate) fn contains(&self, name: &Name) -> bool {
        self.map.contains_key(name)
    }

    /// How many instances there are.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// How many remnants are kept.
    pub(crate) fn remnants(&self) -> usize {
        self.remnants.len()
    }

    /// Every lock's name, in order (a copy: the caller feeds each one an
    /// input that may need the engine whole).
    pub(crate) fn names(&self) -> Vec<Name> {
        let mut names: Vec<Name> = self.map.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// Every instance, by name, in name order.
    pub(crate) fn in_order(&self) -> Vec<(&Name, &Instance)> {
        let mut all: Vec<(&Name, &Instance)> = self.map.iter().collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all
    }

    /// The highest watermark seen under any name or from any peer.
    pub(crate) fn floor(&self) -> u64 {
        self.floor
    }

    /// The highest value any instance made itself in this run.
    pub(crate) fn made(&self) -> u64 {
        self.made
    }

    /// How far above the floor stable storage must keep its watermark,
    /// and how much further it reserves when it writes (see
    /// [`MutexAlgorithm::WATERMARK_AHEAD`] and
    /// [`MutexAlgorithm::WATERMARK_RESERVE`]).
    ///
    /// [`MutexAlgorithm::WATERMARK_AHEAD`]: crate::algorithm::MutexAlgorithm::WATERMARK_AHEAD
    /// [`MutexAlgorithm::WATERMARK_RESERVE`]: crate::algorithm::MutexAlgorithm::WATERMARK_RESERVE
    pub(crate) fn ahead_and_reserve(&self) -> (u64, u64) {
        (self.ahead, self.reserve)
    }

    /// A peer's or the stored watermark: the floor rises to it. Instances
    /// catch up when they next ask ([`Resources::catch_up`]), not now: a
    /// heartbeat costs the same whatever the number of names.
    pub(crate) fn observe(&mut self, watermark: u64) {
        self.floor = self.floor.max(watermark);
    }

    /// After `name`'s instance took a step at `now`: the floor follows its
    /// clock, and if it just became forgettable, its wait begins. Nothing
    /// is forgotten before the node has `joined`: what a joining node's
    /// instances hear waits for the coordinator it learns on joining.
    pub(crate) fn stepped(&mut self, name: &Name, now: Time, joined: bool) {
        let Some(i) = self.map.get_mut(name) else { return };
        self.floor = self.floor.max(i.mutex.watermark());
        self.made = self.made.max(i.mutex.made());
        if self.forgetting.is_none() || name.as_str() == Name::DEFAULT || !joined {
            return;
        }
        match (i.forgettable(), i.idle_since) {
            (true, None) => {
                i.idle_since = Some(now);
                self.idle.push_back((now, name.clone()));
            }
            (false, Some(_)) => i.idle_since = None,
            _ => {}
        }
    }

    /// When the next instance may be forgotten.
    pub(crate) fn next_forgetting(&self) -> Option<Time> {
        let after = self.forgetting?.after;
        self.idle.front().map(|(since, _)| *since + after)
    }

    /// Forgets every instance that has been forgettable long enough by
    /// `now`, keeping each one's remnant; returns their names.
    pub(crate) fn forget_due(&mut self, now: Time) -> Vec<Name> {
        let Some(Forgetting { after, .. }) = self.forgetting else { return Vec::new() };
        let mut forgotten = Vec::new();
        while let Some((since, name)) = self.idle.front().cloned() {
            if since + after > now {
                break;
            }
            self.idle.pop_front();
            if self.forget(&name, since) {
                forgotten.push(name);
            }
        }
        self.tidy();
        forgotten
    }

    /// Whether an instance is forgettable now, however briefly: room for
    /// a new lock when the node keeps as many as it may.
    pub(crate) fn has_idle(&self) -> bool {
        self.idle.iter().any(|(since, name)| self.still_idle(name, *since))
    }

    /// Forgets the instance forgettable the longest, however briefly (the
    /// least recently used idle lock), to make room for a new one; returns
    /// its name. As safe as forgetting it on time: what makes an instance
    /// forgettable is what it holds, not how long it has held nothing.
    pub(crate) fn forget_oldest(&mut self) -> Option<Name> {
        while let Some((since, name)) = self.idle.pop_front() {
            if self.forget(&name, since) {
                return Some(name);
            }
        }
        None
    }

    /// Whether `name`'s instance has stayed forgettable since `since`.
    fn still_idle(&self, name: &Name, since: Time) -> bool {
        self.map.get(name).is_some_and(|i| i.idle_since == Some(since) && i.forgettable())
    }

    /// Whether `name`'s instance could be forgotten now with nothing lost
    /// (not the default lock's, which lives as long as the node).
    pub(crate) fn replaceable(&self, name: &Name) -> bool {
        name.as_str() != Name::DEFAULT && self.map.get(name).is_some_and(Instance::forgettable)
    }

    /// Forgets `name`'s instance now, keeping its remnant, if it is
    /// [`replaceable`](Resources::replaceable): the lock is asked for with
    /// another number of permits while nothing of the old one is in use
    /// here. Whether it did.
    pub(crate) fn forget_now(&mut self, name: &Name) -> bool {
        if !self.replaceable(name) {
            return false;
        }
        self.keep_remnant(name);
        self.map.remove(name);
        true
    }

    /// Forgets `name`'s instance, keeping its remnant, if it has stayed
    /// forgettable since `since` (an entry of the idle queue); whether it
    /// did.
    fn forget(&mut self, name: &Name, since: Time) -> bool {
        if !self.still_idle(name, since) {
            return false; // busy again since, or gone
        }
        self.keep_remnant(name);
        self.map.remove(name);
        true
    }

    /// Files what `name`'s instance leaves when it is forgotten, dropping
    /// the oldest remnant (into the floor) when there are too many.
    fn keep_remnant(&mut self, name: &Name) {
        let remnants = self.forgetting.map_or(0, |f| f.remnants);
        if let Some(remnant) = self.map.get(name).and_then(|i| i.mutex.remnant()) {
            let key = remnant_key(name);
            let kept = self.remnants.entry(key).or_insert(remnant);
            *kept = (*kept).max(remnant);
            self.remnant_order.push_back(key);
            while self.remnants.len() > remnants {
                let Some(oldest) = self.remnant_order.pop_front() else { break };
                if let Some(dropped) = self.remnants.remove(&oldest) {
                    self.remnant_floor = self.remnant_floor.max(dropped);
                }
            }
        }
    }

    /// Gives back what the tables grew to hold once what filled them is
    /// forgotten: they do not shrink by themselves.
    fn tidy(&mut self) {
        if self.remnant_order.len() > 2 * self.remnants.len() + 64 {
            // Drop the stale entries of locks made again since.
            let remnants = &self.remnants;
            self.remnant_order.retain(|n| remnants.contains_key(n));
        }
        if self.map.capacity() > 4 * self.map.len() + 64 {
            self.map.shrink_to_fit();
        }
        if self.idle.capacity() > 4 * self.idle.len() + 64 {
            self.idle.shrink_to_fit();
        }
        if self.remnant_order.capacity() > 4 * self.remnant_order.len() + 64 {
            self.remnant_order.shrink_to_fit();
        }
    }

    /// Feeds the forgetting state to a checker's hash, times as seen from
    /// `now`.
    pub(crate) fn hash_forgetting<H: std::hash::Hasher>(&self, h: &mut H, now: Time) {
        use std::hash::Hash;
        if self.forgetting.is_none() {
            return;
        }
        for (since, name) in &self.idle {
            (crate::outbox::relative(*since, now), name).hash(h);
        }
        let mut remnants: Vec<(&u64, &u64)> = self.remnants.iter().collect();
        remnants.sort_unstable();
        remnants.hash(h);
        self.remnant_floor.hash(h);
    }

    /// Brings `name`'s instance up to the floor, before it stamps a
    /// request.
    pub(crate) fn catch_up(&mut self, name: &Name) {
        let floor = self.floor;
        if let Some(i) = self.map.get_mut(name) {
            i.mutex.observe_watermark(floor);
        }
    }

    /// The names with a request held back until the node joins, in order.
    pub(crate) fn pending(&self) -> Vec<Name> {
        let mut names: Vec<Name> =
            self.map.iter().filter(|(_, i)| i.pending > 0).map(|(n, _)| n.clone()).collect();
        names.sort_unstable();
        names
    }

    /// Whether any request is held back until the node joins.
    pub(crate) fn any_pending(&self) -> bool {
        self.map.values().any(|i| i.pending > 0)
    }

    /// Where the node stands over all its locks: holding one if it holds
    /// any, else wanting one if it wants any, else idle.
    pub(crate) fn cs_state(&self) -> CsState {
        let mut state = CsState::Idle;
        for i in self.map.values() {
            match i.cs_state() {
                CsState::Held => return CsState::Held,
                CsState::Wanting => state = CsState::Wanting,
                CsState::Idle => {}
            }
        }
        state
    }
}

//! What a node's sessions want of a lock, and how the engine follows it.
//!
//! A node's sessions (its clients; the simulator's clients) hold grants
//! of a lock and wait for it. After anything changes what they hold or
//! want, the driver hands the engine a [`Demand`] and the engine
//! [follows](Engine::follow) it: it gives back every grant no session
//! uses and asks for what the waiting sessions lack. This is the one
//! place that rule is written, for the tokio node and the simulator alike.

use crate::engine::{Engine, RequestError};
use crate::name::Name;
use crate::outbox::Time;
use crate::types::{CsState, Fence, Mode};

/// What a lock's sessions at one node want of the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    /// The permits they ask it with.
    pub permits: u32,
    /// The grants its sessions hold (and the node holds for lost ones).
    pub used: Vec<Fence>,
    /// How many sessions wait for it.
    pub waiting: u32,
    /// Of the sessions that hold it and wait for it, the readers.
    pub reads: u32,
    /// Of the sessions that wait for it, the readers.
    pub waiting_reads: u32,
}

/// Which of a node's waiting sessions take one of its grants of a lock
/// ([`Engine::takers`]), in the order they asked there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takers {
    /// The first one waiting, whatever its mode.
    First,
    /// The first one waiting in this mode.
    FirstIn(Mode),
    /// Every one waiting to read ahead of the first waiting to write,
    /// together: they share the grant, and the node gives it back once
    /// the last of them is done. A reader that asks later waits for the
    /// node's next grant, so that readers arriving one after another
    /// cannot keep the node holding while a writer elsewhere waits.
    Readers,
}

impl Demand {
    /// Nobody holds or wants it.
    pub const NONE: Demand =
        Demand { permits: 1, used: Vec::new(), waiting: 0, reads: 0, waiting_reads: 0 };

    /// Whether a session holds a grant of it.
    pub fn holding(&self) -> bool {
        !self.used.is_empty()
    }

    /// The mode a node asks in for its waiting sessions, where the
    /// algorithm grants it once for all of them ([`Mode::serving`]).
    pub fn asking(&self) -> Mode {
        Mode::serving(self.waiting, self.waiting_reads)
    }
}

impl Engine {
    /// Which of this node's waiting sessions take its grant `fence` of
    /// lock `name`. Where reads do not share the lock (no reader form, or
    /// more than one permit), the first waiting. Where the algorithm
    /// counts sessions, each session asked for a grant of its own, in its
    /// mode: the first waiting in the grant's mode. Else the node asked
    /// once for all its sessions: a write grant, which nobody shares,
    /// goes to the first waiting (it serves a reader too), and a read
    /// grant to every reader waiting ahead of the first writer.
    pub fn takers(&self, name: &Name, fence: Fence) -> Takers {
        let permits = self.permits_of(name).unwrap_or(1);
        if self.mode_in_use(Mode::Read, permits) == Mode::Write {
            return Takers::First;
        }
        match self.mode_of(name, fence) {
            mode if self.counts_sessions() => Takers::FirstIn(mode),
            Mode::Read => Takers::Readers,
            Mode::Write => Takers::First,
        }
    }

    /// Brings lock `name` in line with `demand`. Every grant no session
    /// uses is given back, unless `keep` says otherwise (`keep` is asked
    /// once for each such grant, just before it would go: a driver that
    /// holds a grant back for a waiting session keeps it, and forgets
    /// what it held back for one that goes). Then the waiting sessions
    /// are asked for: where the algorithm counts sessions, a grant per
    /// session that holds or waits, each in its mode
    /// ([`request_for_sessions`](Self::request_for_sessions)); else once
    /// for all of them, in the mode that serves them
    /// ([`Demand::asking`]), when the node neither holds nor waits.
    pub fn follow(
        &mut self,
        now: Time,
        name: &Name,
        demand: &Demand,
        mut keep: impl FnMut(Fence) -> bool,
    ) -> Result<(), RequestError> {
        if self.counts_sessions() {
            let held: Vec<Fence> = self.fences_of(name).to_vec();
            for fence in held {
                if !demand.used.contains(&fence) && !keep(fence) {
                    self.release_grant(now, name, fence);
                }
            }
            let sessions = demand.used.len() as u32 + demand.waiting;
            return self.request_for_sessions(now, name, demand.permits, (sessions, demand.reads));
        }
        match self.cs_state_of(name) {
            CsState::Held if demand.holding() => return Ok(()),
            CsState::Held => {
                let held: Vec<Fence> = self.fences_of(name).to_vec();
                if held.into_iter().any(&mut keep) {
                    return Ok(());
                }
                self.release(now, name);
            }
            CsState::Idle => {}
            CsState::Wanting => return Ok(()),
        }
        if demand.waiting == 0 {
            return Ok(());
        }
        self.request_in(now, name, demand.permits, demand.asking())
    }
}

//! Grants the agent holds back before handing them to the application,
//! under a **lock delay** (Chubby's and Consul's `lock_delay`): after a
//! holder may have been lost involuntarily, no grant is handed to a
//! session for a while, so that a resource which cannot check fences sees
//! the lost holder's last writes land first.
//!
//! Two things hold a grant back. A peer suspected (it may have held some
//! name) blocks every grant this node hands out until the delay has run
//! from the suspicion ([`Holdback::block_until`]). And a grant waits until
//! every peer counted up has been heard from since it came: the holder it
//! follows may have died with its node, and the node that handed the lock
//! on noticed before this one did; a dead peer is never heard from, is
//! suspected, and then the delay runs. The agent asks every peer for a
//! heartbeat when a grant comes ([`Holdback::hold`] says when to), and
//! looks again as each arrives, or by the recheck time at the latest.
//! Times are the agent's, from its start.

use coterie_core::{Fence, Name};
use std::collections::BTreeMap;
use std::time::Duration;

/// One grant held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    /// When the grant came.
    arrived: Duration,
    /// Looked at again by then at the latest, while peers are awaited.
    recheck: Option<Duration>,
}

/// The grants held back, by name and fence (a node may hold several
/// grants of a lock whose algorithm counts sessions); see the module
/// documentation.
#[derive(Debug, Default)]
pub(crate) struct Holdback {
    blocked_until: Duration,
    held: BTreeMap<(Name, Fence), Held>,
}

/// Whether a grant may be handed on now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Yes.
    Hand,
    /// Not before every peer is heard from after `arrived`; ask them now
    /// if `probe`.
    AwaitPeers {
        /// When the grant came.
        arrived: Duration,
        /// It came just now: ask every peer for a heartbeat.
        probe: bool,
    },
    /// Not before the delay ends.
    Blocked,
}

impl Holdback {
    /// Hands no grant to a session before `until`.
    pub(crate) fn block_until(&mut self, until: Duration) {
        self.blocked_until = self.blocked_until.max(until);
    }

    /// Whether `name`'s grant (`fence`) may be handed on at `now`, given
    /// whether every peer has been heard from since it came
    /// (`heard_since`). A grant that may not is kept, to be looked at
    /// again ([`pending`](Self::pending)); one that may is forgotten.
    pub(crate) fn judge(
        &mut self,
        name: &Name,
        fence: Fence,
        now: Duration,
        heartbeat: Duration,
        heard_since: impl Fn(Duration) -> bool,
    ) -> Verdict {
        let key = (name.clone(), fence);
        let held = self.held.get(&key);
        let arrived = held.map_or(now, |h| h.arrived);
        let verdict = if !heard_since(arrived) {
            Verdict::AwaitPeers { arrived, probe: held.is_none() }
        } else if now < self.blocked_until {
            Verdict::Blocked
        } else {
            self.held.remove(&key);
            return Verdict::Hand;
        };
        let recheck = match verdict {
            Verdict::AwaitPeers { .. } => Some(now + heartbeat / 5),
            _ => None,
        };
        self.held.insert(key, Held { arrived, recheck });
        verdict
    }

    /// `name`'s grants held back, by fence.
    fn of<'a>(&'a self, name: &'a Name) -> impl Iterator<Item = Fence> + 'a {
        let from = (name.clone(), Fence(0));
        self.held
            .range(from..)
            .map(|((n, f), _)| (n, *f))
            .take_while(move |(n, _)| *n == name)
            .map(|(_, f)| f)
    }

    /// Forgets `name`'s grants held back, if any (the engine let them go).
    pub(crate) fn forget(&mut self, name: &Name) -> bool {
        let fences: Vec<Fence> = self.of(name).collect();
        for fence in &fences {
            self.held.remove(&(name.clone(), *fence));
        }
        !fences.is_empty()
    }

    /// Forgets `name`'s grant `fence`, if it is held back.
    pub(crate) fn forget_grant(&mut self, name: &Name, fence: Fence) {
        self.held.remove(&(name.clone(), fence));
    }

    /// Whether `name`'s grant `fence` is held back.
    pub(crate) fn holds_grant(&self, name: &Name, fence: Fence) -> bool {
        self.held.contains_key(&(name.clone(), fence))
    }

    /// The grants held back, to be judged again.
    pub(crate) fn pending(&self) -> Vec<(Name, Fence)> {
        self.held.keys().cloned().collect()
    }

    /// When a held grant is next worth judging again.
    pub(crate) fn deadline(&self) -> Option<Duration> {
        self.held
            .values()
            .map(|h| h.recheck.map_or(self.blocked_until, |at| at.max(self.blocked_until)))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_grant_waits_for_every_peer_then_for_the_delay() {
        let mut h = Holdback::default();
        let x = Name::new("x").unwrap();
        let hb = ms(50);
        // Nobody heard since: ask them, look again within a fifth of a
        // heartbeat.
        let v = h.judge(&x, Fence(4), ms(100), hb, |_| false);
        assert_eq!(v, Verdict::AwaitPeers { arrived: ms(100), probe: true });
        assert_eq!(h.deadline(), Some(ms(110)));
        let v = h.judge(&x, Fence(4), ms(105), hb, |_| false);
        assert_eq!(v, Verdict::AwaitPeers { arrived: ms(100), probe: false }, "asked once");
        // Heard, but a peer was suspected: the delay runs.
        h.block_until(ms(500));
        assert_eq!(h.judge(&x, Fence(4), ms(110), hb, |_| true), Verdict::Blocked);
        assert_eq!(h.deadline(), Some(ms(500)));
        assert_eq!(h.pending(), vec![(x.clone(), Fence(4))]);
        assert_eq!(h.judge(&x, Fence(4), ms(500), hb, |_| true), Verdict::Hand);
        assert!(h.pending().is_empty() && h.deadline().is_none());
    }

    #[test]
    fn names_are_held_back_apart() {
        let mut h = Holdback::default();
        let (a, b) = (Name::new("a").unwrap(), Name::new("b").unwrap());
        h.block_until(ms(300));
        assert_eq!(h.judge(&a, Fence(1), ms(10), ms(50), |_| true), Verdict::Blocked);
        assert_eq!(h.judge(&b, Fence(2), ms(20), ms(50), |_| true), Verdict::Blocked);
        assert!(h.forget(&a));
        assert!(!h.holds_grant(&a, Fence(1)) && h.holds_grant(&b, Fence(2)));
        assert_eq!(h.pending(), vec![(b, Fence(2))]);
    }
}

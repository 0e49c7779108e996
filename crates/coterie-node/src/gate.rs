//! The gate between the engine and the world: outputs held back until the
//! record they rest on is durable.
//!
//! The engine numbers its records in the order it hands them over and
//! tags each output with the record it rests on
//! ([`Engine::poll_output_resting`](coterie_core::Engine::poll_output_resting)).
//! An output leaves once that record is on disk and every output before it
//! in its lane has left: one lane per peer, so frames to a peer keep their
//! order, and one for what stays on this node (grants to its sessions,
//! events for watchers). Lanes do not wait for each other: the network
//! never ordered messages on different links, and a grant to a local
//! session rests on its own record, not on a record another peer's grant
//! needs. A write that fails closes the gate for good.
//!
//! A grant waiting here is one the engine counts held and no session
//! uses yet, because none has been handed it: the agent asks
//! [`Gate::holds_grant`] before it gives back a grant nobody uses.

use coterie_core::engine::Output;
use coterie_core::{Fence, Name, NodeId};
use std::collections::{BTreeMap, VecDeque};

/// Where an output goes, for ordering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Lane {
    Peer(NodeId),
    Local,
}

impl Lane {
    fn of(output: &Output) -> Lane {
        match output {
            Output::Send { to, .. } => Lane::Peer(*to),
            _ => Lane::Local,
        }
    }
}

/// Held outputs and the records they wait for; see the module
/// documentation.
#[derive(Default)]
pub(crate) struct Gate {
    /// The number of the latest record handed to storage.
    handed: u64,
    /// The latest record known to be on disk.
    durable: u64,
    /// Held outputs per lane, in order, each with the record it rests on.
    held: BTreeMap<Lane, VecDeque<(u64, Output)>>,
    /// A write failed: nothing leaves any more.
    failed: bool,
}

impl Gate {
    /// A record was handed to storage; returns its number (the engine's).
    pub(crate) fn hand(&mut self) -> u64 {
        self.handed += 1;
        self.handed
    }

    /// Every record handed so far is on disk (it was written on the spot).
    pub(crate) fn all_written(&mut self) {
        self.durable = self.handed;
    }

    /// Closes the gate for good; `false` if it already was.
    pub(crate) fn fail(&mut self) -> bool {
        !std::mem::replace(&mut self.failed, true)
    }

    /// `output`, resting on record `rests_on`, if it may leave now;
    /// otherwise it is held.
    pub(crate) fn admit(&mut self, output: Output, rests_on: u64) -> Option<Output> {
        let lane = Lane::of(&output);
        let queue = self.held.entry(lane).or_default();
        if self.failed || rests_on > self.durable || !queue.is_empty() {
            queue.push_back((rests_on, output));
            return None;
        }
        Some(output)
    }

    /// Whether grant `fence` of lock `name` waits here, not yet handed to
    /// a session: the engine counts it held, and nobody uses it yet.
    pub(crate) fn holds_grant(&self, name: &Name, fence: Fence) -> bool {
        self.held.get(&Lane::Local).is_some_and(|queue| {
            queue.iter().any(|(_, output)| {
                matches!(output, Output::Granted { name: n, fence: f } if n == name && *f == fence)
            })
        })
    }

    /// Records up to `number` are on disk: the held outputs that may now
    /// leave, lane by lane, in order.
    pub(crate) fn durable_upto(&mut self, number: u64) -> Vec<Output> {
        self.durable = self.durable.max(number);
        let mut free = Vec::new();
        if self.failed {
            return free;
        }
        for queue in self.held.values_mut() {
            while queue.front().is_some_and(|(rests_on, _)| *rests_on <= self.durable) {
                free.extend(queue.pop_front().map(|(_, output)| output));
            }
        }
        self.held.retain(|_, queue| !queue.is_empty());
        free
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(to: u32) -> Output {
        let envelope = coterie_core::wire::Envelope::Mutex {
            name: Default::default(),
            permits: 1,
            bytes: vec![to as u8],
        };
        Output::Send { to: NodeId(to), envelope, kind: "grant" }
    }

    #[test]
    fn an_output_waits_for_its_record_and_for_what_is_ahead_of_it_in_its_lane() {
        let mut gate = Gate::default();
        assert_eq!(gate.hand(), 1);
        assert_eq!(gate.hand(), 2);
        assert!(gate.admit(send(2), 2).is_none(), "record 2 is not on disk");
        // Record 0 is: but a later frame to node 2 keeps its place.
        assert!(gate.admit(send(2), 0).is_none());
        // Other lanes do not wait for node 2's.
        assert_eq!(gate.admit(send(3), 1), None);
        assert_eq!(gate.admit(send(4), 0), Some(send(4)));
        let granted = Output::Granted { name: Default::default(), fence: Fence::new(1, 1) };
        assert_eq!(gate.admit(granted.clone(), 0), Some(granted));
        assert_eq!(gate.durable_upto(1), vec![send(3)]);
        assert_eq!(gate.durable_upto(2), vec![send(2), send(2)]);
        assert_eq!(gate.admit(send(2), 2), Some(send(2)));
    }

    #[test]
    fn a_grant_waiting_for_its_record_is_known_by_name_and_fence() {
        let mut gate = Gate::default();
        gate.hand();
        let name = Name::default();
        let granted = Output::Granted { name: name.clone(), fence: Fence::new(1, 1) };
        assert!(!gate.holds_grant(&name, Fence::new(1, 1)));
        assert!(gate.admit(granted.clone(), 1).is_none());
        assert!(gate.holds_grant(&name, Fence::new(1, 1)));
        assert!(!gate.holds_grant(&name, Fence::new(1, 2)));
        assert!(!gate.holds_grant(&Name::new("other").unwrap(), Fence::new(1, 1)));
        assert_eq!(gate.durable_upto(1), vec![granted]);
        assert!(!gate.holds_grant(&name, Fence::new(1, 1)));
    }

    #[test]
    fn a_failed_write_holds_everything_for_good() {
        let mut gate = Gate::default();
        gate.hand();
        assert!(gate.fail());
        assert!(!gate.fail());
        assert!(gate.admit(send(2), 0).is_none());
        assert!(gate.durable_upto(1).is_empty());
    }
}

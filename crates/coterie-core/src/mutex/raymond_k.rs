//! # `raymond-k` — Ricart–Agrawala for k holders
//!
//! **Source.** Raymond, "A distributed algorithm for multiple entries to a
//! critical section" (1989), the extension of
//! Ricart–Agrawala "to the case where more than 1 process can be in the
//! critical region at one time".
//!
//! **Assumptions.** As for [`ricart_agrawala`](super::ricart_agrawala):
//! reliable links while both ends are up, crash-stop failures reported by
//! the failure detector, no partitions. `k` is the cluster's `count`.
//!
//! **Messages per entry.** 2(N-1), as Ricart–Agrawala: a REQUEST to every
//! live peer and a REPLY from each, though a node enters on the (N-k)-th.
//!
//! **State walk.** Exactly Ricart–Agrawala's (idle, wanting, holding;
//! replies deferred by a holder or by a wanting node with an older stamp)
//! except for the entry rule: a node enters once at most k-1 of the replies
//! it awaits are outstanding. At most k nodes can then hold: any k+1 of
//! them would each miss replies from the k others, and a reply withheld is
//! a reply deferred by a node that entered or has priority. The late
//! replies of a request already granted arrive after entry; every REPLY
//! names the request it answers, so they are recognised and dropped, and
//! never counted towards the next request.
//!
//! **Variants.** Ricart–Agrawala's fault-tolerant form and dynamic
//! priorities ([`MutexOptions`](crate::MutexOptions)) apply unchanged: the
//! NACKs, probes and places are the same, only the entry rule differs.
//!
//! **Fences.** The stamp (timestamp, node id) of the request's last round,
//! unique per grant.
//! With k holders grants are not totally ordered in time, so a resource
//! checks that a fence is never reused rather than that it grows.
//!
//! The state machine is shared with Ricart–Agrawala, which is its k = 1
//! case.

use super::ricart_agrawala::RicartAgrawala;

/// Raymond's k-exclusion: [`RicartAgrawala`] built with the cluster's
/// capacity, through [`RicartAgrawala::with_capacity`].
pub type RaymondK = RicartAgrawala;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm};
    use crate::mutex::ricart_agrawala::RaMsg;
    use crate::outbox::{Action, Outbox};
    use crate::testkit::*;
    use crate::types::{Fence, NodeId, Stamp};

    #[test]
    fn with_k_2_a_node_enters_on_the_second_to_last_reply() {
        let mut cfg = AlgoConfig::for_test(1, 3);
        cfg.capacity = 2;
        let mut p = RaymondK::with_capacity(&cfg);
        let mut out = Outbox::new();
        for peer in cfg.peers() {
            p.handle_peer_up(T, peer, &mut out);
        }
        p.handle_request(T, &mut out);
        out.take();
        let mine = Stamp { ts: 1, node: NodeId(1) };
        p.handle_message(T, NodeId(2), RaMsg::Reply { to: mine, clock: 1, after: None }, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence::new(1, 1) }]);
        // Node 3's reply comes late and changes nothing.
        p.handle_message(T, NodeId(3), RaMsg::Reply { to: mine, clock: 2, after: None }, &mut out);
        assert!(out.is_empty());
    }
}

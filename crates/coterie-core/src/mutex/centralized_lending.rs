//! # `centralized-lending` — a coordinator that lends the lock to the node that keeps asking
//!
//! **Source.** The centralized algorithm ([`centralized`](super::centralized))
//! with *lock caching* as Chubby does it (M. Burrows, "The Chubby lock
//! service for loosely-coupled distributed systems", OSDI 2006, §2.5: a
//! client may hold a lock longer than it needs, in the hope of using it
//! again, until an event tells it that another client wants it) and the
//! callback locks of distributed lock managers (Kronenberg, Levy and
//! Strecker, "VAXclusters: a closely-coupled distributed system", ACM TOCS
//! 4(2), 1986). Fences on a loan are a lease on a range of grant numbers
//! (Gray and Cheriton, "Leases", SOSP 1989, for the lease idea).
//!
//! **Assumptions.** As for `centralized`: reliable FIFO links while both
//! ends are up, crash-stop failures reported by the failure detector, an
//! election layer that gives every coordinator a larger epoch than the
//! last.
//!
//! **Messages per entry.** As `centralized` (3 at another node, 0 at the
//! coordinator) until a node asks again right after its own grant, with
//! nobody else waiting: that grant is a *loan*, and the node's next entries
//! cost **0 messages**, each with the next fence of the loan's range. Once
//! per [`LOAN`] entries the loan goes back and is lent again (RELEASE,
//! REQUEST, GRANT). Another node's request while the lock is lent costs
//! two more than usual, the RECALL and the loan's RELEASE: 5 for its entry
//! (2 for the coordinator's own). Under contention the queue is never
//! empty at a grant, nothing is lent, and the figures are `centralized`'s.
//!
//! **State walk.** The coordinator keeps `centralized`'s holders and FIFO
//! queue and remembers the node of its last grant. Granting the head of the
//! queue to that same node with the queue otherwise empty, it lends: the
//! GRANT carries the top of a range of [`LOAN`] fences it takes out of its
//! grant counter, and the holder stays a holder after its release. A client
//! with a loan enters and leaves on its own, issuing the range's fences in
//! order; a request that finds the range spent hands the loan back and
//! asks as usual. When a request finds no room, the coordinator RECALLs
//! every loan: an idle borrower answers with the loan's RELEASE at once, a
//! holding one at its exit. A RECALL for a loan the node no longer has (it
//! forgot the lock, or restarted) is answered with a RELEASE all the same.
//!
//! **Fences and failures.** The grant counter moves past a loan's whole
//! range when the loan is made, so every later grant of the term is above
//! every fence the borrower may issue, whether it hands the loan back or
//! crashes with it (the coordinator then drops it as any holder). A loan
//! lives only as long as its coordinator's term at the borrower: a new
//! term, the coordinator counted down or back, or any STATE_QUERY ends it,
//! and a borrower inside the critical section reports the fence it holds,
//! as any holder does. A new coordinator grants nothing before every live
//! peer has reported, so a loan and a new term's grant never coexist; the
//! new term's fences are above the old term's by the epoch in their high
//! bits.
//!
//! **Semaphores of sessions.** As `centralized`, a node asks for a permit
//! per client session. A loan is a node's one permit: the coordinator
//! lends only to a node that holds and wants nothing else, a node enters
//! on its loan only while the loan is not in use here, and a plain grant
//! made beside a loan leaves the loan as it was. A node that asks for a
//! second permit while its loan is in use reports the fence it issued on
//! the loan; the coordinator keeps the loan as lent (it comes back only
//! when recalled), not as a plain holder that would wait for a RELEASE the
//! borrower never sends.
//!
//! The state machine is [`Centralized`]'s, built with lending on.

use super::centralized::Centralized;
pub use super::centralized::LOAN;

/// The lending coordinator: [`Centralized`] built with
/// [`Centralized::lending`].
pub type CentralizedLending = Centralized;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{AlgoConfig, Algorithm, MutexAlgorithm, Out};
    use crate::mutex::centralized::{CentralizedMsg, CentralizedMsg::*, Report};
    use crate::outbox::Action;
    use crate::testkit::*;
    use crate::types::{CsState, Epoch, Fence, Mode, NodeId};

    /// A REQUEST to write, of `epoch`, stamped `(ts, node)`.
    fn write(epoch: u64, ts: u64, node: u32) -> CentralizedMsg {
        Request { epoch: Epoch(epoch), stamp: stamp(ts, node), mode: Mode::Write }
    }

    fn node(id: u32) -> Centralized {
        let cfg = AlgoConfig::for_test(id, 3);
        with_up(CentralizedLending::lending(&cfg), cfg.peers())
    }

    /// Coordinator 3 of 3, rebuilt at epoch 1; client 1 following it.
    fn pair() -> (Centralized, Centralized) {
        let (mut c, mut client) = (node(3), node(1));
        let mut out = Out::<Centralized>::new();
        c.handle_coordinator(T, n(3), Epoch(1), &mut out);
        for peer in [n(1), n(2)] {
            c.handle_message(
                T,
                peer,
                StateReport { epoch: Epoch(1), state: Report::Idle },
                &mut out,
            );
        }
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        (c, client)
    }

    /// Delivers every message in `out` between the two, both ways, until
    /// none is left; returns how many were sent and the grants seen.
    fn settle(
        c: &mut Centralized,
        client: &mut Centralized,
        out: &mut Out<Centralized>,
    ) -> (usize, Vec<Fence>) {
        let (mut sent, mut grants) = (0, Vec::new());
        let mut pending: Vec<(NodeId, Action<CentralizedMsg>)> =
            out.take().into_iter().map(|a| (n(1), a)).collect();
        while let Some((at, action)) = pending.pop() {
            match action {
                Action::Grant { fence } => grants.push(fence),
                Action::Send { to, msg } => {
                    sent += 1;
                    let mut next = Out::<Centralized>::new();
                    if to == n(3) {
                        c.handle_message(T, at, msg, &mut next);
                        pending.extend(next.take().into_iter().map(|a| (n(3), a)));
                    } else if to == n(1) {
                        client.handle_message(T, n(3), msg, &mut next);
                        pending.extend(next.take().into_iter().map(|a| (n(1), a)));
                    }
                }
                _ => {}
            }
        }
        (sent, grants)
    }

    fn enter_and_leave(c: &mut Centralized, client: &mut Centralized) -> (usize, Fence) {
        let mut out = Out::<Centralized>::new();
        client.handle_request(T, &mut out);
        let (mut sent, grants) = settle(c, client, &mut out);
        assert_eq!(grants.len(), 1, "one entry");
        assert_eq!(client.cs_state(), CsState::Held);
        client.handle_release(T, &mut out);
        sent += settle(c, client, &mut out).0;
        (sent, grants[0])
    }

    #[test]
    fn asking_again_borrows_the_lock_and_re_entries_cost_nothing() {
        let (mut c, mut client) = pair();
        let (first, f1) = enter_and_leave(&mut c, &mut client);
        assert_eq!(first, 3, "a plain grant: REQUEST, GRANT, RELEASE");
        let (second, f2) = enter_and_leave(&mut c, &mut client);
        assert_eq!(second, 2, "the loan: REQUEST, GRANT, and no RELEASE");
        let mut last = f2;
        for _ in 0..100 {
            let (sent, fence) = enter_and_leave(&mut c, &mut client);
            assert_eq!(sent, 0, "on loan");
            assert!(fence > last, "fences rise on the loan");
            last = fence;
        }
        assert!(f2 > f1);
    }

    #[test]
    fn a_spent_loan_goes_back_and_is_lent_again() {
        let (mut c, mut client) = pair();
        enter_and_leave(&mut c, &mut client);
        let (_, lent) = enter_and_leave(&mut c, &mut client);
        let mut last = lent;
        for _ in 1..LOAN {
            last = enter_and_leave(&mut c, &mut client).1;
        }
        assert_eq!(last, Fence(lent.0 + LOAN - 1), "the whole range used");
        let (sent, renewed) = enter_and_leave(&mut c, &mut client);
        assert_eq!(sent, 3, "RELEASE of the loan, REQUEST, GRANT");
        assert!(renewed > last);
        assert_eq!(enter_and_leave(&mut c, &mut client).0, 0, "lent again");
    }

    #[test]
    fn another_request_recalls_an_idle_loan_and_is_granted_above_its_range() {
        let (mut c, mut client) = pair();
        enter_and_leave(&mut c, &mut client);
        let (_, lent) = enter_and_leave(&mut c, &mut client);
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(2), write(1, 50, 2), &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send { to: n(1), msg: Recall { epoch: Epoch(1), grant: lent } }]
        );
        client.handle_message(T, n(3), Recall { epoch: Epoch(1), grant: lent }, &mut out);
        let back = out.take();
        assert_eq!(
            back,
            vec![Action::Send { to: n(3), msg: Release { epoch: Epoch(1), fence: lent } }]
        );
        c.handle_message(T, n(1), Release { epoch: Epoch(1), fence: lent }, &mut out);
        let fence = Fence(lent.0 + LOAN);
        assert!(matches!(
            &out.take()[..],
            [Action::Send { to, msg: Grant { fence: f, lent_until: None, .. } }]
                if *to == n(2) && *f == fence
        ));
        // The borrower asks as any node now.
        client.handle_request(T, &mut out);
        assert!(matches!(&out.take()[..], [Action::Send { msg: Request { .. }, .. }]));
    }

    #[test]
    fn a_loan_recalled_while_held_goes_back_at_the_release() {
        let (mut c, mut client) = pair();
        enter_and_leave(&mut c, &mut client);
        let (_, lent) = enter_and_leave(&mut c, &mut client);
        let mut out = Out::<Centralized>::new();
        client.handle_request(T, &mut out);
        assert!(matches!(&out.take()[..], [Action::Grant { .. }]), "entered on the loan");
        client.handle_message(T, n(3), Recall { epoch: Epoch(1), grant: lent }, &mut out);
        assert!(out.is_empty(), "still inside");
        client.handle_release(T, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send { to: n(3), msg: Release { epoch: Epoch(1), fence: lent } }]
        );
    }

    #[test]
    fn a_crashed_borrower_leaves_every_later_fence_above_its_range() {
        let (mut c, mut client) = pair();
        enter_and_leave(&mut c, &mut client);
        let (_, lent) = enter_and_leave(&mut c, &mut client);
        let mut out = Out::<Centralized>::new();
        c.handle_peer_down(T, n(1), &mut out);
        c.handle_request(T, &mut out);
        assert_eq!(out.take(), vec![Action::Grant { fence: Fence(lent.0 + LOAN) }]);
    }

    #[test]
    fn a_new_term_ends_the_loan_and_a_holder_reports_its_fence() {
        let (mut c, mut client) = pair();
        enter_and_leave(&mut c, &mut client);
        enter_and_leave(&mut c, &mut client);
        let (_, on_loan) = enter_and_leave(&mut c, &mut client);
        let mut out = Out::<Centralized>::new();
        client.handle_request(T, &mut out);
        let Action::Grant { fence } = out.take()[0].clone() else { panic!("entered") };
        assert!(fence > on_loan);
        client.handle_message(T, n(2), StateQuery { epoch: Epoch(2) }, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send {
                to: n(2),
                msg: StateReport { epoch: Epoch(2), state: Report::Holding(fence) }
            }]
        );
        client.handle_release(T, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send { to: n(2), msg: Release { epoch: Epoch(2), fence } }]
        );
        client.handle_request(T, &mut out);
        assert!(matches!(&out.take()[..], [Action::Send { msg: Request { .. }, .. }]));
    }

    #[test]
    fn a_recall_for_a_forgotten_loan_is_answered() {
        let mut fresh = node(1);
        let mut out = Out::<Centralized>::new();
        fresh.handle_coordinator(T, n(3), Epoch(1), &mut out);
        let grant = Fence::new(1, 2);
        fresh.handle_message(T, n(3), Recall { epoch: Epoch(1), grant }, &mut out);
        assert_eq!(
            out.take(),
            vec![Action::Send { to: n(3), msg: Release { epoch: Epoch(1), fence: grant } }]
        );
    }

    /// A borrower whose second session asks while the loan is in use
    /// gets a plain permit beside the loan, and the loan stays lent.
    #[test]
    fn a_second_session_beside_a_loan_in_use_gets_a_plain_permit() {
        let build = |id| {
            let mut cfg = AlgoConfig::for_test(id, 3);
            cfg.capacity = 2;
            with_up(CentralizedLending::lending(&cfg), cfg.peers())
        };
        let (mut c, mut client) = (build(3), build(1));
        let mut out = Out::<Centralized>::new();
        c.handle_coordinator(T, n(3), Epoch(1), &mut out);
        for peer in [n(1), n(2)] {
            let idle = StateReport { epoch: Epoch(1), state: Report::Idle };
            c.handle_message(T, peer, idle, &mut out);
        }
        client.handle_coordinator(T, n(3), Epoch(1), &mut out);
        out.take();
        enter_and_leave(&mut c, &mut client);
        enter_and_leave(&mut c, &mut client);
        client.handle_request(T, &mut out);
        let first = out.take();
        assert!(matches!(&first[..], [Action::Grant { .. }]), "entered on the loan: {first:?}");
        client.handle_request(T, &mut out);
        let (_, grants) = settle(&mut c, &mut client, &mut out);
        assert_eq!(grants.len(), 1, "a plain permit beside the loan");
        // The coordinator still counts the loan as lent: another node's
        // request recalls it (a plain holder it would wait on forever, as
        // the borrower sends no RELEASE for a loan's fence).
        c.handle_message(T, n(2), write(1, 90, 2), &mut out);
        assert!(
            matches!(&out.take()[..], [Action::Send { to, msg: Recall { .. } }] if *to == n(1)),
            "the loan is recalled"
        );
    }

    #[test]
    fn contention_lends_nothing() {
        let (mut c, _) = pair();
        let mut out = Out::<Centralized>::new();
        c.handle_message(T, n(1), write(1, 5, 1), &mut out);
        c.handle_message(T, n(2), write(1, 6, 2), &mut out);
        c.handle_message(T, n(1), Release { epoch: Epoch(1), fence: Fence::new(1, 1) }, &mut out);
        c.handle_message(T, n(1), write(1, 9, 1), &mut out);
        c.handle_message(T, n(2), Release { epoch: Epoch(1), fence: Fence::new(1, 2) }, &mut out);
        let grants: Vec<_> = out
            .take()
            .into_iter()
            .filter_map(|a| match a {
                Action::Send { msg: Grant { lent_until, .. }, .. } => Some(lent_until),
                _ => None,
            })
            .collect();
        assert_eq!(
            grants,
            vec![None, None, None],
            "node 1 asked again, but not with nobody between"
        );
    }
}

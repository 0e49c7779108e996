//! # `tree-quorum` — Agarwal and El Abbadi's tree-structured quorums
//!
//! **Source.** Agarwal and El Abbadi (1991), Kshemkalyani & Singhal (2008) §9.9 (algorithm 9.6,
//! `GetQuorum`).
//!
//! **Quorums.** The members, in id order, fill a binary tree level by level
//! (member i's children are members 2i + 1 and 2i + 2). With every node up
//! a quorum is a path from the root to a leaf: about log₂ N nodes. A node
//! that is down is replaced by *two* quorums, one from each of its
//! subtrees; a leaf that is down cannot be replaced, so the path must go
//! the other way higher up. Any two quorums built this way meet, whatever
//! failures each one saw: by induction on the tree, two quorums of a
//! subtree either both contain its root, or one went through a child
//! subtree the other also covers. When the root is down the quorum grows
//! (both halves), up to a majority-like set; when too much is down there
//! is none, and requesters wait until a node comes back.
//!
//! Where there is a choice, a requester goes towards itself (so it is its
//! own member and saves messages), and otherwise left or right by its id,
//! which spreads the load over the leaves.
//!
//! **Assumptions.** FIFO links; crash and restart failures reported by the
//! failure detector, with stable storage for whom each arbiter granted
//! (see `quorum`). Partitions and pauses cost liveness while they last,
//! never safety: no permission moves on a suspicion.
//!
//! **Messages per entry.** At light load REQUEST, GRANT and RELEASE per
//! path member other than the requester, 3(log₂ N) or so, and a RESTAMP
//! each when the requester's clock lagged (4 per member at most); under
//! contention up to 6 per member, as for Maekawa. When a member fails
//! while a request waits, the requester builds a new quorum around it,
//! cancels what it asked of members no longer needed and asks the new
//! ones. A read costs what a write does (*Readers and writers*).
//!
//! **Readers and writers.** Readers share arbiters (see `quorum`) and ask
//! the same paths as writers: a read costs what a write does, and readers
//! gain in concurrency, not in messages. No smaller read quorum exists
//! beside these write quorums. A set that meets every tree quorum must
//! meet every quorum formed round a failed root, so it must meet every
//! quorum of one subtree, and so on down: it contains a path. Agrawal
//! and El Abbadi's tree quorum protocol for replicated data (VLDB 1990;
//! generalized in ACM TODS 17(4), 1992) reads from the root alone while
//! it is up; a read of one node meets every write only if every write
//! quorum contains the root, so a write there waits for a failed root to
//! come back. This lock keeps the mutual-exclusion form, whose writes
//! route round a failed root, and so reads with paths too.
//!
//! **State walk.** The locking itself is shared with `maekawa`; see
//! `mutex/quorum.rs`.

use super::quorum::{QuorumLock, QuorumRule};
use crate::algorithm::AlgoConfig;
use crate::types::NodeId;
use std::collections::BTreeSet;

/// The tree-quorum algorithm: quorum locking over tree-structured quorums.
pub type TreeQuorum = QuorumLock<Tree>;

/// The members laid out as a binary tree, and where this node sits.
#[derive(Clone, Debug, Hash)]
pub struct Tree {
    members: Vec<NodeId>,
    me: usize,
}

impl QuorumRule for Tree {
    fn new(cfg: &AlgoConfig) -> Self {
        let me = cfg.members.iter().position(|&m| m == cfg.id).unwrap_or(0);
        Tree { members: cfg.members.clone(), me }
    }

    fn quorum(&self, up: &BTreeSet<NodeId>) -> Option<BTreeSet<NodeId>> {
        let up: Vec<bool> = self.members.iter().map(|m| up.contains(m)).collect();
        let q = quorum_of(0, self.me, &up)?;
        Some(q.into_iter().map(|i| self.members[i]).collect())
    }
}

/// `GetQuorum` for the subtree rooted at index `at`, for the requester at
/// index `me`, with `up[i]` telling which members are up. `Some(empty)` is
/// the quorum of an empty subtree; `None` means none can be formed.
pub fn quorum_of(at: usize, me: usize, up: &[bool]) -> Option<BTreeSet<usize>> {
    if at >= up.len() {
        return Some(BTreeSet::new());
    }
    let (left, right) = (2 * at + 1, 2 * at + 2);
    if up[at] {
        // Towards the requester if it is below; else by its id's parity.
        let toward_me = if in_subtree(me, right) { (right, left) } else { (left, right) };
        let (first, second) = if in_subtree(me, left) || in_subtree(me, right) {
            toward_me
        } else if me.is_multiple_of(2) {
            (left, right)
        } else {
            (right, left)
        };
        let below = quorum_of(first, me, up).or_else(|| quorum_of(second, me, up))?;
        let mut q = below;
        q.insert(at);
        Some(q)
    } else {
        let l = quorum_of(left, me, up).filter(|q| !q.is_empty())?;
        let r = quorum_of(right, me, up).filter(|q| !q.is_empty())?;
        Some(&l | &r)
    }
}

/// Whether index `node` lies in the subtree rooted at index `root`.
fn in_subtree(mut node: usize, root: usize) -> bool {
    loop {
        if node == root {
            return true;
        }
        if node < root || node == 0 {
            return false;
        }
        node = (node - 1) / 2;
    }
}

/// Messages per entry at light load over every requester: (fewest, most),
/// 3 or 4 (with a RESTAMP) per path member other than the requester.
pub fn light_load(n: u64) -> (u64, u64) {
    let up = vec![true; n as usize];
    let others: Vec<u64> = (0..n as usize)
        .map(|me| {
            let q = quorum_of(0, me, &up).unwrap_or_default();
            (q.len() - usize::from(q.contains(&me))) as u64
        })
        .collect();
    (3 * others.iter().min().unwrap_or(&0), 4 * others.iter().max().unwrap_or(&0))
}

/// Average messages per entry under contention: (fewest, most), 3 to 6
/// per path member other than the requester, as for `maekawa`.
pub fn heavy_load(n: u64) -> (f64, f64) {
    let (lo, hi) = light_load(n);
    (lo as f64, hi as f64 / 4.0 * 6.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[usize]) -> BTreeSet<usize> {
        items.iter().copied().collect()
    }

    #[test]
    fn with_everyone_up_a_quorum_is_a_path_toward_the_requester() {
        let up = vec![true; 7];
        assert_eq!(quorum_of(0, 5, &up), Some(set(&[0, 2, 5])));
        assert_eq!(quorum_of(0, 3, &up), Some(set(&[0, 1, 3])));
        assert_eq!(quorum_of(0, 0, &up), Some(set(&[0, 1, 3])));
    }

    #[test]
    fn a_failed_node_is_replaced_by_both_subtrees() {
        let mut up = vec![true; 7];
        up[0] = false;
        assert_eq!(quorum_of(0, 5, &up), Some(set(&[1, 4, 2, 5])));
        up[2] = false;
        // Node 2 down too: its two leaves stand in for it.
        assert_eq!(quorum_of(0, 5, &up), Some(set(&[1, 4, 5, 6])));
        up[6] = false;
        assert_eq!(quorum_of(0, 5, &up), None, "2 and its leaf 6 are both down");
    }

    #[test]
    fn a_failed_leaf_sends_the_path_the_other_way() {
        let mut up = vec![true; 7];
        up[3] = false;
        assert_eq!(quorum_of(0, 3, &up), Some(set(&[0, 1, 4])));
    }

    /// Every quorum the rule can produce, under any failures, meets every
    /// other: checked exhaustively for small trees.
    #[test]
    fn all_quorums_under_all_failures_intersect() {
        for n in 1..=9usize {
            let mut quorums = Vec::new();
            for mask in 0u32..(1 << n) {
                let up: Vec<bool> = (0..n).map(|i| mask & (1 << i) != 0).collect();
                for me in 0..n {
                    if let Some(q) = quorum_of(0, me, &up) {
                        assert!(q.iter().all(|&i| up[i]), "n={n}: a down node in {q:?}");
                        assert!(!q.is_empty());
                        quorums.push(q);
                    }
                }
            }
            for a in &quorums {
                for b in &quorums {
                    assert!(!a.is_disjoint(b), "n={n}: {a:?} and {b:?} do not meet");
                }
            }
        }
    }

    #[test]
    fn light_load_counts_the_other_path_members() {
        // A requester's path runs through itself: seven nodes, paths of
        // three, two other members each.
        assert_eq!(light_load(7), (6, 8));
        assert_eq!(light_load(3), (3, 4));
        // Five: node 2 is a leaf one level up.
        assert_eq!(light_load(5), (3, 8));
    }
}

//! # `maekawa` — permission from a √N-sized request set
//!
//! **Source.** Maekawa (1985); Kshemkalyani & Singhal (2008) §9.8
//! (algorithm 9.5 and the deadlock handling with FAILED, INQUIRE and
//! YIELD) for the √N message count.
//!
//! **Request sets.** Any two must intersect, each must contain its owner,
//! and ideally all have the same size K and every node sits in K of them.
//! When N = q² + q + 1 for a prime q (N = 7, 13, 31, 57, …) the sets are the
//! lines of the projective plane of order q: K = q + 1 ≈ √N, and any two
//! lines meet in exactly one point. Each node is a point; a perfect
//! matching of points to lines through them (one exists: every point is
//! on q + 1 lines and every line has q + 1 points) gives each node a line
//! of its own. For every other N the nodes are laid out in a grid of
//! ⌈√N⌉ columns, and a node's set is its row and its column: any row meets
//! any column, so K ≈ 2√N − 1. (Orders that are prime powers but not
//! primes, such as 4 for N = 21, would need finite-field arithmetic; they
//! get the grid.)
//!
//! **Assumptions.** FIFO links (an INQUIRE must not overtake the GRANT it
//! asks about); crash and restart failures reported by the failure
//! detector, with stable storage for whom each arbiter granted (without
//! it, an arbiter that restarts while its holder is silent may grant
//! twice). Partitions and pauses cost liveness while they last, never
//! safety: no permission moves on a suspicion (see `quorum`). Request sets
//! are fixed: a requester whose set has a dead member withdraws its
//! request and asks again once the member is back, so one crash stalls the
//! nodes whose sets contain it for the crash's duration (in a grid of
//! five, three or four of the five), not the others (`tree-quorum` routes
//! round failures instead).
//!
//! **Messages per entry.** At light load REQUEST, GRANT and RELEASE to and
//! from each member but the requester itself: 3(K − 1), plus a RESTAMP to
//! each when the requester's clock lagged behind the previous entrant's
//! (see `quorum`): at most 4(K − 1). Under contention FAILED, INQUIRE and
//! YIELD (and the GRANT that follows a YIELD) add up to 2 more per member:
//! 5(K − 1), or 6(K − 1) with a RESTAMP. A read in a grid asks fewer
//! members (*Readers and writers*).
//!
//! **Readers and writers.** A read needs a set that meets every request
//! set, not one that meets other reads ([`read_sets`]). In the grid that
//! is one node of each column: a node's own row, completed from the row
//! above where the last row is short. This is the read quorum of the grid
//! protocol for replicated data (Cheung, Ammar and Ahamad, "The grid
//! protocol", IEEE TKDE 4(6), 1992), whose write quorum, a row and a full
//! column, is exactly Maekawa's grid set. A read so asks ⌈√N⌉ nodes
//! where a write asks about 2√N − 1, and costs 3 or 4 per member other
//! than the requester: 3(⌈√N⌉ − 1) to 4(⌈√N⌉ − 1) at light load, about
//! half a write. A projective plane has no smaller set that meets every
//! line than a line, so there a node reads with its own set, at a
//! write's cost. Readers share arbiters (see `quorum`).
//!
//! **State walk.** See `mutex/quorum.rs`: requester idle → wanting
//! (asked its set, or its read set) → holding (every member granted) →
//! idle (released); arbiter free → granted to the oldest queued request
//! (a write alone; a read with the reads queued after it, up to the first
//! write) → free once every holder has sent RELEASE or YIELD.

use super::quorum::{QuorumLock, QuorumRule};
use crate::algorithm::AlgoConfig;
use crate::types::{Mode, NodeId};
use std::collections::BTreeSet;

/// Maekawa's algorithm: quorum locking over fixed request sets.
pub type Maekawa = QuorumLock<RequestSets>;

/// The fixed request set of one node, and the smaller one it reads with.
#[derive(Clone, Debug, Hash)]
pub struct RequestSets {
    set: BTreeSet<NodeId>,
    read: BTreeSet<NodeId>,
}

impl QuorumRule for RequestSets {
    fn new(cfg: &AlgoConfig) -> Self {
        let n = cfg.members.len();
        let me = cfg.members.iter().position(|&m| m == cfg.id).unwrap_or(0);
        let named = |set: &BTreeSet<usize>| set.iter().map(|&i| cfg.members[i]).collect();
        RequestSets { set: named(&request_sets(n)[me]), read: named(&read_sets(n)[me]) }
    }

    fn quorum(&self, up: &BTreeSet<NodeId>) -> Option<BTreeSet<NodeId>> {
        self.set.is_subset(up).then(|| self.set.clone())
    }

    fn read_quorum(&self, up: &BTreeSet<NodeId>) -> Option<BTreeSet<NodeId>> {
        self.read.is_subset(up).then(|| self.read.clone())
    }
}

/// The request set of each of `n` nodes, as indices `0..n`: projective
/// plane lines when `n = q² + q + 1` for a prime `q`, grid otherwise.
pub fn request_sets(n: usize) -> Vec<BTreeSet<usize>> {
    match plane_order(n) {
        Some(q) => projective_plane(q),
        None => grid(n),
    }
}

/// The read set of each of `n` nodes, as indices `0..n`: a set that
/// meets every request set, so that a read and a write always share an
/// arbiter (two reads need not). In a grid, one node of each column —
/// the grid protocol's read quorum (Cheung, Ammar and Ahamad, "The grid
/// protocol", IEEE TKDE 4(6), 1992), against which a row and a column is
/// its write quorum — taken from the node's own row and, where the last
/// row is short, from the row above. A projective plane has no set
/// smaller than a line that meets every line: a node reads with its line.
pub fn read_sets(n: usize) -> Vec<BTreeSet<usize>> {
    if plane_order(n).is_some() {
        return request_sets(n);
    }
    let cols = columns(n);
    (0..n)
        .map(|i| {
            let row = i / cols * cols;
            (row..row + cols).map(|j| if j < n { j } else { j - cols }).collect()
        })
        .collect()
}

/// Messages per entry in `mode` at light load over every node: (fewest,
/// most), 3 or 4 (with a RESTAMP) per member of the set asked other than
/// the requester.
pub fn light_load(n: u64, mode: Mode) -> (u64, u64) {
    let sets = match mode {
        Mode::Write => request_sets(n as usize),
        Mode::Read => read_sets(n as usize),
    };
    let others = sets.iter().map(|s| s.len() as u64 - 1).collect::<Vec<_>>();
    (3 * others.iter().min().unwrap_or(&0), 4 * others.iter().max().unwrap_or(&0))
}

/// Average messages per entry under contention: (fewest, most), 3 to 6
/// per member other than the requester (FAILED, INQUIRE, YIELD and a
/// second GRANT on top of the light-load 3, and a RESTAMP).
pub fn heavy_load(n: u64) -> (f64, f64) {
    let others = request_sets(n as usize).iter().map(|s| s.len() as f64 - 1.0).collect::<Vec<_>>();
    let min = others.iter().copied().fold(f64::INFINITY, f64::min);
    let max = others.iter().copied().fold(0.0, f64::max);
    (3.0 * min, 6.0 * max)
}

/// The prime `q` with `q² + q + 1 = n`, if there is one.
fn plane_order(n: usize) -> Option<usize> {
    let is_prime =
        |q: usize| q >= 2 && (2..q).take_while(|d| d * d <= q).all(|d| !q.is_multiple_of(d));
    (2..n).take_while(|q| q * q + q < n).find(|&q| q * q + q + 1 == n && is_prime(q))
}

/// Lines of the projective plane over the integers mod the prime `q`,
/// one assigned to each point that lies on it.
fn projective_plane(q: usize) -> Vec<BTreeSet<usize>> {
    // Points (and lines) in normal form: (1, a, b), (0, 1, a), (0, 0, 1).
    let mut points = Vec::new();
    for a in 0..q {
        for b in 0..q {
            points.push([1, a, b]);
        }
    }
    for a in 0..q {
        points.push([0, 1, a]);
    }
    points.push([0, 0, 1]);
    let on = |p: &[usize; 3], l: &[usize; 3]| {
        (p[0] * l[0] + p[1] * l[1] + p[2] * l[2]).is_multiple_of(q)
    };
    let lines: Vec<BTreeSet<usize>> =
        points.iter().map(|l| (0..points.len()).filter(|&p| on(&points[p], l)).collect()).collect();
    // Match every point to a distinct line through it (augmenting paths).
    let n = points.len();
    let mut line_of_point = vec![usize::MAX; n];
    let mut point_of_line = vec![usize::MAX; n];
    for p in 0..n {
        let mut seen = vec![false; n];
        augment(p, &lines, &mut seen, &mut line_of_point, &mut point_of_line);
    }
    line_of_point.iter().map(|&l| lines[l].clone()).collect()
}

/// Kuhn's augmenting path from point `p`: true if it found `p` a line.
fn augment(
    p: usize,
    lines: &[BTreeSet<usize>],
    seen: &mut [bool],
    line_of_point: &mut [usize],
    point_of_line: &mut [usize],
) -> bool {
    for l in (0..lines.len()).filter(|&l| lines[l].contains(&p)) {
        if seen[l] {
            continue;
        }
        seen[l] = true;
        let holder = point_of_line[l];
        if holder == usize::MAX || augment(holder, lines, seen, line_of_point, point_of_line) {
            line_of_point[p] = l;
            point_of_line[l] = p;
            return true;
        }
    }
    false
}

/// The columns of the grid `n` nodes are laid out in: ⌈√n⌉.
fn columns(n: usize) -> usize {
    (1..=n).find(|c| c * c >= n).unwrap_or(1)
}

/// Row ∪ column of each node in a grid of ⌈√n⌉ columns.
fn grid(n: usize) -> Vec<BTreeSet<usize>> {
    let cols = columns(n);
    (0..n)
        .map(|i| {
            let (row, col) = (i / cols, i % cols);
            let row_members = (row * cols..((row + 1) * cols).min(n)).collect::<BTreeSet<_>>();
            let col_members = (col..n).step_by(cols).collect::<BTreeSet<_>>();
            &row_members | &col_members
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_coterie(n: usize) {
        let sets = request_sets(n);
        assert_eq!(sets.len(), n);
        for (i, a) in sets.iter().enumerate() {
            assert!(a.contains(&i), "n={n}: node {i} is not in its own set {a:?}");
            for b in &sets {
                assert!(!a.is_disjoint(b), "n={n}: {a:?} and {b:?} do not meet");
            }
        }
    }

    #[test]
    fn every_two_request_sets_meet_and_contain_their_owner() {
        for n in 1..=40 {
            check_coterie(n);
        }
    }

    #[test]
    fn planes_give_sets_of_q_plus_one_meeting_once_and_balanced() {
        for (n, q) in [(7, 2), (13, 3), (31, 5), (57, 7)] {
            assert_eq!(plane_order(n), Some(q));
            let sets = request_sets(n);
            for (i, a) in sets.iter().enumerate() {
                assert_eq!(a.len(), q + 1);
                for b in &sets[i + 1..] {
                    assert_eq!(a.intersection(b).count(), 1);
                }
            }
            // Every node arbitrates for exactly q + 1 sets.
            for node in 0..n {
                assert_eq!(sets.iter().filter(|s| s.contains(&node)).count(), q + 1);
            }
        }
        assert_eq!(plane_order(21), None, "order 4 is a prime power, not a prime");
    }

    #[test]
    fn grids_use_rows_and_columns() {
        let sets = request_sets(9);
        assert_eq!(sets[4], [1, 3, 4, 5, 7].into_iter().collect());
        // Five nodes: rows {0,1,2} and {3,4}.
        let sets = request_sets(5);
        assert_eq!(sets[2], [0, 1, 2].into_iter().collect());
        assert_eq!(sets[4], [1, 3, 4].into_iter().collect());
    }

    #[test]
    fn light_load_is_three_per_other_member() {
        assert_eq!(light_load(7, Mode::Write), (6, 8));
        assert_eq!(light_load(13, Mode::Write), (9, 12));
        assert_eq!(light_load(9, Mode::Write), (12, 16));
        // A read asks its row of the grid, and a plane's line.
        assert_eq!(light_load(9, Mode::Read), (6, 8));
        assert_eq!(light_load(7, Mode::Read), (6, 8));
        assert_eq!(light_load(25, Mode::Read), (12, 16));
        assert_eq!(light_load(25, Mode::Write), (24, 32));
    }

    #[test]
    fn every_read_set_meets_every_request_set_and_holds_its_owner() {
        for n in 1..=40 {
            let (reads, writes) = (read_sets(n), request_sets(n));
            for (i, r) in reads.iter().enumerate() {
                assert!(r.contains(&i), "n={n}: node {i} is not in its read set {r:?}");
                assert!(
                    r.len() <= writes[i].len(),
                    "n={n}: node {i} reads with more than it writes"
                );
                for w in &writes {
                    assert!(!r.is_disjoint(w), "n={n}: read {r:?} misses request set {w:?}");
                }
            }
        }
        // Five nodes, rows {0,1,2} and {3,4}: the short row reads column 2
        // from the row above.
        let reads = read_sets(5);
        assert_eq!(reads[0], [0, 1, 2].into_iter().collect());
        assert_eq!(reads[4], [2, 3, 4].into_iter().collect());
    }
}

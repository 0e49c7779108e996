//! The simulator's one source of nondeterminism.
//!
//! Every choice a run makes goes through a [`Chooser`]: each message's
//! delay, when a fault comes and whom it hits, which node asks next under a
//! sequential load, whether a message in a loss window is lost, and which
//! of several events due at the same instant happens first. The run itself
//! is a function of its configuration and its chooser's answers.
//!
//! - [`Random`] is the seeded generator the simulator has always used: the
//!   same seed draws the same numbers in the same order, so every replay
//!   line printed before the chooser existed replays the very same run.
//!   Events due at the same instant happen in the order they were queued,
//!   without a draw.
//! - [`Enumerate`] walks the tree of choices depth-first, one path per run:
//!   it answers with the choices of the current path, records how many
//!   answers each choice had, and [`Enumerate::advance`] moves to the next
//!   path. Durations come from a small set of discrete ticks, so that every
//!   ordering the delays allow is tried while timers still fire as they
//!   would.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Where a run's choices come from.
pub trait Chooser {
    /// A duration in `lo..=hi`.
    fn duration(&mut self, lo: Duration, hi: Duration) -> Duration;
    /// A number in `lo..=hi`.
    fn number(&mut self, lo: u32, hi: u32) -> u32;
    /// An index below `n` (`n` > 0).
    fn index(&mut self, n: usize) -> usize;
    /// A fraction in `lo..=hi`.
    fn fraction(&mut self, lo: f64, hi: f64) -> f64;
    /// Yes, with probability `p`.
    fn chance(&mut self, p: f64) -> bool;
    /// Whether the order of one node's events due at the same instant is
    /// a choice ([`index`](Chooser::index) over them; events at different
    /// nodes run in node order); when not, every tie goes in the order it
    /// was queued.
    fn orders_ties(&self) -> bool {
        false
    }
}

/// A chooser lent to one run: the caller keeps it, and its path, after.
impl<C: Chooser + ?Sized> Chooser for &mut C {
    fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        (**self).duration(lo, hi)
    }
    fn number(&mut self, lo: u32, hi: u32) -> u32 {
        (**self).number(lo, hi)
    }
    fn index(&mut self, n: usize) -> usize {
        (**self).index(n)
    }
    fn fraction(&mut self, lo: f64, hi: f64) -> f64 {
        (**self).fraction(lo, hi)
    }
    fn chance(&mut self, p: f64) -> bool {
        (**self).chance(p)
    }
    fn orders_ties(&self) -> bool {
        (**self).orders_ties()
    }
}

/// The seeded random chooser: `sim --seed N`.
#[derive(Clone)]
pub struct Random {
    rng: ChaCha8Rng,
}

impl Random {
    /// The chooser of seed `seed`.
    pub fn new(seed: u64) -> Random {
        Random { rng: ChaCha8Rng::seed_from_u64(seed) }
    }
}

impl Chooser for Random {
    fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        if hi <= lo {
            lo
        } else {
            self.rng.random_range(lo..=hi)
        }
    }

    fn number(&mut self, lo: u32, hi: u32) -> u32 {
        self.rng.random_range(lo..=hi)
    }

    fn index(&mut self, n: usize) -> usize {
        self.rng.random_range(0..n)
    }

    fn fraction(&mut self, lo: f64, hi: f64) -> f64 {
        self.rng.random_range(lo..=hi)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p)
    }
}

/// One choice on the current path: the answer taken, and how many there
/// were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The answer taken, counted from 0.
    pub taken: usize,
    /// How many answers there were.
    pub of: usize,
}

/// The depth-first chooser: every run follows the path so far and extends
/// it with first answers; [`advance`](Enumerate::advance) moves to the
/// next path in depth-first order.
#[derive(Clone, Debug)]
pub struct Enumerate {
    /// The answers a duration may take, as whole ticks.
    tick: Duration,
    /// At most this many answers to a duration: a wider range is tried at
    /// evenly spaced ticks, its ends included.
    spread: usize,
    /// The current path.
    path: Vec<Choice>,
    /// How far into the path the run under way has got.
    at: usize,
    /// While off, every choice takes its first answer and is not part of
    /// the path (a checker's run up to where exploring begins).
    exploring: bool,
}

impl Enumerate {
    /// A chooser whose durations are whole multiples of `tick`.
    pub fn new(tick: Duration) -> Enumerate {
        assert!(!tick.is_zero(), "a tick is longer than nothing");
        Enumerate { tick, spread: usize::MAX, path: Vec::new(), at: 0, exploring: true }
    }

    /// Turns exploring off (every choice its first answer, unrecorded) or
    /// on again.
    pub fn exploring(&mut self, on: bool) {
        self.exploring = on;
    }

    /// The same, answering a duration with at most `n` ticks (2 or more):
    /// a range wider than that is tried at its ends and evenly between.
    pub fn spread(self, n: usize) -> Enumerate {
        Enumerate { spread: n.max(2), ..self }
    }

    /// How many choices of the current path are prescribed: a run
    /// replays these before it makes fresh ones.
    pub fn prescribed(&self) -> usize {
        self.path.len()
    }

    /// Takes the path of `other` (a chooser that walked on from this
    /// one's position), keeping this one's position: a run restored from
    /// a snapshot follows the path the walk has moved to.
    pub fn follow(&mut self, other: &Enumerate) {
        self.path.clone_from(&other.path);
    }

    /// How many choices the run under way has made.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The choices of the run just made.
    pub fn path(&self) -> &[Choice] {
        &self.path[..self.at]
    }

    /// Follows `path` (a schedule found earlier) in the next run.
    pub fn replay(tick: Duration, path: Vec<Choice>) -> Enumerate {
        Enumerate { tick, spread: usize::MAX, path, at: 0, exploring: true }
    }

    /// Moves to the next path: the deepest choice with an answer left
    /// takes it, and what came after it is forgotten. `false` when every
    /// path has been walked.
    pub fn advance(&mut self) -> bool {
        self.advance_from(self.at)
    }

    /// As [`advance`](Enumerate::advance), but never below depth `depth`
    /// (the subtree under a state seen before is cut off there).
    pub fn advance_from(&mut self, depth: usize) -> bool {
        self.path.truncate(depth.min(self.path.len()));
        self.at = 0;
        while let Some(last) = self.path.last_mut() {
            if last.taken + 1 < last.of {
                last.taken += 1;
                return true;
            }
            self.path.pop();
        }
        false
    }

    /// The answer to a choice among `of`.
    fn choose(&mut self, of: usize) -> usize {
        if of <= 1 || !self.exploring {
            return 0;
        }
        let taken = match self.path.get(self.at) {
            // A deterministic run asks the same question at the same step.
            Some(choice) if choice.of == of => choice.taken,
            Some(c) => panic!(
                "a run diverged from its own path at choice {}: {c:?}, asked of {of}",
                self.at
            ),
            None => {
                self.path.push(Choice { taken: 0, of });
                0
            }
        };
        self.at += 1;
        taken
    }
}

impl Chooser for Enumerate {
    fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        // Whole ticks from lo's (rounded up) to hi's (rounded down); lo if
        // the range holds none.
        let ticks = |d: Duration| d.as_nanos() / self.tick.as_nanos();
        let first = ticks(lo) + u128::from(!lo.as_nanos().is_multiple_of(self.tick.as_nanos()));
        let last = ticks(hi);
        if last < first {
            return lo;
        }
        let width = (last - first + 1).min(u128::from(u32::MAX)) as usize;
        let n = width.min(self.spread);
        let i = self.choose(n) as u128;
        // The i-th of n evenly spaced ticks from first to last.
        let k = if n <= 1 { first } else { first + i * (last - first) / (n as u128 - 1) };
        self.tick * u32::try_from(k).unwrap_or(u32::MAX)
    }

    fn number(&mut self, lo: u32, hi: u32) -> u32 {
        lo + self.choose((hi.saturating_sub(lo) + 1) as usize) as u32
    }

    fn index(&mut self, n: usize) -> usize {
        self.choose(n)
    }

    fn fraction(&mut self, lo: f64, hi: f64) -> f64 {
        // The two ends: the least and the most a fault takes.
        if self.choose(2) == 0 {
            lo
        } else {
            hi
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.choose(2) == 1
        }
    }

    fn orders_ties(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy "run": two coin flips and, after heads, a pick of three.
    fn run(c: &mut impl Chooser) -> String {
        let mut out = String::new();
        for _ in 0..2 {
            if c.chance(0.5) {
                out.push_str(&format!("H{}", c.index(3)));
            } else {
                out.push('T');
            }
        }
        out
    }

    #[test]
    fn enumeration_walks_every_path_once_depth_first() {
        let mut c = Enumerate::new(Duration::from_millis(1));
        let mut seen = Vec::new();
        loop {
            seen.push(run(&mut c));
            if !c.advance() {
                break;
            }
        }
        let want = ["TT", "TH0", "TH1", "TH2", "H0T", "H0H0", "H0H1", "H0H2", "H1T"];
        assert_eq!(seen[..want.len()], want);
        assert_eq!(seen.len(), 16, "(1 + 3) x (1 + 3) paths: {seen:?}");
        let distinct: std::collections::BTreeSet<_> = seen.iter().collect();
        assert_eq!(distinct.len(), 16);
    }

    #[test]
    fn a_path_replays_and_a_cut_skips_its_subtree() {
        let mut c = Enumerate::new(Duration::from_millis(1));
        for want in ["TT", "TH0"] {
            assert_eq!(run(&mut c), want);
            c.advance();
        }
        assert_eq!(run(&mut c), "TH1");
        let path = c.path().to_vec();
        assert_eq!(run(&mut Enumerate::replay(Duration::from_millis(1), path)), "TH1");
        // Cut below the first choice: the next path changes the first flip.
        assert!(c.advance_from(1));
        assert_eq!(run(&mut c), "H0T");
    }

    #[test]
    fn durations_are_whole_ticks_within_the_range() {
        let ms = Duration::from_millis;
        let mut c = Enumerate::new(ms(1));
        let mut seen = Vec::new();
        loop {
            seen.push(c.duration(Duration::from_micros(500), ms(3)));
            if !c.advance() {
                break;
            }
        }
        assert_eq!(seen, [ms(1), ms(2), ms(3)]);
        assert_eq!(Enumerate::new(ms(1)).duration(ms(2), ms(2)), ms(2));
        assert_eq!(Enumerate::new(ms(5)).duration(ms(1), ms(2)), ms(1), "no tick inside");
        let mut wide = Enumerate::new(ms(1)).spread(3);
        let mut seen = Vec::new();
        loop {
            seen.push(wide.duration(ms(10), ms(80)));
            if !wide.advance() {
                break;
            }
        }
        assert_eq!(seen, [ms(10), ms(45), ms(80)], "ends and middle");
    }

    #[test]
    fn the_random_chooser_is_the_seeded_generator() {
        let draws = |seed| {
            let mut c = Random::new(seed);
            (0..20).map(|i| c.number(1, 5 + i)).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
    }
}

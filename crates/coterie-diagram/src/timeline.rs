//! Where a time falls across the page. Runs have long quiet stretches (a
//! node thinking, the cluster settling) between short busy ones, and a
//! diagram drawn to one scale is either too wide or a smudge. So the busy
//! stretches are drawn to a scale where a typical message's flight is a
//! readable slant, and every quiet stretch longer than many flights and a
//! twentieth of the whole is squeezed into a fixed gap, marked on the axis
//! with how long it was.

/// A piece of the page: the times `t0..t1` drawn from `x0`, at `scale`
/// pixels per µs (`None`: a squeezed quiet stretch of [`GAP_PX`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Piece {
    /// First time.
    pub t0: u64,
    /// Last time.
    pub t1: u64,
    /// Where it starts on the page.
    pub x0: f64,
    /// Pixels per µs; `None` for a squeezed stretch.
    pub scale: Option<f64>,
}

/// The width of a squeezed quiet stretch.
pub const GAP_PX: f64 = 36.0;

/// The mapping of times to page positions.
#[derive(Clone, Debug)]
pub struct TimeMap {
    pieces: Vec<Piece>,
}

impl TimeMap {
    /// Lays out `from..=until` over at least `min_width` and at most
    /// `max_width` pixels starting at `left`. `busy` are the times things
    /// happen, `spans` what lasts (a message in flight, a stay in the
    /// critical section: never squeezed); `flight` the typical message's
    /// flight (µs), drawn
    /// `flight_px` wide where the width allows; a quiet stretch longer
    /// than `quiet_flights` flights and a twentieth of `from..until` is
    /// squeezed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        busy: &[u64],
        spans: &[(u64, u64)],
        from: u64,
        until: u64,
        flight: u64,
        flight_px: f64,
        quiet_flights: u64,
        (left, min_width, max_width): (f64, f64, f64),
    ) -> TimeMap {
        let mut times: Vec<u64> =
            busy.iter().copied().filter(|t| (from..=until).contains(t)).collect();
        times.extend([from, until]);
        times.sort_unstable();
        times.dedup();
        // Squeezed: quiet for many flights, and for a good share of the
        // whole (a busy run's short pauses are its texture, not gaps).
        let quiet = (flight.max(1) * quiet_flights.max(1)).max((until - from) / 20);
        // Stretches: (t0, t1, squeezed).
        let mut stretches: Vec<(u64, u64, bool)> = Vec::new();
        let covered = merge(spans);
        let overlaps = |a: u64, b: u64| {
            // The first merged span ending after `a` starts before `b`?
            let i = covered.partition_point(|&(_, end)| end <= a);
            covered.get(i).is_some_and(|&(start, _)| start < b)
        };
        for pair in times.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let squeezed = b - a > quiet && !overlaps(a, b);
            match stretches.last_mut() {
                Some(last) if !last.2 && !squeezed => last.1 = b,
                _ => stretches.push((a, b, squeezed)),
            }
        }
        if stretches.is_empty() {
            stretches.push((from, until.max(from + 1), false));
        }
        let busy_us: u64 = stretches.iter().filter(|s| !s.2).map(|s| s.1 - s.0).sum();
        let gaps = stretches.iter().filter(|s| s.2).count() as f64 * GAP_PX;
        let mut scale = flight_px / flight.max(1) as f64;
        if busy_us > 0 {
            let room = (max_width - gaps).max(max_width / 4.0);
            scale = scale.min(room / busy_us as f64);
            let want = min_width - gaps;
            if busy_us as f64 * scale < want {
                scale = want / busy_us as f64;
            }
        }
        let mut x = left;
        let pieces = stretches
            .into_iter()
            .map(|(t0, t1, squeezed)| {
                let piece = Piece { t0, t1, x0: x, scale: (!squeezed).then_some(scale) };
                x += if squeezed { GAP_PX } else { (t1 - t0) as f64 * scale };
                piece
            })
            .collect();
        TimeMap { pieces }
    }

    /// Where `t` falls (clamped to the laid-out times).
    pub fn x(&self, t: u64) -> f64 {
        let first = self.pieces[0];
        if t <= first.t0 {
            return first.x0;
        }
        for p in &self.pieces {
            if t <= p.t1 {
                let into = (t - p.t0) as f64;
                return p.x0
                    + match p.scale {
                        Some(s) => into * s,
                        None => GAP_PX * into / (p.t1 - p.t0).max(1) as f64,
                    };
            }
        }
        self.end()
    }

    /// The right edge.
    pub fn end(&self) -> f64 {
        let last = self.pieces[self.pieces.len() - 1];
        last.x0 + last.scale.map_or(GAP_PX, |s| (last.t1 - last.t0) as f64 * s)
    }

    /// The pieces, left to right.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }
}

/// `spans` sorted and merged where they overlap.
fn merge(spans: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut sorted: Vec<(u64, u64)> = spans.iter().copied().filter(|(a, b)| a < b).collect();
    sorted.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (a, b) in sorted {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_stretches_are_squeezed_and_time_only_moves_right() {
        // Busy 0..10 ms, quiet until 700 ms, busy 700..720 ms.
        let busy: Vec<u64> = (0..=10).chain(700..=720).map(|ms| ms * 1000).collect();
        let map = TimeMap::new(&busy, &[], 0, 2_000_000, 1000, 14.0, 20, (50.0, 300.0, 6000.0));
        let kinds: Vec<bool> = map.pieces().iter().map(|p| p.scale.is_some()).collect();
        assert_eq!(kinds, [true, false, true, false]);
        assert_eq!(map.x(0), 50.0);
        assert!((map.x(10_000) - (50.0 + 140.0)).abs() < 1e-6, "a flight is 14 px");
        assert!((map.x(700_000) - (50.0 + 140.0 + GAP_PX)).abs() < 1e-6);
        let mut last = 0.0;
        for t in (0..2_000_000).step_by(997) {
            assert!(map.x(t) >= last);
            last = map.x(t);
        }
        assert!((map.end() - (50.0 + 140.0 + GAP_PX + 280.0 + GAP_PX)).abs() < 1e-6);
    }

    #[test]
    fn too_much_is_drawn_smaller_and_too_little_larger() {
        let busy: Vec<u64> = (0..=10_000).map(|ms| ms * 1000).collect();
        let wide = TimeMap::new(&busy, &[], 0, 10_000_000, 1000, 14.0, 20, (0.0, 900.0, 6000.0));
        assert!((wide.end() - 6000.0).abs() < 1.0);
        let narrow = TimeMap::new(&[0, 1000], &[], 0, 1000, 1000, 14.0, 20, (0.0, 900.0, 6000.0));
        assert!((narrow.end() - 900.0).abs() < 1.0);
    }

    #[test]
    fn what_lasts_across_a_quiet_stretch_keeps_it() {
        let busy = [0, 1000, 500_000, 501_000];
        let squeezed = |spans: &[(u64, u64)]| {
            let map = TimeMap::new(&busy, spans, 0, 501_000, 1000, 14.0, 20, (0.0, 0.0, 1e9));
            map.pieces().iter().any(|p| p.scale.is_none())
        };
        assert!(squeezed(&[]));
        assert!(!squeezed(&[(900, 500_100)]), "held across it");
        assert!(squeezed(&[(0, 900), (500_000, 501_000)]));
    }
}

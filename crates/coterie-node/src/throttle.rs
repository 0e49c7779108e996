//! At most one log line a second for what a remote party can repeat at
//! will (connections that fail authentication, messages that do not
//! decode): the log says what was dropped without letting anyone flood
//! it, and each line counts the ones held back since the last.

use std::time::{Duration, Instant};

/// The shortest time between two lines.
const EVERY: Duration = Duration::from_secs(1);

/// One kind of line, throttled.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last: Option<Instant>,
    held_back: u64,
}

impl Throttle {
    /// Whether to log an occurrence at `now`: `Some(n)` when a line is due,
    /// `n` being how many were held back since the last one; `None` when it
    /// is held back (and counted).
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|t| now.saturating_duration_since(t) < EVERY) {
            self.held_back += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_counting_the_rest() {
        let mut t = Throttle::default();
        let start = Instant::now();
        assert_eq!(t.admit(start), Some(0));
        for i in 1..=5 {
            assert_eq!(t.admit(start + Duration::from_millis(i * 100)), None);
        }
        assert_eq!(t.admit(start + Duration::from_millis(1000)), Some(5));
        assert_eq!(t.admit(start + Duration::from_millis(1500)), None);
        assert_eq!(t.admit(start + Duration::from_millis(2100)), Some(1));
    }
}

//! One blocking client taking one lock again and again, as fast as its
//! node answers: the chained cycle (the release of one entry and the next
//! acquire in one write), for SECONDS. `scripts/bench-vs.sh` runs it beside
//! the blocking C client (`scripts/bench/coterie-lock.c`) and prints the
//! same JSON line: cycles per second, and the time from a cycle's write
//! to its grant, p50 and p99 in microseconds.
//!
//! Usage: `lock-loop ADDR SECONDS [NAME]` (NAME: the lock, `default`
//! unless given).

use coterie_client::{blocking, LockRequest, Outcome};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, seconds, rest @ ..] = &args[..] else {
        return Err("usage: lock-loop ADDR SECONDS [NAME]".into());
    };
    let seconds: f64 = seconds.parse()?;
    let name = rest.first().map_or("default", String::as_str);
    let req = LockRequest::new([name]).client("lock-loop");
    let mut client = blocking::Client::connect(addr)?;
    if !matches!(client.request(&req)?, Outcome::Granted(_)) {
        return Err("the first acquire was not granted".into());
    }
    let mut latencies: Vec<u32> = Vec::with_capacity(1 << 22);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let mut t = start;
    while t < end {
        if !matches!(client.release_and_request(&req)?, Outcome::Granted(_)) {
            return Err("an acquire was not granted".into());
        }
        let after = Instant::now();
        latencies.push((after - t).as_micros() as u32);
        t = after;
    }
    let cycles = latencies.len();
    latencies.sort_unstable();
    let at = |q: usize| latencies.get(cycles * q / 100).copied().unwrap_or(0);
    let report = serde_json::json!({
        "cycles_per_s": cycles as f64 / (t - start).as_secs_f64(),
        "cycles": cycles,
        "acquire_p50_us": at(50),
        "acquire_p99_us": at(99),
    });
    println!("{report}");
    Ok(())
}

//! A history as a picture: every acquire's latency over time, with the
//! nemesis's faults as bands behind them (the shape of Jepsen's
//! latency-and-nemesis plots).
//!
//! Each acquire is a dot at the time it was invoked, as high as it took to
//! complete (log scale): green when granted, red when it certainly failed
//! (a timeout, a refusal), orange when nobody knows. An orange cross on
//! the top edge is a hold found lost. A grey band is a fault, from its
//! start to its heal, named above; the dashed line is the end of the
//! nemesis.

use crate::op::{Func, Kind, Op, NEMESIS};
use coterie_diagram::svg::escape;
use std::fmt::Write as _;

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 44.0;
/// The latency axis: 10 µs to 100 s.
const DECADES: (i32, i32) = (-2, 5);

/// Renders `history` (in time order) as an SVG document titled `title`.
pub fn svg(history: &[Op], title: &str) -> String {
    let t0 = history.first().map_or(0, |op| op.time_ns);
    let t1 = history.last().map_or(1, |op| op.time_ns).max(t0 + 1);
    let span_s = (t1 - t0) as f64 / 1e9;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |t: u64| LEFT + (t.saturating_sub(t0)) as f64 / (t1 - t0) as f64 * plot_w;
    let y = |ms: f64| {
        let (lo, hi) = (DECADES.0 as f64, DECADES.1 as f64);
        let v = ms.max(1e-3).log10().clamp(lo, hi);
        TOP + plot_h - (v - lo) / (hi - lo) * plot_h
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(out, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{}</text>"##,
        escape(title)
    );

    // The faults, as bands from each start to its heal.
    let mut open: Option<(u64, String)> = None;
    let mut row = 0;
    for op in history.iter().filter(|op| op.process == NEMESIS) {
        let label = op.detail.as_deref().unwrap_or("").split(':').next().unwrap_or("").to_string();
        match op.f {
            Func::Fault => open = Some((op.time_ns, label)),
            Func::Heal => {
                if let Some((start, label)) = open.take() {
                    let (xa, xb) = (x(start), x(op.time_ns));
                    let _ = writeln!(
                        out,
                        r##"<rect x="{xa:.1}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="#e8e8e8"/>"##,
                        (xb - xa).max(1.0)
                    );
                    let _ = writeln!(
                        out,
                        r##"<text x="{xa:.1}" y="{:.1}" fill="#555" font-size="10">{}</text>"##,
                        TOP - 4.0 - 11.0 * f64::from(row % 2),
                        escape(&label)
                    );
                    row += 1;
                }
            }
            Func::End => {
                let xe = x(op.time_ns);
                let _ = writeln!(
                    out,
                    r##"<line x1="{xe:.1}" y1="{TOP}" x2="{xe:.1}" y2="{:.1}" stroke="#333" stroke-dasharray="4 3"/>"##,
                    TOP + plot_h
                );
                let _ = writeln!(
                    out,
                    r##"<text x="{:.1}" y="{:.1}" fill="#333" font-size="10">nemesis ends</text>"##,
                    xe + 3.0,
                    TOP + 12.0
                );
            }
            _ => {}
        }
    }

    // Axes and grid.
    for d in DECADES.0..=DECADES.1 {
        let ms = 10f64.powi(d);
        let yy = y(ms);
        let label = if ms < 1.0 {
            format!("{ms} ms")
        } else if ms < 1000.0 {
            format!("{ms:.0} ms")
        } else {
            format!("{:.0} s", ms / 1000.0)
        };
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            yy + 4.0
        );
    }
    let step = nice_step(span_s);
    let mut s = 0.0;
    while s <= span_s + 1e-9 {
        let xx = LEFT + s / span_s * plot_w;
        let _ = writeln!(
            out,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#999"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{s:.0} s</text>"##,
            TOP + plot_h,
            TOP + plot_h + 4.0,
            TOP + plot_h + 16.0
        );
        s += step;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>"##
    );
    let _ = writeln!(
        out,
        r##"<text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">acquire latency</text>"##,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    );

    // Every acquire, at its invocation, as high as it took.
    let mut pending: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    for op in history.iter().filter(|op| op.process != NEMESIS) {
        match (op.f, op.kind) {
            (Func::Acquire, Kind::Invoke) => {
                pending.insert(op.process, op.time_ns);
            }
            (Func::Acquire, kind) => {
                if let Some(start) = pending.remove(&op.process) {
                    let colour = match kind {
                        Kind::Ok => "#2a9d2a",
                        Kind::Fail => "#d62728",
                        _ => "#ff8c00",
                    };
                    let ms = (op.time_ns - start) as f64 / 1e6;
                    let _ = writeln!(
                        out,
                        r##"<circle cx="{:.1}" cy="{:.1}" r="1.8" fill="{colour}" fill-opacity="0.6"/>"##,
                        x(start),
                        y(ms)
                    );
                }
            }
            (Func::Lose, _) => {
                let (xx, yy) = (x(op.time_ns), TOP + 4.0);
                let _ = writeln!(
                    out,
                    r##"<path d="M{:.1} {:.1} l6 6 m0 -6 l-6 6" stroke="#ff8c00" stroke-width="1.5"/>"##,
                    xx - 3.0,
                    yy - 3.0
                );
            }
            _ => {}
        }
    }

    // The legend.
    let ly = HEIGHT - 10.0;
    let mut lx = LEFT;
    for (colour, text) in
        [("#2a9d2a", "granted"), ("#d62728", "failed"), ("#ff8c00", "unknown / hold lost")]
    {
        let _ = writeln!(
            out,
            r##"<circle cx="{lx:.1}" cy="{:.1}" r="4" fill="{colour}"/><text x="{:.1}" y="{ly:.1}">{text}</text>"##,
            ly - 4.0,
            lx + 8.0
        );
        lx += 40.0 + 7.0 * text.len() as f64;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{lx:.1}" y="{:.1}" width="14" height="10" fill="#e8e8e8"/><text x="{:.1}" y="{ly:.1}">a fault, start to heal</text>"##,
        ly - 9.0,
        lx + 18.0
    );
    out.push_str("</svg>\n");
    out
}

/// A round step for about ten ticks over `span` seconds.
fn nice_step(span: f64) -> f64 {
    let raw = (span / 10.0).max(1e-3);
    let base = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * base).find(|&s| s >= raw).unwrap_or(base * 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_acquire_is_a_dot_and_every_fault_a_band() {
        let mut h = Vec::new();
        let op = |t: u64, p, kind, f| Op::new(t * 1_000_000, p, kind, f, "default");
        h.push(op(0, 1, Kind::Invoke, Func::Acquire));
        h.push(op(2, 1, Kind::Ok, Func::Acquire));
        h.push(op(3, NEMESIS, Kind::Info, Func::Fault).detail("pause: SIGSTOP n2"));
        h.push(op(4, 2, Kind::Invoke, Func::Acquire));
        h.push(op(900, 2, Kind::Fail, Func::Acquire));
        h.push(op(1000, NEMESIS, Kind::Info, Func::Heal).detail("pause: SIGCONT n2"));
        h.push(op(1100, 1, Kind::Info, Func::Lose));
        h.push(op(1200, NEMESIS, Kind::Info, Func::End));
        let svg = svg(&h, "a <\"test\">");
        assert_eq!(svg.matches("<circle").count(), 2 + 3, "two acquires and the legend");
        assert!(svg.contains(r##"fill="#d62728" fill-opacity"##));
        assert!(svg.contains(">pause</text>"));
        assert!(svg.contains("nemesis ends"));
        assert!(svg.contains("a &lt;&quot;test&quot;&gt;"));
        assert_eq!(svg.matches("<path").count(), 1);
    }
}

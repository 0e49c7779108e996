//! A [`Run`] as an SVG space-time diagram.
//!
//! Time runs left to right, a horizontal line per node from the top. Every
//! element the tests (and scripts) look for carries a class and its times
//! in `data-` attributes: `line.node` per node, `g.msg` per message arrow
//! (`data-t0` its send, `data-t1` its delivery, absent for a lost one,
//! whose arrow ends in a cross), `rect.cs` per stay in the critical
//! section (`data-fence`), `g.mark` per fault, suspicion or election.
//! Pointing at an arrow shows the message in full (an SVG `<title>`).

use crate::place::Placed;
use crate::timeline::{TimeMap, GAP_PX};
use crate::{label, MarkKind, Run};
use std::collections::BTreeMap;
use std::fmt::Write;

/// What to draw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Draw heartbeats too (left out by default: they are most of the
    /// traffic and none of the story).
    pub heartbeats: bool,
    /// Start the picture here (µs), instead of at the run's start.
    pub from_us: Option<u64>,
    /// End it here (µs), instead of at the run's end.
    pub until_us: Option<u64>,
}

const LEFT: f64 = 64.0;
const RIGHT: f64 = 48.0;
const TOP: f64 = 96.0;
const LANE: f64 = 72.0;
const MIN_WIDTH: f64 = 900.0;
const MAX_WIDTH: f64 = 6000.0;
/// How wide the typical message's flight is drawn, in pixels, where the
/// width allows.
const FLIGHT_PX: f64 = 14.0;
/// A quiet stretch longer than this many typical flights is squeezed.
const QUIET_FLIGHTS: u64 = 25;
/// Arrow labels are left out (tooltips stay) beyond this many arrows.
const MAX_LABELS: usize = 600;

/// Colours for message kinds, in order of the kinds' names (and for any
/// other chart of coterie's that wants distinct lines).
pub const PALETTE: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
    "#bcbd22", "#7f7f7f", "#393b79", "#637939",
];

/// The diagram of `run`.
pub fn render(run: &Run, options: &Options) -> String {
    Canvas::new(run, options).draw()
}

struct Canvas<'a> {
    run: &'a Run,
    options: &'a Options,
    from: u64,
    until: u64,
    map: TimeMap,
    width: f64,
    lanes: BTreeMap<u32, f64>,
    colours: BTreeMap<&'a str, &'static str>,
}

impl<'a> Canvas<'a> {
    fn new(run: &'a Run, options: &'a Options) -> Canvas<'a> {
        let from = options.from_us.unwrap_or(0).min(run.end_us);
        let until =
            options.until_us.unwrap_or(run.end_us).clamp(from + 1, run.end_us.max(from + 1));
        let drawn = || run.messages.iter().filter(|m| options.heartbeats || !m.heartbeat);
        // The typical flight of a drawn message sets the scale.
        let mut flights: Vec<u64> = drawn()
            .filter_map(|m| m.delivered_us.map(|d| d.saturating_sub(m.sent_us)))
            .filter(|&f| f > 0)
            .collect();
        flights.sort_unstable();
        let typical = flights.get(flights.len() / 2).copied().unwrap_or(1000).max(1);
        let mut busy: Vec<u64> =
            drawn().flat_map(|m| [Some(m.sent_us), m.delivered_us]).flatten().collect();
        busy.extend(run.sections.iter().flat_map(|c| [Some(c.enter_us), c.exit_us]).flatten());
        busy.extend(run.marks.iter().flat_map(|m| [Some(m.at_us), m.until_us]).flatten());
        // What lasts is never squeezed: a message in flight, a holder.
        let mut spans: Vec<(u64, u64)> =
            drawn().filter_map(|m| m.delivered_us.map(|d| (m.sent_us, d))).collect();
        spans.extend(run.sections.iter().map(|c| (c.enter_us, c.exit_us.unwrap_or(run.end_us))));
        let map = TimeMap::new(
            &busy,
            &spans,
            from,
            until,
            typical,
            FLIGHT_PX,
            QUIET_FLIGHTS,
            (LEFT, MIN_WIDTH, MAX_WIDTH),
        );
        let lanes =
            run.nodes.iter().enumerate().map(|(i, &n)| (n, TOP + LANE * i as f64)).collect();
        let mut kinds: Vec<&str> = run
            .messages
            .iter()
            .filter(|m| options.heartbeats || !m.heartbeat)
            .map(|m| m.kind.as_str())
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        let colours = kinds.into_iter().zip(PALETTE.iter().cycle().copied()).collect();
        Canvas { run, options, from, until, width: map.end() + RIGHT, map, lanes, colours }
    }

    fn x(&self, t: u64) -> f64 {
        self.map.x(t.clamp(self.from, self.until))
    }

    fn y(&self, node: u32) -> f64 {
        self.lanes.get(&node).copied().unwrap_or(TOP)
    }

    fn bottom(&self) -> f64 {
        TOP + LANE * (self.run.nodes.len().max(1) - 1) as f64
    }

    fn draw(&self) -> String {
        let legend_rows = self.colours.len().div_ceil(6) + 2;
        let height = self.bottom() + 60.0 + 18.0 * legend_rows as f64 + 16.0;
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{height:.0}" viewBox="0 0 {w:.0} {height:.0}" font-family="sans-serif" font-size="11">"#,
            w = self.width
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{}</text>"#,
            escape(&self.run.title)
        );
        let _ = writeln!(
            svg,
            r#"<defs><clipPath id="plot"><rect x="{LEFT}" y="0" width="{:.1}" height="{height:.0}"/></clipPath></defs>"#,
            self.width - LEFT - RIGHT
        );
        self.bands(&mut svg);
        self.node_lines(&mut svg);
        self.axis(&mut svg);
        let _ = writeln!(svg, r#"<g clip-path="url(#plot)">"#);
        let mut placed = Placed::default();
        self.sections(&mut svg, &mut placed);
        self.messages(&mut svg, &mut placed);
        self.marks(&mut svg);
        let _ = writeln!(svg, "</g>");
        self.legend(&mut svg);
        svg.push_str("</svg>\n");
        svg
    }

    fn visible(&self, start: u64, end: Option<u64>) -> bool {
        start <= self.until && end.unwrap_or(start) >= self.from
    }

    /// Partitions across every lane, pauses and degraded links on one.
    fn bands(&self, svg: &mut String) {
        for m in &self.run.marks {
            let Some(until) = m.until_us else { continue };
            if !self.visible(m.at_us, Some(until)) {
                continue;
            }
            let (x0, x1) = (self.x(m.at_us), self.x(until));
            let (y0, h, fill) = match (m.kind, m.node) {
                (MarkKind::Partition, _) => (TOP - 24.0, self.bottom() - TOP + 48.0, "#fde0dd"),
                (MarkKind::Pause, Some(n)) => (self.y(n) - 9.0, 18.0, "#d9d9d9"),
                (_, Some(n)) => (self.y(n) - 9.0, 18.0, "#fff2cc"),
                _ => continue,
            };
            let _ = writeln!(
                svg,
                r##"<g class="mark band" data-kind="{kind}" data-t0="{t0}" data-t1="{until}"><title>{text}</title><rect x="{x0:.1}" y="{y0:.1}" width="{w:.1}" height="{h:.1}" fill="{fill}" opacity="0.8"/><text x="{x0:.1}" y="{ty:.1}" font-size="9" fill="#555">{text}</text></g>"##,
                kind = m.kind.name(),
                t0 = m.at_us,
                text = escape(&m.text),
                w = (x1 - x0).max(1.0),
                ty = y0 - 2.0,
            );
        }
    }

    fn node_lines(&self, svg: &mut String) {
        for (&node, &y) in &self.lanes {
            let _ = writeln!(
                svg,
                r##"<line class="node" data-node="{node}" x1="{LEFT}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="#333" stroke-width="1.2"/><text x="{tx:.1}" y="{ty:.1}" font-size="13" font-weight="bold" text-anchor="end">n{node}</text>"##,
                x2 = self.width - RIGHT,
                tx = LEFT - 10.0,
                ty = y + 4.0,
            );
        }
    }

    /// The time axis: ticks on the busy stretches, a break with its length
    /// on each squeezed quiet one.
    fn axis(&self, svg: &mut String) {
        let y = self.bottom() + 30.0;
        let _ = writeln!(
            svg,
            r##"<line class="axis" x1="{LEFT}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="#999"/>"##,
            x2 = self.map.end()
        );
        let mut last_label = f64::NEG_INFINITY;
        for piece in self.map.pieces() {
            let Some(scale) = piece.scale else {
                let (x, quiet) = (piece.x0 + GAP_PX / 2.0, (piece.t1 - piece.t0) as f64 / 1000.0);
                let _ = writeln!(
                    svg,
                    r##"<g class="gap" data-t0="{t0}" data-t1="{t1}"><rect x="{x0:.1}" y="{top:.1}" width="{GAP_PX}" height="{h:.1}" fill="#f4f4f4"/><path d="M{a:.1},{b:.1} l6,-8 M{c:.1},{b:.1} l6,-8" stroke="#999"/><text x="{x:.1}" y="{ty:.1}" text-anchor="middle" font-size="9" fill="#777">+{quiet} ms</text></g>"##,
                    t0 = piece.t0,
                    t1 = piece.t1,
                    x0 = piece.x0,
                    top = TOP - 20.0,
                    h = y - TOP + 20.0,
                    a = x - 6.0,
                    b = y + 4.0,
                    c = x,
                    ty = y + 28.0,
                    quiet = round3(quiet),
                );
                continue;
            };
            let step = nice_step(100.0 / (scale * 1000.0));
            let mut t = (piece.t0 as f64 / 1000.0 / step).ceil() * step;
            while t <= piece.t1 as f64 / 1000.0 + 1e-9 {
                let x = self.map.x((t * 1000.0) as u64);
                let _ = write!(
                    svg,
                    r##"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{y2:.1}" stroke="#999"/>"##,
                    y2 = y + 5.0
                );
                if x - last_label > 60.0 {
                    let _ = write!(
                        svg,
                        r##"<text x="{x:.1}" y="{ty:.1}" text-anchor="middle" fill="#555">{t} ms</text>"##,
                        ty = y + 17.0,
                        t = trim(t),
                    );
                    last_label = x;
                }
                svg.push('\n');
                t += step;
            }
        }
    }

    /// The critical sections, a bar each with its fence under it (kept
    /// in `placed`, for the arrows' labels to keep off).
    fn sections(&self, svg: &mut String, placed: &mut Placed) {
        for s in &self.run.sections {
            let end = s.exit_us.unwrap_or(self.run.end_us);
            if !self.visible(s.enter_us, Some(end)) {
                continue;
            }
            let (x0, x1, y) = (self.x(s.enter_us), self.x(end), self.y(s.node));
            placed.keep(&format!("f={}", label::fence_label(s.fence)), x0, y + 16.0);
            let open = if s.exit_us.is_none() { " (still held at the end)" } else { "" };
            let _ = writeln!(
                svg,
                r##"<rect class="cs" data-node="{node}" data-fence="{fence}" data-t0="{t0}" data-t1="{end}" x="{x0:.1}" y="{y0:.1}" width="{w:.1}" height="8" fill="#111" rx="2"><title>n{node} in the critical section, fence {fence}{open}</title></rect><text x="{x0:.1}" y="{ty:.1}" font-size="9" fill="#111">f={short}</text>"##,
                short = label::fence_label(s.fence),
                node = s.node,
                fence = s.fence,
                t0 = s.enter_us,
                y0 = y - 4.0,
                w = (x1 - x0).max(2.0),
                ty = y + 16.0,
            );
        }
    }

    /// An arrow per message; its label near the tail (where a broadcast's
    /// arrows part ways), or further along where that covers another
    /// label, or left out (the tooltip stays) where every place would.
    fn messages(&self, svg: &mut String, placed: &mut Placed) {
        let drawn: Vec<_> = self
            .run
            .messages
            .iter()
            .filter(|m| self.options.heartbeats || !m.heartbeat)
            .filter(|m| self.visible(m.sent_us, m.delivered_us.or(Some(m.sent_us))))
            .collect();
        let labels = drawn.len() <= MAX_LABELS;
        for m in drawn {
            let colour = self.colours.get(m.kind.as_str()).copied().unwrap_or("#444");
            let (x0, y0, y1) = (self.x(m.sent_us), self.y(m.from), self.y(m.to));
            let text = escape(&m.text);
            let short = escape(&label::short(&m.text));
            match m.delivered_us {
                Some(t1) => {
                    let x1 = self.x(t1);
                    let _ = write!(
                        svg,
                        r#"<g class="msg" data-kind="{kind}" data-from="{from}" data-to="{to}" data-t0="{t0}" data-t1="{t1}"><title>n{from} → n{to} {text}</title><line x1="{x0:.1}" y1="{y0:.1}" x2="{x1:.1}" y2="{y1:.1}" stroke="{colour}" stroke-width="1.2"/>{head}"#,
                        kind = escape(&m.kind),
                        from = m.from,
                        to = m.to,
                        t0 = m.sent_us,
                        head = arrowhead(x0, y0, x1, y1, colour),
                    );
                    let along = [0.3, 0.45, 0.15, 0.6, 0.75, 0.9];
                    let places = along.map(|f| (x0 + (x1 - x0) * f + 3.0, y0 + (y1 - y0) * f));
                    if let Some((x, y)) = labels.then(|| placed.place(&short, places)).flatten() {
                        let _ = write!(
                            svg,
                            r#"<text x="{x:.1}" y="{y:.1}" font-size="9" fill="{colour}">{short}</text>"#,
                        );
                    }
                    svg.push_str("</g>\n");
                }
                None => {
                    // Lost: a dashed stub toward the receiver, crossed out.
                    let (x1, y1) = (x0 + 18.0, y0 + (y1 - y0) * 0.35);
                    let _ = writeln!(
                        svg,
                        r#"<g class="msg lost" data-kind="{kind}" data-from="{from}" data-to="{to}" data-t0="{t0}"><title>n{from} → n{to} {text} (never delivered)</title><line x1="{x0:.1}" y1="{y0:.1}" x2="{x1:.1}" y2="{y1:.1}" stroke="{colour}" stroke-width="1.2" stroke-dasharray="3,2"/>{cross}</g>"#,
                        kind = escape(&m.kind),
                        from = m.from,
                        to = m.to,
                        t0 = m.sent_us,
                        cross = cross(x1, y1, colour, 3.5),
                    );
                }
            }
        }
    }

    fn marks(&self, svg: &mut String) {
        let mut across = 0; // lines across every lane so far: their words stack
        for m in &self.run.marks {
            if m.until_us.is_some() || !self.visible(m.at_us, None) {
                continue; // bands are drawn underneath
            }
            let Some(node) = m.node else {
                // For the whole cluster: a line across every lane.
                let x = self.x(m.at_us);
                // Words to the left of the line near the right edge.
                let (tx, anchor) = if x > self.width - RIGHT - 320.0 {
                    (x - 4.0, "end")
                } else {
                    (x + 4.0, "start")
                };
                let _ = writeln!(
                    svg,
                    r##"<g class="mark" data-kind="{kind}" data-t0="{t0}"><title>{text}</title><line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{y1:.1}" stroke="#d0d" stroke-width="2" stroke-dasharray="5,3"/><text x="{tx:.1}" y="{ty:.1}" text-anchor="{anchor}" font-size="10" font-weight="bold" fill="#b0b">{text}</text></g>"##,
                    kind = m.kind.name(),
                    t0 = m.at_us,
                    text = escape(&m.text),
                    y0 = TOP - 50.0 - 12.0 * (across % 3) as f64,
                    y1 = self.bottom() + 20.0,
                    ty = TOP - 40.0 - 12.0 * (across % 3) as f64,
                );
                across += 1;
                continue;
            };
            let (x, y) = (self.x(m.at_us), self.y(node));
            let shape = symbol(m.kind, x, y);
            let words = match m.kind {
                MarkKind::Coordinator | MarkKind::Crash | MarkKind::Restart => {
                    format!(
                        r##"<text x="{tx:.1}" y="{ty:.1}" font-size="9" fill="#333">{}</text>"##,
                        escape(&m.text),
                        tx = x + 6.0,
                        ty = y - 9.0
                    )
                }
                _ => String::new(),
            };
            let _ = writeln!(
                svg,
                r#"<g class="mark" data-kind="{kind}" data-node="{node}" data-t0="{t0}"><title>{text}</title>{shape}{words}</g>"#,
                kind = m.kind.name(),
                t0 = m.at_us,
                text = escape(&m.text),
            );
        }
    }

    fn legend(&self, svg: &mut String) {
        let mut y = self.bottom() + 64.0;
        let _ = writeln!(svg, r#"<g class="legend">"#);
        for (i, (kind, colour)) in self.colours.iter().enumerate() {
            let x = LEFT + 150.0 * (i % 6) as f64;
            if i > 0 && i % 6 == 0 {
                y += 18.0;
            }
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="{colour}" stroke-width="2"/><text x="{tx:.1}" y="{ty:.1}">{kind}</text>"#,
                x2 = x + 22.0,
                tx = x + 28.0,
                ty = y + 4.0,
                kind = escape(kind)
            );
        }
        y += 22.0;
        let at = |i: usize| LEFT + 150.0 * i as f64 + 4.0;
        let symbols = [
            (symbol(MarkKind::Crash, at(0), y), "crash"),
            (symbol(MarkKind::Restart, at(1), y), "restart"),
            (symbol(MarkKind::Suspect, at(2), y + 8.0), "suspects a peer"),
            (symbol(MarkKind::Coordinator, at(3), y), "new coordinator"),
            (
                format!(
                    r##"<rect x="{:.1}" y="{:.1}" width="14" height="6" fill="#111"/>"##,
                    at(4) - 7.0,
                    y - 3.0
                ),
                "critical section",
            ),
            (
                format!(
                    r##"<rect x="{:.1}" y="{:.1}" width="14" height="10" fill="#fde0dd"/>"##,
                    at(5) - 7.0,
                    y - 5.0
                ),
                "partition",
            ),
        ];
        for (i, (shape, words)) in symbols.iter().enumerate() {
            let _ = writeln!(
                svg,
                r#"{shape}<text x="{tx:.1}" y="{ty:.1}">{words}</text>"#,
                tx = LEFT + 150.0 * i as f64 + 20.0,
                ty = y + 4.0
            );
        }
        let hidden = if self.options.heartbeats { "" } else { "; heartbeats hidden" };
        let _ = writeln!(
            svg,
            r##"<text x="{LEFT}" y="{ty:.1}" fill="#555">dashed and crossed: never delivered; pale bands: paused, slowed or lossy{hidden}</text>"##,
            ty = y + 22.0
        );
        svg.push_str("</g>\n");
    }
}

/// The symbol of an instant's mark at `(x, y)` (a node's line), as on
/// the diagram and in its legend.
fn symbol(kind: MarkKind, x: f64, y: f64) -> String {
    match kind {
        MarkKind::Crash => cross(x, y, "#c00", 7.0),
        MarkKind::Violation => cross(x, y, "#f0f", 9.0),
        MarkKind::Restart => {
            format!(r##"<circle cx="{x:.1}" cy="{y:.1}" r="5" fill="#2a2" stroke="#060"/>"##)
        }
        MarkKind::Suspect => format!(
            r##"<polygon points="{x:.1},{a:.1} {l:.1},{b:.1} {r:.1},{b:.1}" fill="#f90"/>"##,
            a = y - 13.0,
            b = y - 5.0,
            l = x - 4.0,
            r = x + 4.0
        ),
        MarkKind::Coordinator => format!(
            r##"<polygon points="{x:.1},{a:.1} {r:.1},{y:.1} {x:.1},{b:.1} {l:.1},{y:.1}" fill="#06c"/>"##,
            a = y - 6.0,
            b = y + 6.0,
            l = x - 6.0,
            r = x + 6.0
        ),
        _ => format!(
            r##"<rect x="{a:.1}" y="{b:.1}" width="6" height="6" fill="#888"/>"##,
            a = x - 3.0,
            b = y - 3.0
        ),
    }
}

fn arrowhead(x0: f64, y0: f64, x1: f64, y1: f64, colour: &str) -> String {
    let (dx, dy) = (x1 - x0, y1 - y0);
    let len = (dx * dx + dy * dy).sqrt().max(1e-6);
    let (ux, uy) = (dx / len, dy / len);
    let (size, half) = (7.0, 3.0);
    let (bx, by) = (x1 - ux * size, y1 - uy * size);
    format!(
        r#"<polygon points="{x1:.1},{y1:.1} {ax:.1},{ay:.1} {cx:.1},{cy:.1}" fill="{colour}"/>"#,
        ax = bx - uy * half,
        ay = by + ux * half,
        cx = bx + uy * half,
        cy = by - ux * half,
    )
}

fn cross(x: f64, y: f64, colour: &str, r: f64) -> String {
    format!(
        r#"<path d="M{a:.1},{b:.1} L{c:.1},{d:.1} M{a:.1},{d:.1} L{c:.1},{b:.1}" stroke="{colour}" stroke-width="2"/>"#,
        a = x - r,
        b = y - r,
        c = x + r,
        d = y + r
    )
}

/// 1, 2 or 5 times a power of ten, at least `rough`.
fn nice_step(rough: f64) -> f64 {
    let rough = rough.max(1e-3);
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= rough)
        .unwrap_or(power * 10.0)
}

/// Three significant figures or so: `739`, `12.5`, `0.81`.
fn round3(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        trim((v * 10.0).round() / 10.0)
    } else {
        trim((v * 100.0).round() / 100.0)
    }
}

fn trim(t: f64) -> String {
    let s = format!("{t:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `text` made safe inside an SVG element or a quoted attribute, for
/// every SVG of coterie's (diagrams, charts, history plots).
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mark, Message, Section};

    fn run() -> Run {
        let msg = |from, to, sent, delivered, kind: &str, text: &str| Message {
            from,
            to,
            sent_us: sent,
            delivered_us: delivered,
            kind: kind.into(),
            text: text.into(),
            heartbeat: kind == "heartbeat",
        };
        Run {
            title: "ricart-agrawala + bully <3 nodes>".into(),
            nodes: vec![1, 2, 3],
            end_us: 10_000,
            messages: vec![
                msg(
                    2,
                    1,
                    1000,
                    Some(2000),
                    "request",
                    "Request { stamp: Stamp { ts: 5, node: NodeId(2) } }",
                ),
                msg(1, 2, 2500, Some(3500), "reply", "Reply"),
                msg(
                    3,
                    1,
                    4000,
                    None,
                    "request",
                    "Request { stamp: Stamp { ts: 6, node: NodeId(3) } }",
                ),
                msg(1, 3, 100, Some(900), "heartbeat", "Heartbeat"),
            ],
            sections: vec![Section { node: 2, fence: 7, enter_us: 3600, exit_us: Some(5000) }],
            marks: vec![
                Mark {
                    node: Some(3),
                    at_us: 4500,
                    until_us: None,
                    kind: MarkKind::Crash,
                    text: "n3 crashes".into(),
                },
                Mark {
                    node: None,
                    at_us: 6000,
                    until_us: Some(8000),
                    kind: MarkKind::Partition,
                    text: "{n3} | {n1, n2}".into(),
                },
            ],
        }
    }

    fn count(svg: &str, needle: &str) -> usize {
        svg.matches(needle).count()
    }

    #[test]
    fn everything_is_drawn_with_its_times() {
        let svg = render(&run(), &Options::default());
        assert_eq!(count(&svg, r#"class="node""#), 3);
        assert_eq!(count(&svg, r#"<g class="msg"#), 3, "heartbeats hidden");
        assert_eq!(count(&svg, r#"<g class="msg lost""#), 1);
        assert_eq!(count(&svg, r#"class="cs""#), 1);
        assert!(svg.contains("REQUEST(5,2)"));
        assert!(svg.contains("&lt;3 nodes&gt;"), "text is escaped");
        assert!(svg.contains(r#"data-kind="crash""#));
        assert!(svg.contains(r#"data-kind="partition""#));
        let with = render(&run(), &Options { heartbeats: true, ..Options::default() });
        assert_eq!(count(&with, r#"<g class="msg"#), 4);
    }

    #[test]
    fn a_window_leaves_out_what_is_outside_it() {
        let svg = render(
            &run(),
            &Options { from_us: Some(2200), until_us: Some(3900), heartbeats: false },
        );
        assert_eq!(count(&svg, r#"<g class="msg"#), 1, "only the reply");
        assert_eq!(count(&svg, r#"class="cs""#), 1);
        assert!(!svg.contains(r#"data-kind="crash""#));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(12.0), 20.0);
    }
}

//! A [`Run`] as a ShiViz log (Beschastnikh et al., "Debugging Distributed
//! Systems", CACM 2016; <https://bestchai.bitbucket.io/shiviz/>), for
//! those who would rather explore it there: every send, delivery, entry,
//! exit and mark is an event with its vector clock, from which ShiViz
//! draws the happened-before graph itself.
//!
//! The file is what ShiViz's "upload a log" takes: the parsing regular
//! expression on the first line ([`REGEX`]), an empty second line (one
//! execution), then two lines per event:
//!
//! ```text
//! 754.086 ms n2 sends REQUEST(1,2) to n1
//! n2 {"n2":7,"n3":4,"n1":3}
//! ```
//!
//! Clocks are worked out from the run's order, as Fidge and Mattern
//! defined them: a node's own entry counts its events from 1, a send
//! carries the sender's clock, a delivery takes the pointwise maximum.
//! Within a window (`--from`/`--until`) only the window's events count,
//! and a delivery whose send came before the window is a local event.

use crate::svg::Options;
use crate::{label, Run};
use std::collections::BTreeMap;
use std::fmt::Write;

/// ShiViz's parsing expression for this format (its default one).
pub const REGEX: &str = r"(?<event>.*)\n(?<host>\S*) (?<clock>{.*})";

/// What happened, in the order it is replayed at one instant: sends before
/// deliveries, so a message that took no time is still sent first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Mark(usize),
    Exit(usize),
    Send(usize),
    Deliver(usize),
    Enter(usize),
}

/// The ShiViz log of `run`.
pub fn render(run: &Run, options: &Options) -> String {
    let from = options.from_us.unwrap_or(0);
    let until = options.until_us.unwrap_or(u64::MAX);
    let inside = |t: u64| (from..=until).contains(&t);
    let mut steps: Vec<(u64, Step)> = Vec::new();
    for (i, m) in run.messages.iter().enumerate() {
        if m.heartbeat && !options.heartbeats {
            continue;
        }
        if inside(m.sent_us) {
            steps.push((m.sent_us, Step::Send(i)));
        }
        if let Some(t) = m.delivered_us.filter(|&t| inside(t)) {
            steps.push((t, Step::Deliver(i)));
        }
    }
    for (i, s) in run.sections.iter().enumerate() {
        if inside(s.enter_us) {
            steps.push((s.enter_us, Step::Enter(i)));
        }
        if let Some(t) = s.exit_us.filter(|&t| inside(t)) {
            steps.push((t, Step::Exit(i)));
        }
    }
    for (i, m) in run.marks.iter().enumerate() {
        if m.node.is_some() && inside(m.at_us) {
            steps.push((m.at_us, Step::Mark(i)));
        }
    }
    steps.sort();

    let mut clocks: BTreeMap<u32, BTreeMap<u32, u64>> = BTreeMap::new();
    let mut carried: BTreeMap<usize, BTreeMap<u32, u64>> = BTreeMap::new();
    let mut out = format!("{REGEX}\n\n");
    for (t, step) in steps {
        let (host, words) = match step {
            Step::Send(i) => {
                let m = &run.messages[i];
                (m.from, format!("n{} sends {} to n{}", m.from, label::short(&m.text), m.to))
            }
            Step::Deliver(i) => {
                let m = &run.messages[i];
                (m.to, format!("n{} receives {} from n{}", m.to, label::short(&m.text), m.from))
            }
            Step::Enter(i) => {
                let s = &run.sections[i];
                (s.node, format!("n{} enters the critical section, fence {}", s.node, s.fence))
            }
            Step::Exit(i) => {
                let node = run.sections[i].node;
                (node, format!("n{node} leaves the critical section"))
            }
            Step::Mark(i) => {
                let m = &run.marks[i];
                (m.node.expect("marks of a node only"), m.text.clone())
            }
        };
        let clock = clocks.entry(host).or_default();
        if let Step::Deliver(i) = step {
            if let Some(theirs) = carried.remove(&i) {
                for (node, count) in theirs {
                    let mine = clock.entry(node).or_default();
                    *mine = (*mine).max(count);
                }
            }
        }
        *clock.entry(host).or_default() += 1;
        if let Step::Send(i) = step {
            carried.insert(i, clock.clone());
        }
        let json: Vec<String> = clock.iter().map(|(n, c)| format!("\"n{n}\":{c}")).collect();
        let _ = writeln!(out, "{:.3} ms {words}", t as f64 / 1000.0);
        let _ = writeln!(out, "n{host} {{{}}}", json.join(","));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, Section};

    #[test]
    fn clocks_count_events_and_deliveries_take_the_maximum() {
        let msg = |from, to, sent, delivered| Message {
            from,
            to,
            sent_us: sent,
            delivered_us: delivered,
            kind: "request".into(),
            text: "Request".into(),
            heartbeat: false,
        };
        let run = Run {
            nodes: vec![1, 2],
            end_us: 100,
            messages: vec![msg(1, 2, 10, Some(10)), msg(2, 1, 20, Some(30)), msg(1, 2, 40, None)],
            sections: vec![Section { node: 1, fence: 9, enter_us: 30, exit_us: Some(35) }],
            ..Run::default()
        };
        let log = render(&run, &Options::default());
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines[0], REGEX);
        assert_eq!(lines[1], "");
        let clocks: Vec<&str> = lines[2..].iter().skip(1).step_by(2).copied().collect();
        assert_eq!(
            clocks,
            [
                r#"n1 {"n1":1}"#,        // sends
                r#"n2 {"n1":1,"n2":1}"#, // receives it at the same instant
                r#"n2 {"n1":1,"n2":2}"#, // sends back
                r#"n1 {"n1":2,"n2":2}"#, // receives
                r#"n1 {"n1":3,"n2":2}"#, // enters
                r#"n1 {"n1":4,"n2":2}"#, // leaves
                r#"n1 {"n1":5,"n2":2}"#, // sends what is lost
            ]
        );
        assert!(lines[2].contains("n1 sends REQUEST to n2"));
    }
}

//! The space-time diagram of simulated runs, read back from its SVG as a
//! person would check it: a line per node, an arrow per message the run
//! sent (counted against the run's own counters, heartbeats aside), no
//! arrow whose head comes before its tail, a bar per entry. Every pair of
//! algorithms, with crashes.

use coterie_core::registry;
use coterie_diagram::svg::{self, Options};
use coterie_sim::sim::{self, SimConfig};

/// The value of `attr` in an element's opening tag.
fn attr(tag: &str, attr: &str) -> Option<u64> {
    let marker = format!(" {attr}=\"");
    let at = tag.find(&marker)? + marker.len();
    tag[at..].split('"').next()?.parse().ok()
}

/// Messages the run sent, by its own counters, heartbeats aside.
fn sent_besides_heartbeats(report: &sim::RunReport) -> u64 {
    report.sent_by_kind.iter().filter(|(kind, _)| **kind != "heartbeat").map(|(_, n)| n).sum()
}

/// Every opening tag that starts with `start`.
fn tags<'a>(svg: &'a str, start: &str) -> Vec<&'a str> {
    svg.match_indices(start).map(|(at, _)| &svg[at..at + svg[at..].find('>').unwrap()]).collect()
}

#[test]
fn a_diagram_draws_every_message_and_entry_of_the_run() {
    for mutex in registry::MUTEXES {
        for election in registry::ELECTIONS {
            for seed in 0..3 {
                let cfg = SimConfig {
                    seed,
                    crashes: 1,
                    requests: 3,
                    record: true,
                    ..SimConfig::new(mutex, election)
                };
                let nodes = cfg.nodes as usize;
                let report = sim::run(cfg);
                let pair = format!("{} + {} seed {seed}", mutex.name, election.name);
                let run = report.diagram.as_ref().expect("recorded");
                let svg = svg::render(run, &Options::default());

                assert_eq!(tags(&svg, "<line class=\"node\"").len(), nodes, "{pair}");
                let arrows = tags(&svg, "<g class=\"msg");
                let sent = sent_besides_heartbeats(&report);
                assert_eq!(arrows.len() as u64, sent, "{pair}: an arrow per message");
                for a in &arrows {
                    let t0 = attr(a, "data-t0").expect("a send time");
                    if let Some(t1) = attr(a, "data-t1") {
                        assert!(t1 >= t0, "{pair}: delivered before sent: {a}");
                    } else {
                        assert!(a.contains("lost"), "{pair}: {a}");
                    }
                }
                assert_eq!(
                    tags(&svg, "<rect class=\"cs\"").len() as u64,
                    report.counts.entries,
                    "{pair}: a bar per entry"
                );
                if report.injected.crashes > 0 {
                    assert!(svg.contains("data-kind=\"crash\""), "{pair}");
                }
                let with = svg::render(run, &Options { heartbeats: true, ..Options::default() });
                let all: u64 = report.sent_by_kind.values().sum();
                assert_eq!(tags(&with, "<g class=\"msg").len() as u64, all, "{pair}");
            }
        }
    }
}

/// The ShiViz log of a run: ShiViz's expression first, then an event per
/// send, delivery, entry and exit, each host's own count rising by one,
/// and no clock entry ever going down at a host.
#[test]
fn a_shiviz_log_has_every_event_with_a_consistent_vector_clock() {
    use coterie_diagram::shiviz;
    use std::collections::BTreeMap;
    for (mutex, election) in
        [("ricart-agrawala", "bully"), ("maekawa", "ring"), ("token-ring", "garcia-molina")]
    {
        let cfg = SimConfig {
            seed: 7,
            crashes: 1,
            requests: 3,
            record: true,
            ..SimConfig::new(mutex.parse().unwrap(), election.parse().unwrap())
        };
        let report = sim::run(cfg);
        let run = report.diagram.as_ref().unwrap();
        let log = shiviz::render(run, &Options::default());
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines[0], shiviz::REGEX);
        assert_eq!(lines[1], "");
        let events = &lines[2..];
        assert_eq!(events.len() % 2, 0);
        let mut seen: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        let (mut sends, mut receives, mut entries) = (0u64, 0u64, 0u64);
        for pair in events.chunks(2) {
            let (what, clock) = (pair[0], pair[1]);
            sends += u64::from(what.contains(" sends "));
            receives += u64::from(what.contains(" receives "));
            entries += u64::from(what.contains(" enters the critical section"));
            let (host, json) = clock.split_once(' ').unwrap();
            let entries_of: BTreeMap<String, u64> = json
                .trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .map(|kv| {
                    let (k, v) = kv.split_once(':').unwrap();
                    (k.trim_matches('"').to_string(), v.parse().unwrap())
                })
                .collect();
            let before = seen.entry(host.to_string()).or_default();
            assert_eq!(
                entries_of[host],
                before.get(host).copied().unwrap_or(0) + 1,
                "{mutex}: {what}"
            );
            for (k, v) in before.iter() {
                assert!(
                    entries_of.get(k).copied().unwrap_or(0) >= *v,
                    "{mutex}: {k} went down at {host}"
                );
            }
            *before = entries_of;
        }
        assert_eq!(sends, sent_besides_heartbeats(&report), "{mutex}");
        let delivered =
            run.messages.iter().filter(|m| !m.heartbeat && m.delivered_us.is_some()).count() as u64;
        assert_eq!(receives, delivered, "{mutex}");
        assert_eq!(entries, report.counts.entries, "{mutex}");
    }
}

/// The arrows' labels and the fences under the bars, as boxes of 9-pixel
/// text (an advance of 5 pixels a character, less than any capital's).
fn label_boxes(svg: &str) -> Vec<(f64, f64, f64, f64, String)> {
    let mut boxes = Vec::new();
    for start in ["<g class=\"msg\"", "<rect class=\"cs\""] {
        for (at, _) in svg.match_indices(start) {
            // The label is the element's first text, before the next one.
            let rest = &svg[at..];
            let end = rest.find('\n').unwrap_or(rest.len());
            let Some(t) = rest[..end].find("<text x=\"") else { continue };
            let tag = &rest[t..t + rest[t..].find('>').unwrap()];
            let num = |name: &str| -> f64 {
                let marker = format!(" {name}=\"");
                let from = tag.find(&marker).unwrap() + marker.len();
                tag[from..].split('"').next().unwrap().parse().unwrap()
            };
            let text = &rest[t + tag.len() + 1..];
            let text = &text[..text.find('<').unwrap()];
            let (x, y) = (num("x"), num("y"));
            boxes.push((
                x,
                y - 7.0,
                x + 5.0 * text.chars().count() as f64,
                y + 1.0,
                text.to_string(),
            ));
        }
    }
    boxes
}

/// No label of an arrow covers another, or a fence: where the arrows
/// crowd, a label moves along its arrow or is left to its tooltip.
#[test]
fn no_label_covers_another() {
    for mutex in registry::MUTEXES {
        for seed in 0..3 {
            let cfg = SimConfig {
                seed,
                requests: 3,
                record: true,
                ..SimConfig::new(mutex, &registry::ELECTIONS[0])
            };
            let report = sim::run(cfg);
            let svg = svg::render(report.diagram.as_ref().expect("recorded"), &Options::default());
            let boxes = label_boxes(&svg);
            assert!(boxes.len() > 3, "{} seed {seed}: labels read back: {boxes:?}", mutex.name);
            for (i, a) in boxes.iter().enumerate() {
                for b in &boxes[i + 1..] {
                    let apart = a.2 <= b.0 || b.2 <= a.0 || a.3 <= b.1 || b.3 <= a.1;
                    assert!(apart, "{} seed {seed}: {a:?} covers {b:?}", mutex.name);
                }
            }
        }
    }
}

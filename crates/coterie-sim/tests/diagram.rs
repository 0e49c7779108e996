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
                    ..SimConfig::new(mutex.name, election.name)
                };
                let nodes = cfg.nodes as usize;
                let report = sim::run(cfg).unwrap();
                let pair = format!("{} + {} seed {seed}", mutex.name, election.name);
                let run = report.diagram.as_ref().expect("recorded");
                let svg = svg::render(run, &Options::default());

                assert_eq!(tags(&svg, "<line class=\"node\"").len(), nodes, "{pair}");
                let arrows = tags(&svg, "<g class=\"msg");
                let sent: u64 = report
                    .sent_by_kind
                    .iter()
                    .filter(|(kind, _)| kind.as_str() != "heartbeat")
                    .map(|(_, n)| n)
                    .sum();
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
                    report.entries,
                    "{pair}: a bar per entry"
                );
                if report.crashes > 0 {
                    assert!(svg.contains("data-kind=\"crash\""), "{pair}");
                }
                let with = svg::render(run, &Options { heartbeats: true, ..Options::default() });
                let all: u64 = report.sent_by_kind.values().sum();
                assert_eq!(tags(&with, "<g class=\"msg").len() as u64, all, "{pair}");
            }
        }
    }
}

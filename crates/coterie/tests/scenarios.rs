//! The scenarios of `scenarios/`, played with `coterie run` against local
//! clusters of real processes, with every election. A test binary of its
//! own: cargo runs test binaries one after another, so these clusters do
//! not compete for the CPU with the other CLI tests' (the scenarios kill
//! nodes whose own clients may hold the lock, and a starved client can be
//! slow to notice that its session ended).

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_coterie");

fn coterie(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run coterie")
}

#[test]
fn every_scenario_passes_with_every_election() {
    let mut scenarios: Vec<PathBuf> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 9, "the scenarios are missing: {scenarios:?}");
    for election in ["bully", "ring", "garcia-molina"] {
        for scenario in &scenarios {
            let out =
                coterie(&["run", scenario.to_str().unwrap(), "--election", election, "--json"]);
            let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("{}: {e}\n{}", scenario.display(), String::from_utf8_lossy(&out.stderr))
            });
            assert!(
                out.status.success() && report["passed"] == true,
                "{} with {election}: {}",
                scenario.display(),
                report["failed"]
            );
            assert!(report["workload"]["entries"].as_u64().unwrap() > 0);
            // The live timeline shows what the nodes saw: who suspected
            // whom and the election that followed, and each kind of thing
            // the witness caught.
            let kinds: Vec<&str> = report["timeline"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["kind"].as_str().unwrap())
                .collect();
            let name = scenario.display();
            if !report["elections_ms"].as_array().unwrap().is_empty() {
                assert!(kinds.contains(&"suspect"), "{name} with {election}: {kinds:?}");
                assert!(kinds.contains(&"election"), "{name} with {election}: {kinds:?}");
                assert!(!report["elections"].as_array().unwrap().is_empty());
            }
            for (counter, kind) in [("stale_fences", "stale_fence"), ("violations", "overlap")] {
                if report["workload"][counter].as_u64().unwrap() > 0 {
                    assert!(kinds.contains(&kind), "{name} with {election}: {kinds:?}");
                    // Whatever the witness caught can be looked at.
                    let diagrams = report["incident_diagrams"].as_array().unwrap();
                    assert!(!diagrams.is_empty(), "{name} with {election}: no incident diagram");
                    for d in diagrams {
                        let svg = std::fs::read_to_string(d.as_str().unwrap()).unwrap();
                        assert!(svg.contains("data-kind=\"violation\""), "{name}: {d}");
                    }
                }
            }
        }
    }
}

#[test]
fn a_broken_scenario_gets_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("coterie-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "name = \"bad\"\n[cluster]\nnodes = 3\n[[step]]\nat = \"1s\"\ndo = \"explode\"\nnode = 2\n",
    )
    .unwrap();
    let out = coterie(&["run", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("explode") && err.contains("kill"), "{err}");
    std::fs::write(
        &path,
        "name = \"bad\"\n[cluster]\nnodes = 3\n[[step]]\nat = \"1s\"\ndo = \"kill\"\nnode = 7\n",
    )
    .unwrap();
    let out = coterie(&["run", path.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("node 7 is not in the cluster"));
    let _ = std::fs::remove_dir_all(dir);
}

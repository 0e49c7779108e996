//! Every fuzz target over its seeds, its committed corpus
//! (`fuzz/corpus/<target>/`), every input that once crashed it
//! (`fuzz/regressions/<target>/`), and seeded mutations of all of these:
//! the short run CI makes. `scripts/fuzz.sh` runs the coverage-guided
//! fuzzer for as long as asked.
//!
//! A failing input is written to `target/fuzz-failures/<target>-<n>` and
//! named in the panic: `cargo fuzz run <target> FILE` replays it.

use coterie_fuzz::{mutate, Target, TARGETS};
use std::path::{Path, PathBuf};

/// Mutants per input: a few seconds for every target together.
const MUTANTS: usize = 2000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| {
            let name = e.path().display().to_string();
            (name, std::fs::read(e.path()).expect("readable corpus file"))
        })
        .collect();
    files.sort();
    files
}

/// Runs `input`; on a panic, saves it and says where.
fn check(target: &Target, what: &str, input: &[u8]) {
    let result = std::panic::catch_unwind(|| (target.run)(input));
    if let Err(panic) = result {
        let dir = root().join("target/fuzz-failures");
        std::fs::create_dir_all(&dir).expect("target/ is writable");
        let n = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        let file = dir.join(format!("{}-{n}", target.name));
        std::fs::write(&file, input).expect("target/ is writable");
        let why = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "fuzz target {} panicked on {what} ({why}); saved as {}: replay with \
             `cargo +nightly fuzz run {} {}` in fuzz/",
            target.name,
            file.display(),
            target.name,
            file.display()
        );
    }
}

fn run_target(name: &str) {
    let target = TARGETS.iter().find(|t| t.name == name).expect("a target of that name");
    let mut inputs: Vec<(String, Vec<u8>)> =
        (target.seeds)().into_iter().enumerate().map(|(i, s)| (format!("seed {i}"), s)).collect();
    inputs.extend(files(&root().join("fuzz/corpus").join(name)));
    inputs.extend(files(&root().join("fuzz/regressions").join(name)));
    for (what, input) in &inputs {
        check(target, what, input);
    }
    // Mutate a sample of them: every seed and regression, and a spread of
    // the corpus, so the run stays short however large the corpus grows.
    let stride = (inputs.len() / 40).max(1);
    for (i, (what, input)) in inputs.iter().enumerate().step_by(stride) {
        for (j, mutant) in mutate::mutants(input, i as u64, MUTANTS).iter().enumerate() {
            check(target, &format!("mutant {j} of {what} (seed {i})"), mutant);
        }
    }
}

#[test]
fn peer_frames_and_the_engine_behind_them() {
    run_target("peer");
}

#[test]
fn the_authentication_handshake() {
    run_target("handshake");
}

#[test]
fn client_requests_and_responses() {
    run_target("client");
}

#[test]
fn witness_requests() {
    run_target("witness");
}

#[test]
fn the_state_file_and_its_record() {
    run_target("state_file");
}

#[test]
fn every_target_has_a_test() {
    let names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(names, ["peer", "handshake", "client", "witness", "state_file"]);
}

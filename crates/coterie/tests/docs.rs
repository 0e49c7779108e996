//! The guide cannot go stale: every relative link and image in README.md
//! and docs/src/ resolves (anchors too); SUMMARY.md lists every page; every
//! `console` block in them is run against a real cluster (`coterie up
//! --config config/local.toml`, as a reader would start it) and must print
//! what it shows; the configuration reference names every key the
//! configuration types accept and no other; the algorithm pages say
//! what their files' headers say; and no file dates its work by an
//! internal counter.
//!
//! A `console` block is a shell session: `$ COMMAND` lines, each followed
//! by the output it must print. `...` on a line of its own stands for any
//! number of lines, `[..]` within a line for any text.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// README.md and every page of the guide, each with its text.
fn read_pages() -> Vec<(PathBuf, String)> {
    pages().into_iter().map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap())).collect()
}

/// README.md and every page of the guide.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs/src"), &mut out);
    out.sort();
    out
}

/// A page's lines, numbered from 1, each with the info string of the
/// fenced code block it is in (`None` outside any); the fences themselves
/// left out.
fn blocks(text: &str) -> Vec<(usize, Option<&str>, &str)> {
    let mut block: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            block = match block {
                Some(_) => None,
                None => Some(trimmed.trim_start_matches('`').trim()),
            };
            continue;
        }
        out.push((i + 1, block, line));
    }
    out
}

/// A page's lines outside fenced code blocks, with inline code taken out,
/// numbered from 1.
fn prose(text: &str) -> Vec<(usize, String)> {
    let outside = blocks(text).into_iter().filter(|(_, block, _)| block.is_none());
    let strip = |line: &str| -> String {
        line.split('`').enumerate().filter(|(j, _)| j % 2 == 0).map(|(_, s)| s).collect()
    };
    outside.map(|(i, _, line)| (i, strip(line))).collect()
}

/// Every `](target)` of a page: line and target.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (line, prose) in prose(text) {
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((line, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// The anchors GitHub (and mdBook) give a page's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let headings = blocks(text)
        .into_iter()
        .filter(|(_, block, line)| block.is_none() && line.starts_with('#'));
    headings
        .map(|(_, _, line)| {
            let heading = line.trim_start_matches('#').trim();
            heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// What is wrong with the links of `page` (text `text`): one line each.
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for (line, target) in links(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let file =
            if path.is_empty() { page.to_path_buf() } else { page.parent().unwrap().join(path) };
        let at = format!("{}:{line}: {target}", page.display());
        if !file.exists() {
            broken.push(format!("{at}: no such file"));
            continue;
        }
        if let Some(anchor) = anchor.filter(|_| file.extension().is_some_and(|e| e == "md")) {
            let there = std::fs::read_to_string(&file).unwrap();
            if !anchors(&there).contains(anchor) {
                broken.push(format!("{at}: no heading has this anchor"));
            }
        }
    }
    broken
}

#[test]
fn every_link_and_image_resolves() {
    let broken: Vec<String> =
        read_pages().iter().flat_map(|(page, text)| broken_links(page, text)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_broken_link_or_anchor_is_caught() {
    let page = root().join("docs/src/introduction.md");
    let text = "[fine](getting-started.md) [gone](nowhere.md)\n\
                [bad anchor](running.md#no-such-heading) [good anchor](running.md#run-a-cluster-up-status-lock)\n\
                `[code](is-not-a-link.md)` [web](https://example.org/x)\n";
    let broken = broken_links(&page, text);
    assert_eq!(broken.len(), 2, "{broken:#?}");
    assert!(broken[0].contains("nowhere.md: no such file"), "{broken:#?}");
    assert!(broken[1].contains("#no-such-heading: no heading"), "{broken:#?}");
}

#[test]
fn the_contents_list_every_page() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> =
        links(&summary).into_iter().map(|(_, target)| src.join(target)).collect();
    let unlisted: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md") && !listed.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(unlisted.is_empty(), "pages SUMMARY.md does not list: {unlisted:#?}");
}

/// One `$ command` of a console block, and what it must print.
struct Example {
    at: String,
    command: String,
    expected: Vec<String>,
}

/// Every console block's commands, in page order.
fn examples(page: &Path, text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    for (i, _, line) in blocks(text).into_iter().filter(|(_, block, _)| *block == Some("console")) {
        if let Some(command) = line.strip_prefix("$ ") {
            let at = format!("{}:{i}", page.display());
            out.push(Example { at, command: command.to_string(), expected: Vec::new() });
        } else if let Some(example) = out.last_mut() {
            example.expected.push(line.to_string());
        }
    }
    out
}

/// Whether `line` matches the expected line `pattern` (`[..]`: any text).
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || !line[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `output` matches `expected` (`...`: any number of lines).
fn output_matches(expected: &[String], output: &[&str]) -> bool {
    match expected.split_first() {
        None => output.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=output.len()).any(|skip| output_matches(rest, &output[skip..]))
        }
        Some((first, rest)) => {
            output.first().is_some_and(|line| line_matches(first, line))
                && output_matches(rest, &output[1..])
        }
    }
}

#[test]
fn a_changed_output_is_caught() {
    let expected: Vec<String> =
        ["fence [..]", "...", "done"].iter().map(|s| s.to_string()).collect();
    assert!(output_matches(&expected, &["fence 12", "a", "b", "done"]));
    assert!(output_matches(&expected, &["fence 12", "done"]));
    assert!(!output_matches(&expected, &["fence 12", "a"]));
    assert!(!output_matches(&expected, &["fencing 12", "done"]));
    assert!(!output_matches(&expected, &["fence 12", "done", "more"]));
    assert!(line_matches("a [..] b [..] c", "a 1 b 2 c"));
    assert!(!line_matches("a [..] b [..] c", "a 1 c 2 b"));
}

/// `coterie up --config config/local.toml` from the repository's root, as
/// a reader starts it; stopped (and its state files removed) when dropped.
struct LocalCluster {
    child: std::process::Child,
}

impl LocalCluster {
    fn start() -> LocalCluster {
        let log = std::fs::File::create(std::env::temp_dir().join("coterie-docs-up.log")).unwrap();
        let child = Command::new(BIN)
            .args(["up", "--config", "config/local.toml"])
            .current_dir(root())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let cluster = LocalCluster { child };
        let began = Instant::now();
        loop {
            let out = Command::new(BIN)
                .args(["status", "--config", "config/local.toml", "--json"])
                .current_dir(root())
                .output()
                .unwrap();
            let rows: Vec<serde_json::Value> =
                serde_json::from_slice(&out.stdout).unwrap_or_default();
            if agreed(&rows).is_some_and(|(_, up)| up == 5) {
                return cluster;
            }
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "config/local.toml's cluster never settled (its ports 7101-7405 and 7300 \
                 must be free): {}",
                String::from_utf8_lossy(&out.stdout)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        unsafe_kill(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
    }
}

#[test]
fn every_console_example_prints_what_the_guide_shows() {
    let all: Vec<Example> =
        read_pages().iter().flat_map(|(page, text)| examples(page, text)).collect();
    assert!(all.len() >= 5, "the guide has {} console examples", all.len());
    let _cluster = LocalCluster::start();
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut failed = Vec::new();
    for example in &all {
        let out = Command::new("sh")
            .args(["-c", &example.command])
            .current_dir(root())
            .env("PATH", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        if !out.status.success() || !output_matches(&example.expected, &lines) {
            failed.push(format!(
                "{}: $ {}\n  exit: {:?}\n  expected:\n    {}\n  printed:\n    {}\n  stderr: {}",
                example.at,
                example.command,
                out.status.code(),
                example.expected.join("\n    "),
                lines.join("\n    "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "examples that no longer print what the guide says:\n{}",
        failed.join("\n")
    );
}

/// The keys each section of the configuration accepts, learned from the
/// types themselves: a key they do not know is refused with the list of
/// those they do.
fn accepted_keys() -> BTreeMap<&'static str, BTreeSet<String>> {
    let sections = [
        ("cluster", "[cluster]\nzzz = 1\n"),
        ("security", "[security]\nzzz = 1\n"),
        ("limits", "[limits]\nzzz = 1\n"),
        ("timing", "[timing]\nzzz = 1\n"),
        ("witness", "[witness]\nzzz = 1\n"),
        ("node", "[[node]]\nzzz = 1\n"),
        ("", "zzz = 1\n"),
    ];
    let mut out = BTreeMap::new();
    for (section, text) in sections {
        let error = toml::from_str::<coterie_node::Config>(text).expect_err(text).to_string();
        let (_, list) = error
            .split_once("expected one of")
            .or_else(|| error.split_once("expected"))
            .unwrap_or_else(|| panic!("{section}: no list of keys in {error:?}"));
        let keys: BTreeSet<String> = list
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, key)| key.to_string())
            .collect();
        assert!(!keys.is_empty(), "{section}: {error}");
        out.insert(section, keys);
    }
    out
}

#[test]
fn the_configuration_reference_names_every_key_and_no_other() {
    let page = std::fs::read_to_string(root().join("docs/src/configuration.md")).unwrap();
    let block = page.split("```toml\n").nth(1).and_then(|b| b.split("```").next()).unwrap();
    // Every key, commented out or not, by section.
    let mut documented: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut section = "";
    for line in block.lines() {
        let line = line.trim_start_matches('#').trim();
        if let Some(name) = line.strip_prefix('[') {
            section = match name.trim_start_matches('[').split(']').next().unwrap() {
                "cluster" => "cluster",
                "security" => "security",
                "limits" => "limits",
                "timing" => "timing",
                "witness" => "witness",
                "node" => "node",
                other => panic!("an unknown section in the reference: {other}"),
            };
            documented.entry("").or_default().insert(section.to_string());
        } else if let Some((key, _)) = line.split_once('=') {
            documented.entry(section).or_default().insert(key.trim().to_string());
        }
    }
    // The top level's keys are the section names (`node` for [[node]]).
    let accepted = accepted_keys();
    let mut wrong = Vec::new();
    for (section, keys) in &accepted {
        let there = documented.get(section).cloned().unwrap_or_default();
        for key in keys.difference(&there) {
            wrong.push(format!("[{section}] {key}: accepted, but not in the reference"));
        }
        for key in there.difference(keys) {
            wrong.push(format!("[{section}] {key}: in the reference, but not accepted"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/src/configuration.md and the types disagree:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn each_algorithm_page_says_what_its_file_says() {
    let src = root().join("crates/coterie-core/src");
    let mut stale = Vec::new();
    // Every registered algorithm has its page: a missing one panics below.
    use coterie_core::registry::{ELECTIONS, MUTEXES};
    let mutexes: Vec<&str> = MUTEXES.iter().map(|m| m.name).collect();
    let elections: Vec<&str> = ELECTIONS.iter().map(|e| e.name).collect();
    for (dir, names) in [("mutex", mutexes), ("election", elections)] {
        for name in names {
            let file = src.join(dir).join(format!("{}.rs", name.replace('-', "_")));
            let page = root().join(format!("docs/src/algorithms/{name}.md"));
            let page = std::fs::read_to_string(&page)
                .unwrap_or_else(|e| panic!("{}: {e} (scripts/algorithm-pages.sh)", page.display()));
            // Each paragraph of the header, its rustdoc links as plain code.
            let code = std::fs::read_to_string(&file).unwrap();
            let header: Vec<String> = code
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").trim().to_string())
                .filter(|l| !l.starts_with('#') && !l.contains("]("))
                .filter(|l| !l.is_empty() && !l.contains('['))
                .collect();
            let flat: String = page.split_whitespace().collect::<Vec<_>>().join(" ");
            for line in header {
                if !flat.contains(&line) {
                    stale.push(format!("{name}: the page lacks {line:?}"));
                    break;
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "algorithm pages behind their files (run scripts/algorithm-pages.sh NAME):\n{}",
        stale.join("\n")
    );
}

/// Where `text` numbers work by an internal counter ("session" or
/// "sessions" followed by a number or a range, or "work session") instead
/// of dating it: each hit as `line: text`. A figure is dated; its history
/// is git's.
fn work_counters(text: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lower = line.to_lowercase();
        let numbered = ["session ", "sessions "].iter().any(|word| {
            lower.match_indices(word).any(|(at, _)| {
                let before = lower[..at].chars().next_back();
                let after = lower[at + word.len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
                    && after.is_some_and(|c| c.is_ascii_digit())
            })
        });
        if numbered || lower.contains("work session") {
            hits.push(format!("{}: {}", i + 1, line.trim()));
        }
    }
    hits
}

#[test]
fn a_work_counter_is_caught() {
    // Put together here, so that this file does not say what it forbids.
    let (one, range) = (format!("session {}", 24), format!("sessions {}-{}", 30, 33));
    let text = format!(
        "measured in {one}\n{range} found it\nthe --sessions 3 flag\n\
         each of this work session's figures\nsession-3 and 2 sessions"
    );
    let hits = work_counters(&text);
    assert_eq!(hits.len(), 3, "{hits:#?}");
}

/// No file the repository tracks dates its work by an internal counter.
#[test]
fn nothing_is_numbered_by_work_session() {
    let files = Command::new("git").arg("ls-files").current_dir(root()).output().unwrap();
    assert!(files.status.success(), "git ls-files: {}", String::from_utf8_lossy(&files.stderr));
    let mut found = Vec::new();
    for file in String::from_utf8_lossy(&files.stdout).lines() {
        let Ok(text) = std::fs::read_to_string(root().join(file)) else { continue };
        found.extend(work_counters(&text).into_iter().map(|hit| format!("{file}:{hit}")));
    }
    // This file's own examples above are the pattern, not a use of it.
    found.retain(|hit| !hit.starts_with("crates/coterie/tests/docs.rs:"));
    assert!(found.is_empty(), "numbered by work session, not dated:\n{}", found.join("\n"));
}

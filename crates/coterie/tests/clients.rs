//! The HTTP API as other languages' programs meet it, on real node
//! processes: the Python client's tests and the curl examples
//! (`clients/`), and schemathesis (PyPI, in the virtual environment
//! `scripts/test.sh` makes at `target/py`) checking the running server
//! against its OpenAPI document — and failing on a document that
//! disagrees with the server.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::*;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

/// Runs the Python client's tests against `up`, whose nodes' APIs are at
/// `urls`, with `env` set.
fn python_suite(up: &Up, urls: &[String], env: &[(&str, PathBuf)]) {
    let pids: Vec<String> = (1..=3).map(|id| up.node_pid(id).to_string()).collect();
    let out = Command::new("python3")
        .args(["-m", "unittest", "-v", "test_coterie"])
        .current_dir(root().join("clients/python"))
        .env("COTERIE_URLS", urls.join(","))
        .env("COTERIE_PIDS", pids.join(","))
        .env("COTERIE_BIN", env!("CARGO_BIN_EXE_coterie"))
        .env("COTERIE_CONFIG", up.config())
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .output()
        .expect("run python3");
    let log = text(&out);
    println!("{log}");
    assert!(out.status.success(), "the Python client's tests failed:\n{log}");
    assert!(log.contains("Ran 11 tests"), "not every test ran:\n{log}");
}

#[test]
fn the_python_client_and_the_curl_examples_work_against_a_real_cluster() {
    let up = Up::start(3, "python");
    let urls: Vec<String> = (1..=3).map(|id| up.http(id)).collect();
    python_suite(&up, &urls, &[]);
}

/// The same tests over HTTPS, the node asking for client certificates:
/// the Python client and curl take the CA and the client's certificate
/// from the environment.
#[test]
fn the_python_client_and_the_curl_examples_work_over_tls_with_client_certificates() {
    let init = ["--tls", "--http", "--set", "security.client_cert_auth=true"];
    let up = Up::init(3, "python-tls", &init);
    let urls: Vec<String> = (1..=3).map(|id| format!("https://{}", up.http_addr(id))).collect();
    let file = |name: &str| up.dir().join(name);
    let env = [
        ("COTERIE_TLS_CA", file("ca.pem")),
        ("COTERIE_TLS_CERT", file("client.pem")),
        ("COTERIE_TLS_KEY", file("client.key")),
    ];
    python_suite(&up, &urls, &env);
}

/// Runs schemathesis in `dir` on the document at `schema` against `base`,
/// with bearer token `token`.
fn schemathesis(dir: &Path, schema: &Path, base: &str, token: &str) -> Output {
    let bin = root().join("target/py/bin/schemathesis");
    assert!(
        bin.exists(),
        "{} is missing: scripts/test.sh installs it (pip install -r scripts/requirements.txt)",
        bin.display()
    );
    Command::new(bin)
        .current_dir(dir)
        .arg("run")
        .arg(schema)
        .args(["--url", base])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--checks", "not_a_server_error,status_code_conformance,content_type_conformance"])
        .args(["--checks", "response_schema_conformance,response_headers_conformance"])
        .args(["--checks", "negative_data_rejection"])
        // The streams never end by themselves.
        .args(["--exclude-path-regex", "/(watch|observe)$"])
        .args(["--phases", "examples,coverage,fuzzing", "--max-examples", "60"])
        .args(["--request-timeout", "10", "--workers", "1", "--seed", "1"])
        .output()
        .expect("run schemathesis")
}

#[test]
fn the_server_keeps_to_its_openapi_document_and_schemathesis_would_say_if_not() {
    // As an operator runs it: a secret, and tokens for the API.
    let dir = scratch("openapi");
    let security = api_security(&dir.0, "api-token\n");
    let up = Up::start_with(3, "openapi", &security);
    let base = up.http(1);
    // The document the server serves is the one in the tree.
    let served = curl(&[&format!("{base}/v1/openapi.json")]);
    let file = root().join("crates/coterie-node/src/openapi.json");
    let checked_in = std::fs::read_to_string(&file).unwrap();
    assert_eq!(served, checked_in, "the server serves another document");

    // The document itself passes strict validation, as client generators
    // apply it (an empty `required`, for one, is refused).
    let validate = "import json, sys; from openapi_spec_validator import validate; \
                    validate(json.load(open(sys.argv[1])))";
    let out = Command::new(root().join("target/py/bin/python"))
        .args(["-c", validate])
        .arg(&file)
        .output()
        .expect("run openapi-spec-validator");
    assert!(out.status.success(), "the OpenAPI document is not valid:\n{}", text(&out));

    let out = schemathesis(&dir.0, &file, &base, "api-token");
    let log = text(&out);
    println!("{log}");
    assert!(out.status.success(), "the server and its OpenAPI document disagree:\n{log}");

    // A document that promises what the server does not do: a session's
    // TTL answered as a number of seconds. schemathesis must catch it.
    let mut wrong: serde_json::Value = serde_json::from_str(&checked_in).unwrap();
    let ttl = &mut wrong["components"]["schemas"]["Session"]["properties"]["ttl"];
    assert_eq!(ttl["type"], "string", "the test's edit no longer applies: {ttl}");
    *ttl = serde_json::json!({ "type": "integer" });
    let wrong = serde_json::to_string_pretty(&wrong).unwrap();
    let wrong_file = dir.0.join("wrong.json");
    std::fs::write(&wrong_file, wrong).unwrap();
    let out = schemathesis(&dir.0, &wrong_file, &base, "api-token");
    let log = text(&out);
    assert!(!out.status.success(), "schemathesis passed a document that is wrong:\n{log}");
    assert!(log.contains("ttl"), "it failed, but not on the TTL:\n{log}");
}

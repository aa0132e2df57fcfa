//! The `cordon` binary as runners in other languages use it: JSON on stdout, exit codes that mean
//! something, a loud failure when the engine is unreachable.

use std::process::Command;

fn cordon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cordon"))
}

fn json(output: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

#[test]
fn gate_json_exits_zero_when_every_case_passes() {
    let output = cordon()
        .args(["gate", "--json", "--filter", "cap"])
        .output()
        .expect("run cordon");
    let report = json(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["failed"], 0);
    assert_eq!(
        report["passed"], 6,
        "caps-dropped and cap-added, three layers each: {report}"
    );
}

#[test]
fn doctor_json_reports_and_exits_zero_here() {
    let output = cordon()
        .args(["doctor", "--json"])
        .output()
        .expect("run cordon");
    let report = json(&output);
    assert!(output.status.success(), "{report}");
    assert_eq!(report["ok"], true);
    assert_eq!(
        report["engine"]["api"],
        report["engine"]["api"].as_str().unwrap_or("?")
    );
}

#[test]
fn image_build_json_names_a_digest_tag() {
    let output = cordon()
        .args(["image", "build", "--json"])
        .output()
        .expect("run cordon");
    let built = json(&output);
    assert!(output.status.success(), "{built}");
    assert!(built["tag"]
        .as_str()
        .unwrap_or("")
        .starts_with("cordon-test:"));
    assert!(built["size_bytes"].as_i64().unwrap_or(0) > 0);
}

#[test]
fn unreachable_engine_fails_loudly() {
    let output = cordon()
        .args(["doctor", "--json"])
        .env("DOCKER_HOST", "unix:///nonexistent/cordon-test.sock")
        .output()
        .expect("run cordon");
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(json(&output)["error"], "engine-unreachable");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unreachable") && stderr.contains("/nonexistent/cordon-test.sock"),
        "{stderr}"
    );
}

//! `mcpmon slo` against the tools that read its documents: Sloth's own
//! validator and generator (its rules then through promtool), the OpenSLO
//! Go SDK's validation (what `oslo validate` runs), and Pyrra's CRD on a
//! real API server with strict field validation. Each reader is shown to
//! refuse a broken document, so a pass means something.

use std::process::Command;

use serde_json::Value;

use crate::support::kube::Cluster;
use crate::support::*;

/// A fleet with a dotted id, an upper-case id, per-server objectives and
/// a label to group by.
const FLEET: &str = r#"
global:
  slo: {availability: 99.5}
servers:
  - id: search.v1
    transport: http
    url: http://127.0.0.1:9/mcp
    labels: {team: pay}
  - id: Files
    transport: http
    url: http://127.0.0.1:9/mcp
    labels: {team: pay}
    slo: {availability: 99.95, latency: 95, latency_threshold: 100ms}
  - id: billing
    transport: http
    url: http://127.0.0.1:9/mcp
    labels: {team: web}
"#;

/// `mcpmon slo` on [`FLEET`] with `args`, written to `name` in `dir`.
fn written(dir: &std::path::Path, name: &str, args: &[&str]) -> std::path::PathBuf {
    let fleet = dir.join("fleet.yaml");
    std::fs::write(&fleet, FLEET).expect("fleet");
    let out = stdout_ok(mcpmon().arg("slo").args(args).arg(&fleet));
    let path = dir.join(name);
    std::fs::write(&path, out).expect("write");
    path
}

fn edit(path: &std::path::Path, from: &str, to: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(path).expect("read");
    assert!(text.contains(from), "{from:?} not in {}", path.display());
    let broken = path.with_extension("broken.yml");
    std::fs::write(&broken, text.replacen(from, to, 1)).expect("write");
    broken
}

#[test]
fn sloth_validates_and_generates_what_mcpmon_slo_writes_and_promtool_takes_the_rules() {
    require!(program("sloth"), program("promtool"));
    let dir = tempfile::tempdir().expect("tmp");
    for (name, args) in [
        ("per-server.yml", &[][..]),
        ("by-team.yml", &["--by", "team"][..]),
    ] {
        let spec = written(dir.path(), name, args);
        run_ok(
            Command::new(which("sloth"))
                .args(["validate", "--no-log", "-i"])
                .arg(&spec),
        );
        let rules = dir.path().join(format!("rules-{name}"));
        run_ok(
            Command::new(which("sloth"))
                .args(["generate", "--no-log", "--default-slo-period", "30d", "-i"])
                .arg(&spec)
                .arg("-o")
                .arg(&rules),
        );
        let out = run_ok(
            Command::new(which("promtool"))
                .args(["check", "rules"])
                .arg(&rules),
        );
        assert!(
            out.contains("SUCCESS") && !out.to_lowercase().contains("warning"),
            "{out}"
        );
        // Two objectives per server (or per team), each with its recording
        // rules and its page and ticket alerts.
        let text = std::fs::read_to_string(&rules).expect("rules");
        let objectives = if args.is_empty() { 6 } else { 4 };
        assert_eq!(
            text.matches("alert: McpAvailabilityBudgetBurn").count()
                + text.matches("alert: McpLatencyBudgetBurn").count(),
            objectives * 2,
            "{text}"
        );
        assert!(
            text.contains("mcpmon_server_down_seconds_total{server=\"search.v1\"}")
                || !args.is_empty()
        );
    }
    // Sloth refuses a query without its window: the validation is real.
    let spec = written(dir.path(), "again.yml", &[]);
    let broken = edit(&spec, "[{{.window}}]", "[5m]");
    let (ok, out) = run(Command::new(which("sloth"))
        .args(["validate", "--no-log", "-i"])
        .arg(&broken));
    assert!(!ok, "sloth took a query without {{{{.window}}}}:\n{out}");
}

#[test]
fn the_openslo_sdk_validates_what_mcpmon_slo_writes() {
    require!(program("openslo-validate"));
    let dir = tempfile::tempdir().expect("tmp");
    for (name, args) in [
        ("per-server.yml", &["--format", "openslo"][..]),
        ("by-team.yml", &["--format", "openslo", "--by", "team"][..]),
    ] {
        let docs = written(dir.path(), name, args);
        let out = run_ok(Command::new(which("openslo-validate")).arg(&docs));
        let objects = if args.len() == 2 { 7 } else { 5 };
        assert!(out.contains(&format!("valid: {objects} objects")), "{out}");
    }
    let docs = written(dir.path(), "again.yml", &["--format", "openslo"]);
    for (from, to) in [
        ("target: 0.995", "target: 1.5"),
        ("budgetingMethod: Occurrences", "budgetingMethod: Sometimes"),
    ] {
        let (ok, out) = run(Command::new(which("openslo-validate")).arg(edit(&docs, from, to)));
        assert!(!ok, "the SDK took {to:?}:\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyrra_objects_are_accepted_whole_by_an_api_server_with_pyrras_crd() {
    require!(
        installed("tests/kube/bin/kube-apiserver"),
        installed("tests/kube/bin/etcd")
    );
    let dir = tempfile::tempdir().expect("tmp");
    let docs = written(
        dir.path(),
        "pyrra.yml",
        &[
            "--format",
            "pyrra",
            "--namespace",
            "mcp-test",
            "--by",
            "team",
        ],
    );
    let text = std::fs::read_to_string(&docs).expect("read");
    let objects: Vec<Value> = text
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| yaml_serde::from_str(d).expect("yaml"))
        .collect();
    assert_eq!(objects.len(), 4, "availability and latency for two teams");
    let cluster = Cluster::start().await;
    cluster
        .install_crds(&[repo().join("tests/kube/crds/pyrra.dev_servicelevelobjectives.yaml")])
        .await;
    cluster
        .create("/api/v1/namespaces", serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "mcp-test"}}))
        .await;
    let base = "/apis/pyrra.dev/v1alpha1/namespaces/mcp-test/servicelevelobjectives";
    for o in &objects {
        // Strict: a field the schema does not know is an error, not pruned.
        let stored = cluster
            .create(&format!("{base}?fieldValidation=Strict"), o.clone())
            .await;
        // Stored as written: every field kept (the schema adds defaults).
        for (key, value) in o["spec"].as_object().expect("spec") {
            assert_eq!(&stored["spec"][key], value, "spec.{key}");
        }
    }
    // The same check refuses a field Pyrra does not have.
    let mut wrong = objects[0].clone();
    wrong["metadata"]["name"] = "wrong".into();
    wrong["spec"]["indicator"]["ratio"]["error"] =
        wrong["spec"]["indicator"]["ratio"]["errors"].clone();
    let (code, body) = cluster
        .post(&format!("{base}?fieldValidation=Strict"), wrong)
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown field \"spec.indicator.ratio.error\"")),
        "{body}"
    );
}

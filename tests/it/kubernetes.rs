//! The Kubernetes packaging and the Alertmanager config, against the real
//! tools: `helm lint` and `helm template`, the Kubernetes schemas
//! (kubernetes-validate) and the Prometheus Operator's CRD schemas for the
//! rendered objects, `promtool` and `mcpmon check-config` on what the chart
//! renders, `amtool` on the routes, and a live Alertmanager holding back the
//! pages a whole-shard-down alert explains.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use serde_json::{Value, json};

fn chart() -> PathBuf {
    repo().join("deploy/helm/mcpmon")
}

/// `helm template` of the chart with `args`, as one string and as objects.
fn template(args: &[&str]) -> (String, Vec<yaml_serde::Value>) {
    let text = stdout_ok(
        Command::new(which("helm"))
            .args(["template", "mcpmon"])
            .arg(chart())
            .args(args),
    );
    let objects = text
        .split("\n---\n")
        .filter_map(|d| yaml_serde::from_str::<yaml_serde::Value>(d).ok())
        .filter(|v| !v.is_null())
        .collect();
    (text, objects)
}

fn object<'a>(objects: &'a [yaml_serde::Value], kind: &str) -> &'a yaml_serde::Value {
    objects
        .iter()
        .find(|o| o["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} rendered"))
}

/// `contents` in a temporary file whose name ends in `name`; the file is
/// removed when the value drops.
fn written(name: &str, contents: &str) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .prefix("mcpmon-k8s-")
        .suffix(&format!("-{name}"))
        .tempfile()
        .expect("tmp");
    std::fs::write(file.path(), contents).expect("write");
    file
}

/// Where `go mod download` put the Prometheus Operator's CRDs (.ci/setup).
fn crd_dir() -> PathBuf {
    // .ci/setup puts Go's own directory on its PATH, which need not be ours.
    let go = std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("go"))
                .find(|g| g.exists())
        })
        .unwrap_or_else(|| PathBuf::from("/usr/local/go/bin/go"));
    let out = Command::new(go)
        .args(["env", "GOMODCACHE"])
        .output()
        .expect("go env");
    let cache = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let dir = Path::new(&cache)
        .join("github.com/prometheus-operator/prometheus-operator@v0.85.0/example/prometheus-operator-crd");
    assert!(dir.is_dir(), "{} missing: run .ci/setup", dir.display());
    dir
}

fn validate(rendered: &str) -> String {
    let file = written("rendered.yaml", rendered);
    let python = repo().join("tests/python/.venv-k8s/bin/python");
    assert!(
        python.exists(),
        "{} missing: run .ci/setup",
        python.display()
    );
    run_ok(
        Command::new(python)
            .arg(repo().join("tests/k8s/validate.py"))
            .arg(file.path())
            .arg(crd_dir()),
    )
}

#[test]
fn the_chart_lints_and_renders_valid_objects_for_three_shards() {
    require!(
        program("helm"),
        program("amtool"),
        program("prometheus-alertmanager"),
        program("promtool"),
        installed("tests/python/.venv-k8s")
    );
    let lint = run_ok(
        Command::new(which("helm"))
            .args(["lint", "--strict"])
            .arg(chart()),
    );
    assert!(
        lint.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{lint}"
    );

    let (text, objects) = template(&[
        "--set",
        "shards=3",
        "--set-json",
        r#"webConfig={"basic_auth_users":{"prometheus":"$2y$10$abcdefghijklmnopqrstuv"}}"#,
    ]);
    let report = validate(&text);
    // With the default discovery: its ServiceAccount, Role and RoleBinding.
    assert!(report.contains("10 of 10 objects valid"), "{report}");

    let sts = object(&objects, "StatefulSet");
    assert_eq!(sts["spec"]["replicas"].as_u64(), Some(3));
    let pod = &sts["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    for want in [
        "--shard.count=3",
        "--shard.index-from-hostname",
        "--config.file=/etc/mcpmon/fleet.yaml",
        "--web.config.file=/etc/mcpmon-web/web-config.yml",
    ] {
        assert!(args.contains(&want), "{want} missing from {args:?}");
    }
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/-/healthy")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/-/ready")
    );
    assert_eq!(
        c["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    // The pod names the StatefulSet gives are what --shard.index-from-hostname reads.
    assert_eq!(sts["spec"]["serviceName"].as_str(), Some("mcpmon"));
    let service = object(&objects, "Service");
    assert_eq!(service["spec"]["clusterIP"].as_str(), Some("None"));
    object(&objects, "ServiceMonitor");
    object(&objects, "PrometheusRule");
    object(&objects, "Secret");

    // The schema check is not a formality: a misspelt field fails it.
    let broken = written(
        "broken.yaml",
        &text.replacen("podManagementPolicy:", "podManagementPolicyy:", 1),
    );
    let (ok, report) = run(
        Command::new(repo().join("tests/python/.venv-k8s/bin/python"))
            .arg(repo().join("tests/k8s/validate.py"))
            .arg(broken.path())
            .arg(crd_dir()),
    );
    assert!(!ok && report.contains("podManagementPolicyy"), "{report}");
}

#[test]
fn the_rendered_rules_are_the_shipped_rules_with_the_release_selector() {
    require!(
        program("helm"),
        program("amtool"),
        program("prometheus-alertmanager"),
        program("promtool"),
        installed("tests/python/.venv-k8s")
    );
    let selector = r#"namespace="monitoring""#;
    let (_, objects) = template(&[
        "--set-string",
        &format!("prometheusRule.selector={selector}"),
        "--set",
        "prometheusRule.runbookBase=https://wiki.example/runbook",
    ]);
    let spec = object(&objects, "PrometheusRule")["spec"].clone();
    let file = written("rules.yml", &yaml_serde::to_string(&spec).expect("yaml"));
    let out = run_ok(
        Command::new(which("promtool"))
            .args(["check", "rules"])
            .arg(file.path()),
    );
    assert!(out.contains("SUCCESS"), "{out}");
    let want = run_ok(
        Command::new("python3")
            .arg(repo().join("alerts/build.py"))
            .args([
                "--stdout",
                "--selector",
                selector,
                "--runbook-base",
                "https://wiki.example/runbook",
            ]),
    );
    let want: yaml_serde::Value = yaml_serde::from_str(&want).expect("rules");
    assert_eq!(spec, want, "the chart's rules drifted from alerts/build.py");
    let text = yaml_serde::to_string(&spec).expect("yaml");
    assert!(
        text.contains("runbook_url: https://wiki.example/runbook#mcpmonsharddown"),
        "{text}"
    );

    // With the default (empty) selector, the rules still parse.
    let (_, objects) = template(&[]);
    let spec = object(&objects, "PrometheusRule")["spec"].clone();
    std::fs::write(file.path(), yaml_serde::to_string(&spec).expect("yaml")).expect("write");
    run_ok(
        Command::new(which("promtool"))
            .args(["check", "rules"])
            .arg(file.path()),
    );
}

#[test]
fn the_rendered_fleet_file_is_a_valid_config_and_the_dashboards_are_the_shipped_ones() {
    require!(
        program("helm"),
        program("amtool"),
        program("prometheus-alertmanager"),
        program("promtool"),
        installed("tests/python/.venv-k8s")
    );
    let (_, objects) = template(&[
        "--set-json",
        r#"fleet={"servers":[{"id":"search","transport":"http","url":"http://search:8080/mcp","labels":{"team":"payments"}}],"http_sd_configs":[{"url":"http://registry:8080/mcp-servers"}]}"#,
    ]);
    let fleet = objects
        .iter()
        .find(|o| o["kind"].as_str() == Some("ConfigMap") && o["data"]["fleet.yaml"].is_string())
        .expect("fleet ConfigMap");
    let file = written(
        "fleet.yaml",
        fleet["data"]["fleet.yaml"].as_str().expect("text"),
    );
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_mcpmon"))
            .arg("check-config")
            .arg(file.path()),
    );
    assert!(out.contains("valid, 1 server(s)"), "{out}");

    let boards = objects
        .iter()
        .find(|o| {
            o["kind"].as_str() == Some("ConfigMap") && o["data"]["mcpmon-fleet.json"].is_string()
        })
        .expect("dashboards ConfigMap");
    assert_eq!(
        boards["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    for name in ["mcpmon-fleet.json", "mcpmon-server.json"] {
        let shipped =
            std::fs::read_to_string(repo().join("dashboards").join(name)).expect("dashboard");
        let rendered = boards["data"][name].as_str().expect("dashboard text");
        assert_eq!(
            rendered.trim_end(),
            shipped.trim_end(),
            "{name}: run python3 dashboards/build.py"
        );
    }
}

/// Every Kubernetes discovery role the fleet file can name.
const ROLES: [&str; 10] = [
    "service",
    "toolhive_mcpserver",
    "toolhive_mcpremoteproxy",
    "toolhive_mcpserverentry",
    "toolhive_virtualmcpserver",
    "kagent_remotemcpserver",
    "kmcp_mcpserver",
    "mcp_lifecycle_mcpserver",
    "agentgateway_backend",
    "kuadrant_mcpserverregistration",
];

/// The chart's RBAC for Kubernetes discovery is exactly what the code
/// reads: `mcpmon check-config` on the rendered fleet file names, for each
/// source, the verbs, group and resource it reads and where; the rendered
/// Roles (one per namespace) or ClusterRole grant exactly those, bound to
/// the account the pod runs as, and nothing else.
#[test]
fn the_charts_rbac_is_exactly_what_discovery_reads() {
    require!(program("helm"));
    let roles = format!("kubernetesDiscovery.roles={{{}}}", ROLES.join(","));
    for (args, kind, namespaces) in [
        (vec!["--set", roles.as_str()], "Role", vec!["default"]),
        (
            vec![
                "--set",
                roles.as_str(),
                "--set",
                "kubernetesDiscovery.namespaces={team-a,team-b}",
            ],
            "Role",
            vec!["team-a", "team-b"],
        ),
        (
            vec![
                "--set",
                roles.as_str(),
                "--set",
                "kubernetesDiscovery.allNamespaces=true",
            ],
            "ClusterRole",
            vec![],
        ),
    ] {
        let (_, objects) = template(&args);
        let fleet = objects
            .iter()
            .find(|o| {
                o["kind"].as_str() == Some("ConfigMap") && o["data"]["fleet.yaml"].is_string()
            })
            .expect("fleet ConfigMap");
        let file = written(
            "fleet.yaml",
            fleet["data"]["fleet.yaml"].as_str().expect("text"),
        );
        let out = run_ok(
            Command::new(env!("CARGO_BIN_EXE_mcpmon"))
                .arg("check-config")
                .arg(file.path()),
        );
        // What the code reads: (verbs, group, resource) per source, and where.
        let mut reads: Vec<(String, String, String)> = Vec::new();
        let mut wheres = std::collections::BTreeSet::new();
        for line in out.lines().filter(|l| l.contains("rbac: ")) {
            let field = |k: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .unwrap_or_else(|| panic!("{k} in {line}"))
                    .trim_matches('"')
                    .to_owned()
            };
            reads.push((field("verbs"), field("apiGroup"), field("resource")));
            wheres.insert(field("namespaces"));
        }
        reads.sort();
        // Every role reads its kind; Kuadrant's the HTTPRoutes too.
        assert_eq!(reads.len(), ROLES.len() + 1, "{out}");
        let want_where = if namespaces.is_empty() {
            "all".to_owned()
        } else if args.iter().any(|a| a.contains("namespaces={")) {
            namespaces.join(",")
        } else {
            "own".to_owned()
        };
        assert_eq!(
            wheres.into_iter().collect::<Vec<_>>(),
            [want_where],
            "{out}"
        );
        // What the chart grants.
        let granted: Vec<&yaml_serde::Value> = objects
            .iter()
            .filter(|o| o["kind"].as_str() == Some(kind))
            .collect();
        let granted_in: Vec<&str> = granted
            .iter()
            .filter_map(|o| o["metadata"]["namespace"].as_str())
            .collect();
        assert_eq!(granted_in, namespaces, "{kind} per watched namespace");
        for role in &granted {
            let mut rules: Vec<(String, String, String)> = role["rules"]
                .as_sequence()
                .expect("rules")
                .iter()
                .map(|r| {
                    let list = |k: &str| -> Vec<String> {
                        r[k].as_sequence()
                            .expect(k)
                            .iter()
                            .map(|v| v.as_str().expect("string").to_owned())
                            .collect()
                    };
                    let (groups, resources) = (list("apiGroups"), list("resources"));
                    assert_eq!(
                        (groups.len(), resources.len()),
                        (1, 1),
                        "one kind a rule: {r:?}"
                    );
                    (
                        list("verbs").join(","),
                        groups[0].clone(),
                        resources[0].clone(),
                    )
                })
                .collect();
            rules.sort();
            assert_eq!(rules, reads, "{kind} grants exactly what discovery reads");
        }
        let binding = object(&objects, &format!("{kind}Binding"));
        let account = object(&objects, "ServiceAccount")["metadata"]["name"].clone();
        assert_eq!(binding["subjects"][0]["name"], account);
        assert_eq!(
            object(&objects, "StatefulSet")["spec"]["template"]["spec"]["serviceAccountName"],
            account
        );
    }
    // With no role, no account token is mounted and nothing is granted.
    let (_, objects) = template(&["--set", "kubernetesDiscovery.roles=null"]);
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"].as_str().is_some_and(|k| k.contains("Role")))
    );
    assert_eq!(
        object(&objects, "StatefulSet")["spec"]["template"]["spec"]["automountServiceAccountToken"],
        yaml_serde::Value::Bool(false)
    );
}

#[test]
fn alertmanager_routes_by_team() {
    require!(
        program("helm"),
        program("amtool"),
        program("prometheus-alertmanager"),
        program("promtool"),
        installed("tests/python/.venv-k8s")
    );
    let config = repo().join("deploy/alertmanager/alertmanager.yml");
    run_ok(
        Command::new(which("amtool"))
            .arg("check-config")
            .arg(&config),
    );
    // The receiver is on stdout; some amtool versions add a warning on stderr.
    let route = |labels: &[&str]| {
        stdout_ok(
            Command::new(which("amtool"))
                .args(["config", "routes", "test", "--config.file"])
                .arg(&config)
                .args(labels),
        )
        .trim()
        .to_owned()
    };
    assert_eq!(
        route(&["alertname=McpServerUnhealthy", "team=payments"]),
        "payments"
    );
    assert_eq!(route(&["alertname=McpServerUnhealthy"]), "default");
    // One notification per job and team, not one per server.
    let doc: yaml_serde::Value =
        yaml_serde::from_str(&std::fs::read_to_string(&config).expect("read")).expect("yaml");
    let group_by: Vec<&str> = doc["route"]["group_by"]
        .as_sequence()
        .expect("group_by")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(group_by, ["job", "team"]);
}

struct Alertmanager {
    child: std::process::Child,
    url: String,
    /// Its storage; removed after the process is gone (fields drop last).
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_whole_shard_down_holds_back_that_shards_server_pages_in_a_live_alertmanager() {
    require!(
        program("helm"),
        program("amtool"),
        program("prometheus-alertmanager"),
        program("promtool"),
        installed("tests/python/.venv-k8s")
    );
    let dir = tempfile::Builder::new()
        .prefix("mcpmon-am-")
        .tempdir()
        .expect("dir");
    let port = free_port();
    let child = Command::new(which("prometheus-alertmanager"))
        .arg(format!(
            "--config.file={}",
            repo()
                .join("deploy/alertmanager/alertmanager.yml")
                .display()
        ))
        .arg(format!("--storage.path={}", dir.path().display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("alertmanager");
    let am = Alertmanager {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    };
    let client = test_client();
    let ready = format!("{}/-/ready", am.url);
    eventually(
        "alertmanager ready",
        Duration::from_secs(30),
        async || match client.get(&ready).send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            other => Err(other.map(|r| r.status())),
        },
    )
    .await;
    let alert = |name: &str, instance: &str, server: Option<&str>| {
        let mut labels = json!({"alertname": name, "job": "mcpmon", "instance": instance, "severity": "critical"});
        if let Some(s) = server {
            labels["server"] = json!(s);
        }
        json!({"labels": labels})
    };
    let alerts = json!([
        alert("McpmonShardDown", "a:9850", None),
        alert("McpServerUnhealthy", "a:9850", Some("s1")),
        alert("McpServerUnhealthy", "a:9850", Some("s2")),
        // Another shard's page is not explained by shard a.
        alert("McpServerUnhealthy", "b:9850", Some("s4")),
    ]);
    let r = client
        .post(format!("{}/api/v2/alerts", am.url))
        .json(&alerts)
        .send()
        .await
        .expect("post");
    assert!(r.status().is_success(), "{}", r.status());
    // Inhibition is computed as alerts arrive; wait until all four are in.
    let list = eventually(
        "four alerts, one inhibiting",
        Duration::from_secs(30),
        async || {
            let list: Vec<Value> = client
                .get(format!("{}/api/v2/alerts", am.url))
                .send()
                .await
                .expect("get")
                .json()
                .await
                .expect("json");
            let settled = list.len() == 4
                && list.iter().any(|a| {
                    !a["status"]["inhibitedBy"]
                        .as_array()
                        .is_none_or(|v| v.is_empty())
                });
            if settled { Ok(list) } else { Err(list) }
        },
    )
    .await;
    let inhibited = |server: &str| {
        list.iter()
            .find(|a| a["labels"]["server"] == server)
            .map(|a| {
                a["status"]["state"].as_str() == Some("suppressed")
                    && !a["status"]["inhibitedBy"]
                        .as_array()
                        .is_none_or(|v| v.is_empty())
            })
            .unwrap_or_else(|| panic!("{server} missing: {list:?}"))
    };
    assert!(inhibited("s1") && inhibited("s2"), "{list:#?}");
    assert!(!inhibited("s4"), "{list:#?}");
}

//! A real Prometheus running the shipped config and rules.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::*;

/// The shipped prometheus.yml, pointed at this test's processes: the
/// targets, the rule files and a fast scrape; no Alertmanager.
fn prometheus_config(targets: &[&str]) -> String {
    let text =
        std::fs::read_to_string(repo().join("deploy/prometheus/prometheus.yml")).expect("read");
    let mut doc: yaml_serde::Value = yaml_serde::from_str(&text).expect("yaml");
    doc["global"]["scrape_interval"] = "1s".into();
    doc["global"]["evaluation_interval"] = "1s".into();
    let rules: Vec<yaml_serde::Value> =
        vec![repo().join("alerts/*.yml").display().to_string().into()];
    doc["rule_files"] = rules.into();
    if let yaml_serde::Value::Mapping(m) = &mut doc {
        m.remove("alerting");
    }
    let jobs = doc["scrape_configs"]
        .as_sequence_mut()
        .expect("scrape_configs");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["job_name"], "mcpmon");
    let targets: Vec<yaml_serde::Value> = targets.iter().map(|t| (*t).into()).collect();
    jobs[0]["static_configs"][0]["targets"] = targets.into();
    yaml_serde::to_string(&doc).expect("yaml")
}

/// A real Prometheus running the shipped config and rules.
pub struct Prometheus {
    child: std::process::Child,
    base: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Started on a free port, scraping `targets` every second; returns once ready.
    pub async fn start(targets: &[&str]) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, prometheus_config(targets)).expect("write");
        let check = std::process::Command::new(which("promtool"))
            .args(["check", "config"])
            .arg(&config)
            .output()
            .expect("promtool");
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
        Self::spawn("prometheus", &config, &[], dir).await
    }

    /// A current Prometheus (3.x, `.ci/setup` builds it as `prometheus3`)
    /// that only receives OTLP pushes; returns once ready.
    pub async fn start_otlp_receiver() -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, "global:\n  scrape_interval: 1s\n").expect("write");
        Self::spawn("prometheus3", &config, &["--web.enable-otlp-receiver"], dir).await
    }

    /// Its base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `program` on `config` and a free port, its data in `dir`; once ready.
    async fn spawn(
        program: &'static str,
        config: &std::path::Path,
        extra: &[&str],
        dir: tempfile::TempDir,
    ) -> Prometheus {
        let port = free_port();
        let child = std::process::Command::new(which(program))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        let p = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
            _dir: dir,
        };
        let ready = format!("{}/-/ready", p.base);
        super::eventually(
            "prometheus ready",
            Duration::from_secs(30),
            async || match p.http.get(&ready).send().await {
                Ok(r) if r.status() == 200 => Ok(()),
                other => Err(other.map(|r| r.status())),
            },
        )
        .await;
        p
    }

    /// A query API call's `data`.
    pub async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let v: Value = r.json().await.expect("json");
        assert_eq!(v["status"], "success", "{path} {query:?}: {v}");
        v["data"].clone()
    }

    /// An instant query's result vector.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        self.api("/api/v1/query", &[("query", expr)]).await["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

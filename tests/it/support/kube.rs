//! A real Kubernetes control plane for the discovery tests: etcd and
//! kube-apiserver built from their Go modules (`.ci/kube-build`, linked at
//! `tests/kube/bin`), on loopback ports, with static token authentication
//! and the operators' CRDs installed. No kubelet, no controllers: objects
//! are what the test writes, status included.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

/// How long a control-plane process may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(90);
const ADMIN_TOKEN: &str = "mcpmon-test-admin-token";

/// etcd and an API server, and how to reach them.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    etcd: tokio::process::Child,
    etcd_url: String,
    apiserver: Option<tokio::process::Child>,
    /// The API server's secure port.
    pub port: u16,
    http: reqwest::Client,
}

fn bin(name: &str) -> PathBuf {
    repo().join("tests/kube/bin").join(name)
}

impl Cluster {
    /// Start etcd and the API server, wait until the API server is ready.
    pub async fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("tmp");
        let (client, peer) = (free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client}");
        let etcd = tokio::process::Command::new(bin("etcd"))
            .args(["--name", "default", "--data-dir"])
            .arg(dir.path().join("etcd"))
            .args([
                "--listen-client-urls",
                &etcd_url,
                "--advertise-client-urls",
                &etcd_url,
            ])
            .args([
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &format!("default=http://127.0.0.1:{peer}"),
                "--log-level",
                "error",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn etcd");
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(20))
            .build()
            .expect("client");
        eventually("etcd answers", READY_WITHIN, async || {
            let r = http.get(format!("{etcd_url}/health")).send().await;
            match r {
                Ok(r) if r.status().is_success() => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let key = dir.path().join("sa.key");
        run_ok(
            std::process::Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(&key)
                .arg("2048"),
        );
        std::fs::write(
            dir.path().join("tokens.csv"),
            format!("{ADMIN_TOKEN},admin,1,\"system:masters\"\n"),
        )
        .expect("tokens");
        let mut cluster = Cluster {
            dir,
            etcd,
            etcd_url,
            apiserver: None,
            port: free_port(),
            http,
        };
        cluster.start_apiserver().await;
        cluster
    }

    /// Start (again) the API server on the same port and etcd.
    pub async fn start_apiserver(&mut self) {
        let d = self.dir.path();
        let child = tokio::process::Command::new(bin("kube-apiserver"))
            .args(["--etcd-servers", &self.etcd_url])
            .args([
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                &self.port.to_string(),
            ])
            .arg(format!("--cert-dir={}", d.join("certs").display()))
            .arg(format!(
                "--token-auth-file={}",
                d.join("tokens.csv").display()
            ))
            .arg(format!(
                "--service-account-key-file={}",
                d.join("sa.key").display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                d.join("sa.key").display()
            ))
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .args(["--service-cluster-ip-range", "10.96.0.0/24"])
            .args(["--authorization-mode", "RBAC"])
            .args(["--enable-priority-and-fairness=false", "--v=0"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(d.join("apiserver.log")).expect("log"),
            ))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn kube-apiserver");
        self.apiserver = Some(child);
        let log = d.join("apiserver.log");
        eventually(
            "the API server is ready",
            READY_WITHIN,
            async || match self.get("/readyz").await {
                (200, _) => Ok(()),
                other => Err(format!(
                    "{other:?}; log tail: {}",
                    std::fs::read_to_string(&log)
                        .unwrap_or_default()
                        .lines()
                        .rev()
                        .take(5)
                        .collect::<Vec<_>>()
                        .join(" | ")
                )),
            },
        )
        .await;
    }

    /// Stop the API server (etcd stays, and so does what it holds).
    pub async fn stop_apiserver(&mut self) {
        if let Some(mut child) = self.apiserver.take() {
            let _ = child.kill().await;
            let _ = child.wait().await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        match req.bearer_auth(ADMIN_TOKEN).send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                (code, r.json().await.unwrap_or(Value::Null))
            }
            Err(e) => (0, json!(e.to_string())),
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.http.get(self.url(path))).await
    }

    /// POST `object` to `path`: the status code and the answer.
    pub async fn post(&self, path: &str, object: Value) -> (u16, Value) {
        self.send(self.http.post(self.url(path)).json(&object))
            .await
    }

    /// POST `object` to `path`; panics unless it was created.
    pub async fn create(&self, path: &str, object: Value) -> Value {
        let (code, v) = self.post(path, object).await;
        assert!(code == 201 || code == 200, "POST {path}: {code} {v}");
        v
    }

    /// Merge-patch `patch` into the object at `path` (`…/status` for its
    /// status).
    pub async fn patch(&self, path: &str, patch: Value) -> Value {
        let req = self
            .http
            .patch(self.url(path))
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string());
        let (code, v) = self.send(req).await;
        assert_eq!(code, 200, "PATCH {path}: {v}");
        v
    }

    pub async fn delete(&self, path: &str) {
        let (code, v) = self.send(self.http.delete(self.url(path))).await;
        assert!(code == 200 || code == 202, "DELETE {path}: {code} {v}");
    }

    /// Install every CRD in `files` (YAML) and wait until each is
    /// established.
    pub async fn install_crds(&self, files: &[PathBuf]) {
        for file in files {
            let text = std::fs::read_to_string(file).expect("crd");
            let crd: Value = yaml_serde::from_str(&text).expect("crd yaml");
            let name = crd["metadata"]["name"].as_str().expect("name").to_owned();
            self.create(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                crd,
            )
            .await;
            let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}");
            eventually(
                &format!("CRD {name} established"),
                READY_WITHIN,
                async || {
                    let (_, v) = self.get(&path).await;
                    let established = v["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Established" && c["status"] == "True")
                    });
                    if established {
                        Ok(())
                    } else {
                        Err(v["status"].clone())
                    }
                },
            )
            .await;
        }
    }

    /// A kubeconfig for mcpmon: this API server, its own CA, the admin
    /// token.
    pub fn kubeconfig(&self) -> PathBuf {
        self.kubeconfig_with("admin", ADMIN_TOKEN)
    }

    /// A kubeconfig named `name` that authenticates with `token`.
    pub fn kubeconfig_with(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.path().join(format!("kubeconfig-{name}"));
        let ca = self.dir.path().join("certs/apiserver.crt");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context: {{cluster: test, user: admin, namespace: mcp-test}}\ncurrent-context: test\n",
                self.url(""),
                ca.display()
            ),
        )
        .expect("kubeconfig");
        path
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(child) = &mut self.apiserver {
            let _ = child.start_kill();
        }
        let _ = self.etcd.start_kill();
    }
}

/// The CRDs the tests install: ToolHive's own, and the stand-ins.
pub fn operator_crds() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "mcpservers",
        "mcpremoteproxies",
        "mcpserverentries",
        "virtualmcpservers",
    ]
    .iter()
    .map(|k| bin("crds").join(format!("toolhive.stacklok.dev_{k}.yaml")))
    .collect();
    files.push(bin("crds").join("gateway.networking.k8s.io_httproutes.yaml"));
    let own = repo().join("tests/kube/crds");
    files.push(own.join("mcp.kuadrant.io_mcpserverregistrations.yaml"));
    files.push(own.join("kagent.dev_remotemcpservers.yaml"));
    files.push(own.join("mcp.x-k8s.io_mcpservers.yaml"));
    files
}

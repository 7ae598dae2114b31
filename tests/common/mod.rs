//! Shared helpers for the integration tests: run mcpmon in-process on a port-0
//! listener, start real servers, find and kill real processes, and wait on
//! conditions with bounded polling (never a bare sleep as synchronisation).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Fast timers so tests finish quickly; every bound below derives from them.
pub const FAST_GLOBAL: &str = r#"
global:
  ping_interval: 400ms
  ping_timeout: 300ms
  connect_timeout: 10s
  health_check_interval: 400ms
  health_check_timeout: 1s
  backoff_initial: 200ms
  backoff_max: 1s
  stuck_after: 30s
"#;
pub const PING_INTERVAL: Duration = Duration::from_millis(400);
pub const PING_TIMEOUT: Duration = Duration::from_millis(300);
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Slack added to every outcome bound. Generous on purpose: a real-process
/// test claims *what* happens; *how soon* is claimed by the paused-time unit
/// tests and measured by the benchmarks, never by a wall clock here.
pub const SLACK: Duration = Duration::from_secs(20);

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The demo server example, built by `cargo test` alongside the tests.
pub fn demo_server() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_mcpmon"));
    let path = bin
        .parent()
        .expect("target dir")
        .join("examples")
        .join("demo-server");
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test` so examples are built",
        path.display()
    );
    path
}

pub fn everything_bin() -> PathBuf {
    let p = repo().join("tests/node/node_modules/.bin/mcp-server-everything");
    assert!(p.exists(), "{} missing: run .ci/setup", p.display());
    p
}

pub fn python(era: &str) -> PathBuf {
    let p = repo().join(format!("tests/python/.venv-{era}/bin/python"));
    assert!(p.exists(), "{} missing: run .ci/setup", p.display());
    p
}

pub fn python_server() -> PathBuf {
    repo().join("tests/python/server.py")
}

/// The tests' HTTP client. mcpmon closes keep-alive connections idle for
/// its 5 s header deadline; dropping idle connections sooner on this side
/// keeps a request from racing that close.
pub fn test_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .expect("client")
}

/// A self-signed server certificate for 127.0.0.1 in `dir`: (cert, key).
/// `leaf` marks it as an end-entity certificate, so a client can trust it
/// directly as its root.
pub fn self_signed_cert(dir: &Path, leaf: bool) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let mut cmd = std::process::Command::new("openssl");
    cmd.args([
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
    ])
    .args([
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    ]);
    if leaf {
        cmd.args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .args(["-addext", "extendedKeyUsage=serverAuth"]);
    }
    let out = cmd
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a client certificate it signed, in `dir`: (`ca.pem`, the
/// client's certificate and key in one PEM, as TLS clients take them).
pub fn client_cert(dir: &Path) -> (PathBuf, Vec<u8>) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=prometheus",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
        ],
    );
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .expect("write");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "client.ext",
            "-out",
            "client.pem",
        ],
    );
    let mut identity = std::fs::read(dir.join("client.pem")).expect("client cert");
    identity.extend(std::fs::read(dir.join("client.key")).expect("client key"));
    (dir.join("ca.pem"), identity)
}

/// Run a tool to completion: whether it succeeded, and its stdout then stderr.
pub fn run(cmd: &mut std::process::Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Run a tool that must succeed; its stdout then stderr.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let (ok, text) = run(cmd);
    assert!(ok, "{cmd:?} failed:\n{text}");
    text
}

/// Run a tool that must succeed; its stdout alone (what some versions
/// warn on stderr is shown only when it fails).
pub fn stdout_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A program on PATH; panics naming the setup step when it is missing.
pub fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| {
            p.to_str()?
                .split(':')
                .map(|d| Path::new(d).join(name))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| panic!("{name} not found: run .ci/setup"))
}

/// A unique marker to find a test's own processes by their environment.
pub fn marker(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// mcpmon running in-process on 127.0.0.1:0.
pub struct Monitor {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), mcpmon::RunError>>>,
    _dir: tempfile::TempDir,
}

impl Monitor {
    /// Start on a config text (paths in it should be absolute).
    pub async fn start(yaml: &str) -> Monitor {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("fleet.yaml");
        std::fs::write(&path, yaml).expect("write config");
        let config =
            mcpmon::config::load(&path).unwrap_or_else(|e| panic!("bad test config:\n{e}"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(mcpmon::run(config, listener, async move {
            let _ = rx.await;
        }));
        let http = test_client();
        Monitor {
            addr,
            http,
            stop: Some(tx),
            task: Some(task),
            _dir: dir,
        }
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("http://{}{path}", self.addr))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let code = r.status().as_u16();
        (code, r.text().await.expect("body"))
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let (code, body) = self.get(path).await;
        let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        (code, v)
    }

    pub async fn server(&self, id: &str) -> (u16, Value) {
        self.get_json(&format!("/health/servers/{id}")).await
    }

    pub async fn metrics(&self) -> String {
        self.get("/metrics").await.1
    }

    /// Poll until the server reads `status`; returns its JSON and how long it took.
    pub async fn wait_status(&self, id: &str, status: &str, within: Duration) -> (Value, Duration) {
        let start = Instant::now();
        let mut last = Value::Null;
        while start.elapsed() < within {
            let (_, v) = self.server(id).await;
            if v["status"] == status {
                return (v, start.elapsed());
            }
            last = v;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "{id} did not read {status} within {within:?}; last seen:\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default()
        );
    }

    /// Poll until `/-/ready` answers 200.
    pub async fn wait_ready(&self, within: Duration) {
        let start = Instant::now();
        while start.elapsed() < within {
            if self.get("/-/ready").await.0 == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("mcpmon not ready within {within:?}");
    }

    /// Stop and wait for a clean return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let r = tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("mcpmon stops within 20s")
                .expect("mcpmon task panicked");
            r.expect("mcpmon returned an error");
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Value of the first sample whose line starts with `series` (name and labels).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Processes whose environment holds `MCPMON_TEST_MARKER=<marker>`.
pub fn pids_with_marker(marker: &str) -> Vec<i32> {
    let needle = format!("MCPMON_TEST_MARKER={marker}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) && !is_zombie(pid) {
            out.push(pid);
        }
    }
    out.sort();
    out
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Wait until some process carries the marker; returns their pids.
pub async fn wait_pids(marker: &str, within: Duration) -> Vec<i32> {
    let start = Instant::now();
    while start.elapsed() < within {
        let p = pids_with_marker(marker);
        if !p.is_empty() {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no process with marker {marker} within {within:?}");
}

pub fn kill(pids: &[i32], signal: i32) {
    for &pid in pids {
        // SAFETY: plain syscall on a pid we found.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// A server process the test starts itself (HTTP servers).
pub struct Spawned {
    pub child: tokio::process::Child,
    pub url: String,
    pub port: u16,
}

impl Spawned {
    pub async fn kill(&mut self) {
        if let Some(pid) = self.child.id() {
            // Kill the whole group: wrappers such as npx must not survive.
            unsafe {
                libc::killpg(pid as i32, libc::SIGKILL);
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            unsafe {
                libc::killpg(pid as i32, libc::SIGKILL);
            }
        }
    }
}

/// Start the demo server over HTTP; `port` 0 picks one (read from its stdout).
pub async fn demo_http(args: &[&str], port: u16) -> Spawned {
    let mut cmd = tokio::process::Command::new(demo_server());
    cmd.args([
        "--transport",
        "http",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .args(args)
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .process_group(0)
    .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn demo-server");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("demo-server prints its address within 10s")
        .expect("read")
        .expect("a line");
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("port in url");
    Spawned { child, url, port }
}

/// A port that was free a moment ago, for third-party servers that cannot
/// report the port they bound.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Start a third-party HTTP server and wait until its port accepts connections.
pub async fn third_party_http(
    program: &Path,
    args: &[&str],
    envs: &[(&str, String)],
    port: u16,
) -> Spawned {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Spawned {
                child,
                url: format!("http://127.0.0.1:{port}/mcp"),
                port,
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} did not listen on {port} within 20s", program.display());
}

/// What mcpmon holds: descriptors, direct children, resident memory.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub fds: usize,
    pub children: usize,
    pub rss_kib: u64,
}

pub fn held(pid: i32) -> Held {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|_| ())
        .ok()
        .map_or(0, |_| count_children(pid));
    Held {
        fds,
        children,
        rss_kib,
    }
}

fn count_children(pid: i32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .map(|c| c.split_whitespace().count())
        .sum()
}

/// The real `mcpmon` binary, started on 127.0.0.1:0 with JSON logs that the
/// test can read.
pub struct Binary {
    pub child: std::process::Child,
    pub addr: String,
    pub logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub http: reqwest::Client,
}

impl Binary {
    pub async fn start(config: &Path, extra: &[&str]) -> Binary {
        Self::start_with_env(config, extra, &[]).await
    }

    pub async fn start_with_env(config: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Binary {
        Self::launch(&[], config, extra, envs, "json").await
    }

    /// Started with text logs (as a terminal shows them), not JSON.
    pub async fn start_text(config: &Path, extra: &[&str]) -> Binary {
        Self::launch(&[], config, extra, &[], "text").await
    }

    /// Started by `wrapper` (a program and its arguments, mcpmon's command
    /// line appended), e.g. `unshare … --fork` to be PID 1 of a namespace.
    pub async fn start_under(wrapper: &[&str], config: &Path, extra: &[&str]) -> Binary {
        Self::launch(wrapper, config, extra, &[], "json").await
    }

    async fn launch(
        wrapper: &[&str],
        config: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
        log_format: &str,
    ) -> Binary {
        use std::io::BufRead;
        let bin = env!("CARGO_BIN_EXE_mcpmon");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = std::process::Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => std::process::Command::new(bin),
        };
        let mut child = cmd
            .envs(envs.iter().copied())
            .arg("--config.file")
            .arg(config)
            .args([
                "--web.listen-address",
                "127.0.0.1:0",
                "--log.format",
                log_format,
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcpmon");
        let stderr = child.stderr.take().expect("stderr");
        let logs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let address = match serde_json::from_str::<Value>(&line) {
                    Ok(v) => (v["fields"]["message"] == "listening")
                        .then(|| v["fields"]["address"].as_str().map(str::to_owned))
                        .flatten(),
                    // A text line: `… listening address=127.0.0.1:PORT tls=false`.
                    Err(_) => line
                        .contains("listening")
                        .then(|| line.split("address=").nth(1))
                        .flatten()
                        .and_then(|rest| rest.split_whitespace().next())
                        .map(str::to_owned),
                };
                if let Some(a) = address {
                    let _ = tx.send(a);
                }
                sink.lock().expect("logs").push(line);
            }
        });
        let addr = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(15)))
            .await
            .expect("join")
            .unwrap_or_else(|_| panic!("mcpmon never logged its address"));
        Binary {
            child,
            addr,
            logs,
            http: test_client(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        self.request(reqwest::Method::GET, path).await
    }

    pub async fn post(&self, path: &str) -> (u16, String) {
        self.request(reqwest::Method::POST, path).await
    }

    async fn request(&self, method: reqwest::Method, path: &str) -> (u16, String) {
        let r = self
            .http
            .request(method.clone(), format!("http://{}{path}", self.addr))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    pub async fn server(&self, id: &str) -> (u16, Value) {
        let (code, body) = self.get(&format!("/health/servers/{id}")).await;
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    pub async fn wait_status(&self, id: &str, status: &str, within: Duration) -> Value {
        let start = Instant::now();
        let mut last = Value::Null;
        while start.elapsed() < within {
            let (_, v) = self.server(id).await;
            if v["status"] == status {
                return v;
            }
            last = v;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{id} not {status} within {within:?}: {last}");
    }

    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Wait for exit, bounded; returns the status.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return s;
            }
            assert!(
                start.elapsed() < within,
                "mcpmon did not exit within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn log_text(&self) -> String {
        self.logs.lock().expect("logs").join("\n")
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
        let port = free_port();
        let child = std::process::Command::new(which("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn prometheus");
        let p = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
            _dir: dir,
        };
        let start = Instant::now();
        loop {
            if let Ok(r) = p.http.get(format!("{}/-/ready", p.base)).send().await
                && r.status() == 200
            {
                return p;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus not ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

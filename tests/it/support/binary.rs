//! The real `mcpmon` binary, started with JSON (or text) logs the test reads.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::*;

/// The real `mcpmon` binary, started on 127.0.0.1:0 with JSON logs that the
/// test can read.
pub struct Binary {
    pub child: std::process::Child,
    pub addr: String,
    pub logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub http: reqwest::Client,
    _turn: Option<Turn>,
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
        let turn = turn().await;
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
            _turn: turn,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        kill(&[self.pid()], sig);
    }

    /// Wait for exit, bounded; returns the status.
    pub async fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        eventually("mcpmon exiting", within, async || {
            match self.child.try_wait().expect("wait") {
                Some(status) => Ok(status),
                None => Err("still running"),
            }
        })
        .await
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

/// The binary as a command to run to its end (`check-config`, `probe`,
/// `import`).
pub fn mcpmon() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_mcpmon"))
}

/// Run `cmd` to its end: its exit code (-1 for a signal), stdout, stderr.
pub fn outcome(cmd: &mut std::process::Command) -> (i32, String, String) {
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

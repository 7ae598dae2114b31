//! stdio server processes: spawn in their own process group, forward stderr
//! to the log (bounded and rate-limited, at the server's `stderr_log_level`:
//! debug by default, since the spec says stderr is no sign of error and SDKs
//! log every request there), keep its last lines (a child's last words name
//! why it could not start), notice exit, and shut down the way
//! the MCP spec says (close stdin, wait, SIGTERM, wait, SIGKILL), signalling
//! the whole group so wrappers such as `npx`, `uv run` or `sh -c` leave no
//! orphan behind.

// The kernel calls here (a pre-exec prctl and killpg of the child's group have no safe std form); every
// unsafe block says why it is sound.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use crate::config::{LogLevel, ServerSpec, TransportSpec};
use crate::redact::Scrubber;

/// Longest stderr line logged; the rest of a longer line is dropped.
const MAX_STDERR_LINE: usize = 4096;
/// stderr lines logged per second per server, with this burst.
const STDERR_LINES_PER_SEC: f64 = 20.0;
const STDERR_BURST: f64 = 100.0;
/// stderr lines kept as a child's last words, and their most bytes.
const LAST_WORDS_LINES: usize = 3;
const LAST_WORDS_BYTES: usize = 400;
/// How long an exit waits for the last of stderr to be read.
const LAST_WORDS_WAIT: Duration = Duration::from_millis(250);

/// How a child process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Exit code, if it exited normally.
    pub code: Option<i32>,
    /// Signal number, if it was killed by one.
    pub signal: Option<i32>,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exited with code {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => f.write_str("exited"),
        }
    }
}

impl From<ExitStatus> for Exit {
    fn from(s: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        Exit {
            code: s.code(),
            signal: s.signal(),
        }
    }
}

/// A running stdio server process.
#[derive(Debug)]
pub struct Child {
    pid: u32,
    exited: watch::Receiver<Option<Exit>>,
    stderr: Arc<Tail>,
}

/// The last lines a child wrote to stderr (scrubbed and defused), and
/// whether its stderr has ended.
#[derive(Debug, Default)]
struct Tail {
    lines: Mutex<VecDeque<String>>,
    ended: watch::Sender<bool>,
    /// Lines it has written so far: a starting child's sign of life.
    said: Arc<AtomicU64>,
}

impl Tail {
    fn push(&self, line: String) {
        if line.trim().is_empty() {
            return;
        }
        self.said.fetch_add(1, Ordering::Relaxed);
        let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() == LAST_WORDS_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn words(&self) -> Option<String> {
        let lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.is_empty() {
            return None;
        }
        let joined: Vec<&str> = lines.iter().map(String::as_str).collect();
        Some(crate::config::defuse(&joined.join(" | "), LAST_WORDS_BYTES))
    }
}

/// A spawned child plus the pipes the MCP transport uses.
pub struct Spawned {
    /// The process.
    pub child: Child,
    /// Its stdout (server → mcpmon).
    pub stdout: ChildStdout,
    /// Its stdin (mcpmon → server).
    pub stdin: ChildStdin,
}

/// Variables of mcpmon's environment every child gets: what programs need
/// to find themselves, their caches and their locale. Nothing else passes
/// unless a server names it in `inherit_env`: mcpmon's environment holds the
/// secrets of every server, and a child is third-party code.
pub const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
];

/// The child's environment: the allowlist and `inherit` taken from
/// `parent`, then the server's own `env`, which wins.
pub fn child_env<'a>(
    parent: impl Fn(&str) -> Option<std::ffi::OsString>,
    inherit: &'a [String],
    own: &'a [(String, crate::config::Secret)],
) -> Vec<(String, std::ffi::OsString)> {
    let mut out: Vec<(String, std::ffi::OsString)> = Vec::new();
    let names = ENV_ALLOWLIST
        .iter()
        .copied()
        .chain(inherit.iter().map(String::as_str));
    for name in names {
        if let Some(v) = parent(name)
            && !out.iter().any(|(k, _)| k == name)
        {
            out.push((name.to_owned(), v));
        }
    }
    for (k, v) in own {
        out.retain(|(n, _)| n != k);
        out.push((k.clone(), v.expose().into()));
    }
    out
}

/// Spawn the configured command in its own process group, with a cleared
/// environment (see [`ENV_ALLOWLIST`]).
/// Spawn the stdio server `server` describes; its stderr is logged at its
/// `stderr_log_level`, scrubbed of its secrets.
pub fn spawn(server: &ServerSpec) -> std::io::Result<Spawned> {
    let server_id = server.id.as_str();
    let TransportSpec::Stdio {
        command,
        args,
        env,
        inherit_env,
        cwd,
    } = &server.transport
    else {
        return Err(std::io::Error::other("not a stdio server"));
    };
    let mut cmd = Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(child_env(|n| std::env::var_os(n), inherit_env, env))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    // SAFETY: prctl is async-signal-safe and touches only the new process.
    // If mcpmon dies (even by SIGKILL) the kernel kills the direct child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("child has no pid"))?;
    let (Some(stdout), Some(stdin), Some(stderr)) =
        (child.stdout.take(), child.stdin.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("child pipes missing"));
    };
    let (tx, exited) = watch::channel(None);
    let id = server_id.to_owned();
    tokio::spawn(async move {
        let exit = match child.wait().await {
            Ok(status) => Exit::from(status),
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        };
        // Whatever the leader did, nothing of its group may outlive it.
        signal_group(pid, libc::SIGKILL);
        tracing::debug!(server = %id, pid, %exit, "child process ended");
        let _ = tx.send(Some(exit));
    });
    let tail = Arc::new(Tail::default());
    tokio::spawn(forward_stderr(
        server_id.to_owned(),
        stderr,
        server.scrubber.clone(),
        server.settings.stderr_log_level,
        tail.clone(),
    ));
    Ok(Spawned {
        child: Child {
            pid,
            exited,
            stderr: tail,
        },
        stdout,
        stdin,
    })
}

impl Child {
    /// The process id (also the process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The count of lines it has written to stderr, as it grows.
    pub fn said(&self) -> Arc<AtomicU64> {
        self.stderr.said.clone()
    }

    /// How it ended, if it has.
    pub fn exit(&self) -> Option<Exit> {
        *self.exited.borrow()
    }

    /// Its last lines on stderr, joined and bounded, once stderr has been
    /// read to its end (waiting at most a moment for that).
    pub async fn last_words(&self) -> Option<String> {
        let mut ended = self.stderr.ended.subscribe();
        let _ = tokio::time::timeout(LAST_WORDS_WAIT, ended.wait_for(|e| *e)).await;
        self.stderr.words()
    }

    /// How it ended, with its last words when it left any:
    /// `exited with code 1; stderr: «…»`.
    pub async fn epitaph(&self) -> String {
        let exit = self.exited().await;
        match self.last_words().await {
            Some(words) => format!("{exit}; stderr: «{words}»"),
            None => exit.to_string(),
        }
    }

    /// Resolves when the process has exited.
    pub async fn exited(&self) -> Exit {
        let mut rx = self.exited.clone();
        let exit = match rx.wait_for(Option::is_some).await {
            Ok(v) => *v,
            Err(_) => None,
        };
        match exit {
            Some(exit) => exit,
            // The waiter task is gone only if the runtime is shutting down.
            None => std::future::pending().await,
        }
    }

    /// The spec's shutdown sequence after stdin has been closed by the caller:
    /// wait, SIGTERM the group, wait, SIGKILL the group. Bounded by `3 * grace`.
    pub async fn shutdown(&self, grace: Duration) -> Exit {
        if let Ok(exit) = tokio::time::timeout(grace, self.exited()).await {
            return exit;
        }
        signal_group(self.pid, libc::SIGTERM);
        if let Ok(exit) = tokio::time::timeout(grace, self.exited()).await {
            return exit;
        }
        signal_group(self.pid, libc::SIGKILL);
        match tokio::time::timeout(grace, self.exited()).await {
            Ok(exit) => exit,
            Err(_) => Exit {
                code: None,
                signal: Some(libc::SIGKILL),
            },
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // A session dropped without `shutdown` (task aborted) still leaves no orphan.
        if self.exit().is_none() {
            signal_group(self.pid, libc::SIGKILL);
        }
    }
}

fn signal_group(pid: u32, signal: i32) {
    let Ok(pgid) = i32::try_from(pid) else { return };
    // SAFETY: plain syscall; ESRCH (group already gone) is fine.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// Log stderr lines tagged with the server id, bounded in length and rate.
/// stderr is always drained, even when lines are dropped: a child blocked on a
/// full stderr pipe would look hung.
async fn forward_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    scrubber: Arc<Scrubber>,
    level: LogLevel,
    tail: Arc<Tail>,
) {
    use tokio::io::AsyncReadExt;
    let mut limiter = RateLimit::new(level);
    let mut line: Vec<u8> = Vec::new();
    let mut overlong = false;
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stderr.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                let text = String::from_utf8_lossy(&line);
                let text = crate::config::defuse(&scrubber.scrub(&text), MAX_STDERR_LINE);
                if limiter.allow(&server) {
                    let cut = if overlong { " (truncated)" } else { "" };
                    log(level, &server, &format!("{text}{cut}"));
                }
                tail.push(text);
                line.clear();
                overlong = false;
            } else if line.len() < MAX_STDERR_LINE {
                line.push(b);
            } else {
                overlong = true;
            }
        }
    }
    if !line.is_empty() {
        tail.push(crate::config::defuse(
            &scrubber.scrub(&String::from_utf8_lossy(&line)),
            MAX_STDERR_LINE,
        ));
    }
    limiter.flush(&server);
    tail.ended.send_replace(true);
}

/// One stderr line, at the server's level.
fn log(level: LogLevel, server: &str, text: &str) {
    match level {
        LogLevel::Off => {}
        LogLevel::Debug => tracing::debug!(target: "mcpmon::stderr", server = %server, "{text}"),
        LogLevel::Info => tracing::info!(target: "mcpmon::stderr", server = %server, "{text}"),
        LogLevel::Warn => tracing::warn!(target: "mcpmon::stderr", server = %server, "{text}"),
    }
}

/// A token bucket that counts what it refuses and reports it once allowed again.
struct RateLimit {
    tokens: f64,
    last: Instant,
    dropped: u64,
    level: LogLevel,
}

impl RateLimit {
    fn new(level: LogLevel) -> Self {
        RateLimit {
            tokens: STDERR_BURST,
            last: Instant::now(),
            dropped: 0,
            level,
        }
    }

    fn allow(&mut self, server: &str) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens
            + now.duration_since(self.last).as_secs_f64() * STDERR_LINES_PER_SEC)
            .min(STDERR_BURST);
        self.last = now;
        if self.tokens < 1.0 {
            self.dropped += 1;
            return false;
        }
        self.tokens -= 1.0;
        self.flush(server);
        true
    }

    fn flush(&mut self, server: &str) {
        if self.dropped > 0 {
            // Told at the lines' own level: a server whose stderr is not
            // worth logging is not worth a warning about dropping it.
            let dropped = self.dropped;
            match self.level {
                LogLevel::Off => {}
                LogLevel::Debug => {
                    tracing::debug!(server = %server, dropped, "stderr lines dropped by rate limit")
                }
                LogLevel::Info | LogLevel::Warn => {
                    tracing::warn!(server = %server, dropped, "stderr lines dropped by rate limit")
                }
            }
            self.dropped = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_environment_is_the_allowlist_plus_what_the_server_names() {
        let parent = |n: &str| {
            ["PATH", "HOME", "OTHER_TOKEN", "PROXY_URL"]
                .contains(&n)
                .then(|| std::ffi::OsString::from(format!("parent-{n}")))
        };
        let own = vec![(
            "HOME".to_owned(),
            crate::config::Secret::new("/srv/mine".to_owned()),
        )];
        let env = child_env(parent, &["PROXY_URL".to_owned()], &own);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "PROXY_URL", "HOME"]);
        assert_eq!(env[2].1, "/srv/mine", "the server's own env wins");
        assert!(!names.contains(&"OTHER_TOKEN"));
    }
}

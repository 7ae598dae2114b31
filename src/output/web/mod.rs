//! mcpmon's own web server, HTTP/1.1, built to stay up while clients misbehave:
//! - a deadline on reading request headers (hyper's; idle keep-alive
//!   connections end at it too) and on writing each response
//!   ([`WriteDeadline`]), so a client that stops reading frees its slot;
//! - a cap on connections in all and per client address, so one client
//!   cannot take every slot and starve the orchestrator's `/-/healthy`;
//! - TLS, mTLS, security headers and basic auth from a `--web.config.file`
//!   ([`config`]), loaded again on SIGHUP and whenever one of its
//!   files changes: a rotated certificate is served without a restart, and a
//!   broken new file keeps the running one;
//! - an optional allowlist of `Host` names against DNS rebinding.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

mod auth;
pub mod config;
mod server;

pub(crate) use auth::parse_basic;
use auth::{Auth, Verdict};
use server::TlsRefusals;
pub use server::WriteDeadline;

/// How long a client may take to send its request headers, and how long an
/// idle keep-alive connection is kept.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing a response may take by default; a client that reads
/// slower than this loses the connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 512;
/// Most connections one client address may hold; more are closed at once.
/// A quarter of all slots: room for a proxy or a burst of scrapes, and three
/// quarters left for everyone else.
pub const MAX_PER_CLIENT: usize = MAX_CONNECTIONS / 4;
/// Files are looked at for changes at most this often, and only when a
/// connection arrives (no timer runs while nobody connects).
const RELOAD_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Why the web config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// Unreadable, invalid, or naming unusable certificates.
    #[error("{path}: {message}")]
    Invalid {
        /// The web config file.
        path: PathBuf,
        /// What is wrong (with line and column from the parser).
        message: String,
    },
    /// A reload would turn TLS on or off, which needs a restart.
    #[error("{path}: turning TLS on or off needs a restart; kept the running web config")]
    TlsToggle {
        /// The web config file.
        path: PathBuf,
    },
}

/// What connections are served with right now.
#[derive(Default)]
struct Current {
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Arc<Auth>,
    headers: HeaderMap,
    /// The files it was loaded from, with what they looked like then.
    seen: Vec<(PathBuf, Option<Stamp>)>,
}

/// What a file looked like: enough to notice a rewrite or a swapped symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode: m.ino(),
    })
}

struct Shared {
    path: Option<PathBuf>,
    current: RwLock<Arc<Current>>,
    /// When files were last looked at, and the stamps of the last attempt
    /// that failed (so a broken file is reported once, not per connection).
    checked: Mutex<(Option<Instant>, Vec<Option<Stamp>>)>,
    allowed_hosts: Vec<String>,
    write_timeout: Duration,
    per_client: Mutex<HashMap<IpAddr, usize>>,
    tls_refusals: Arc<TlsRefusals>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            path: None,
            current: RwLock::default(),
            checked: Mutex::default(),
            allowed_hosts: Vec::new(),
            write_timeout: WRITE_TIMEOUT,
            per_client: Mutex::default(),
            tls_refusals: Arc::default(),
        }
    }
}

/// The web server's settings; cheap to clone, shared by every connection.
#[derive(Clone, Default)]
pub struct Web {
    shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Web {
    /// Load and check a web config file; relative paths are resolved
    /// against its directory.
    pub fn load(path: &Path) -> Result<Web, WebConfigError> {
        let current = load_current(path)?;
        Ok(Web {
            shared: Arc::new(Shared {
                path: Some(path.to_owned()),
                current: RwLock::new(Arc::new(current)),
                ..Shared::default()
            }),
        })
    }

    /// The same settings, answering only requests whose `Host` is one of
    /// `hosts` (names or addresses, without port). Empty allows any.
    pub fn with_limits(self, allowed_hosts: Vec<String>, write_timeout: Duration) -> Web {
        let current = self.current();
        Web {
            shared: Arc::new(Shared {
                path: self.shared.path.clone(),
                current: RwLock::new(current),
                allowed_hosts: allowed_hosts
                    .into_iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
                write_timeout,
                ..Shared::default()
            }),
        }
    }

    fn current(&self) -> Arc<Current> {
        self.shared
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether TLS is on.
    pub fn tls(&self) -> bool {
        self.current().tls.is_some()
    }

    /// Load the web config file again (SIGHUP). On any error the running
    /// config stays. Returns whether a file was loaded.
    pub fn reload(&self) -> Result<bool, WebConfigError> {
        let Some(path) = &self.shared.path else {
            return Ok(false);
        };
        let next = load_current(path)?;
        if next.tls.is_some() != self.tls() {
            return Err(WebConfigError::TlsToggle {
                path: path.to_owned(),
            });
        }
        *self
            .shared
            .current
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        Ok(true)
    }

    /// Load again if one of the files changed since they were loaded;
    /// looked at no more than once per [`RELOAD_CHECK_EVERY`], off the
    /// runtime's workers.
    fn refresh_if_changed(&self) {
        if self.shared.path.is_none() {
            return;
        }
        {
            let mut checked = lock(&self.shared.checked);
            let now = Instant::now();
            if checked.0.is_some_and(|at| now < at + RELOAD_CHECK_EVERY) {
                return;
            }
            checked.0 = Some(now);
        }
        let web = self.clone();
        tokio::task::spawn_blocking(move || {
            let current = web.current();
            let now: Vec<Option<Stamp>> = current.seen.iter().map(|(p, _)| stamp(p)).collect();
            if current.seen.iter().map(|(_, s)| *s).eq(now.iter().copied()) {
                return;
            }
            if lock(&web.shared.checked).1 == now {
                return; // This version already failed and was reported.
            }
            match web.reload() {
                Ok(_) => tracing::info!("web config files changed: loaded them again"),
                Err(e) => {
                    tracing::error!(error = %e, "web config files changed but cannot be used");
                    lock(&web.shared.checked).1 = now;
                }
            }
        });
    }

    /// Wrap the router with what every response goes through: the `Host`
    /// allowlist, basic auth when users are configured, and the configured
    /// security headers. All read the current web config per request.
    pub fn protect(&self, router: Router) -> Router {
        let web = self.clone();
        router.layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let web = web.clone();
                async move {
                    let current = web.current();
                    let mut response = web.answer(&current, req, next).await;
                    for (name, value) in &current.headers {
                        response.headers_mut().insert(name, value.clone());
                    }
                    response
                }
            },
        ))
    }

    async fn answer(&self, current: &Current, req: Request, next: Next) -> Response {
        // Probes of liveness and readiness reveal nothing and change
        // nothing; orchestrators call them by pod address, whatever the list.
        let open = matches!(req.uri().path(), "/-/healthy" | "/-/ready");
        if !open && !self.host_allowed(req.headers()) {
            return (StatusCode::FORBIDDEN, "Host not allowed\n").into_response();
        }
        if current.auth.is_empty() {
            return next.run(req).await;
        }
        let credentials = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match current.auth.check(credentials).await {
            Verdict::Allowed => next.run(req).await,
            Verdict::Busy => (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, "1")],
                "Too many authentication attempts at once\n",
            )
                .into_response(),
            Verdict::Denied => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Basic realm=\"mcpmon\"")],
                "Unauthorized\n",
            )
                .into_response(),
        }
    }

    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        let allowed = &self.shared.allowed_hosts;
        if allowed.is_empty() {
            return true;
        }
        let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
            return false;
        };
        let name = host_name(host).to_ascii_lowercase();
        allowed.contains(&name)
    }

    /// Take a slot for a connection from `ip`, or `None` when that address
    /// already holds [`MAX_PER_CLIENT`].
    fn admit(&self, ip: IpAddr) -> Option<ClientSlot> {
        let ip = ip.to_canonical();
        let mut held = lock(&self.shared.per_client);
        let n = held.entry(ip).or_default();
        if *n >= MAX_PER_CLIENT {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            web: self.clone(),
            ip,
        })
    }
}

fn load_current(path: &Path) -> Result<Current, WebConfigError> {
    let loaded = config::load(path).map_err(|message| WebConfigError::Invalid {
        path: path.to_owned(),
        message,
    })?;
    Ok(Current {
        tls: loaded.tls,
        auth: Arc::new(Auth::new(loaded.users)),
        headers: loaded.headers,
        seen: loaded
            .files
            .into_iter()
            .map(|f| {
                let s = stamp(&f);
                (f, s)
            })
            .collect(),
    })
}

/// The name part of a `Host` header: `name:port`, `[v6]:port`, or bare.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// A connection counted against its client's cap until dropped.
struct ClientSlot {
    web: Web,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = lock(&self.web.shared.per_client);
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_stops_fails_the_write_at_the_deadline() {
        let (near, far) = tokio::io::duplex(1024);
        let mut out = WriteDeadline::new(near, Duration::from_secs(30));
        let big = vec![b'x'; 64 * 1024];
        let started = Instant::now();
        // Bounded: a deadline that never fires fails here instead of hanging.
        let err = tokio::time::timeout(Duration::from_secs(60), out.write_all(&big))
            .await
            .expect("the deadline ends the write")
            .expect_err("nobody reads");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        drop(far);
        // A reader keeping up is never cut off, however long the connection.
        let (near, mut far2) = tokio::io::duplex(1024);
        let mut out = WriteDeadline::new(near, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            far2.read_to_end(&mut sink).await.map(|_| sink.len())
        });
        for _ in 0..10 {
            out.write_all(&big).await.expect("read as written");
            out.flush().await.expect("flush");
            tokio::time::sleep(Duration::from_secs(25)).await;
        }
        out.shutdown().await.expect("shutdown");
        drop(out);
        assert_eq!(reader.await.expect("join").expect("read"), 10 * big.len());
    }

    #[test]
    fn host_names_without_ports() {
        assert_eq!(host_name("mcpmon.example:9850"), "mcpmon.example");
        assert_eq!(host_name("localhost"), "localhost");
        assert_eq!(host_name("[::1]:9850"), "::1");
        assert_eq!(host_name("127.0.0.1:80"), "127.0.0.1");
    }

    #[tokio::test]
    async fn one_client_address_holds_at_most_its_share() {
        let web = Web::default();
        let a: IpAddr = "127.0.0.2".parse().expect("ip");
        let b: IpAddr = "::ffff:127.0.0.3".parse().expect("ip");
        let held: Vec<_> = (0..MAX_PER_CLIENT)
            .map(|_| web.admit(a).expect("under the cap"))
            .collect();
        assert!(web.admit(a).is_none(), "over the cap");
        assert!(web.admit(b).is_some(), "other clients are not affected");
        drop(held);
        assert!(web.admit(a).is_some(), "slots come back");
        assert!(
            lock(&web.shared.per_client).len() <= 1,
            "released addresses are forgotten"
        );
    }
}

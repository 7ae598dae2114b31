//! mcpmon's own web server: HTTP/1.1 with a deadline on reading request
//! headers (slow clients are cut off), a cap on concurrent connections, and
//! optional TLS and basic auth from a `--web.config.file` in the format
//! Prometheus exporters use:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt
//!   key_file: server.key
//! basic_auth_users:
//!   prometheus: $2y$10$...   # bcrypt hash
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Most connections served at once; more wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 512;

/// A parsed `--web.config.file`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// TLS for mcpmon's endpoints.
    #[serde(default)]
    pub tls_server_config: Option<TlsFiles>,
    /// User name to bcrypt hash.
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
}

/// Certificate and key files (PEM).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert_file: PathBuf,
    /// Private key.
    pub key_file: PathBuf,
}

/// Why the web config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// Unreadable or invalid YAML.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong (with line and column from the parser).
        message: String,
    },
    /// Certificate or key unusable.
    #[error("{path}: TLS: {message}")]
    Tls {
        /// The web config file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// What the server needs: a TLS acceptor and the users, if configured.
#[derive(Clone, Default)]
pub struct Web {
    tls: Option<tokio_rustls::TlsAcceptor>,
    users: Arc<super::auth::Auth>,
}

impl Web {
    /// Load and check a web config file; relative paths are resolved
    /// against its directory.
    pub fn load(path: &Path) -> Result<Web, WebConfigError> {
        let invalid = |message: String| WebConfigError::Invalid {
            path: path.to_owned(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
        let cfg: WebConfig = if text.trim().is_empty() {
            WebConfig::default()
        } else {
            yaml_serde::from_str(&text).map_err(|e| invalid(e.to_string()))?
        };
        for (user, hash) in &cfg.basic_auth_users {
            if !hash.starts_with("$2") {
                return Err(invalid(format!(
                    "basic_auth_users.{user}: the password must be a bcrypt hash"
                )));
            }
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let tls = cfg
            .tls_server_config
            .map(|t| acceptor(&base.join(&t.cert_file), &base.join(&t.key_file)))
            .transpose()
            .map_err(|message| WebConfigError::Tls {
                path: path.to_owned(),
                message,
            })?;
        Ok(Web {
            tls,
            users: Arc::new(super::auth::Auth::new(cfg.basic_auth_users)),
        })
    }

    /// Whether TLS is on.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Wrap the router with basic auth when users are configured.
    pub fn protect(&self, router: Router) -> Router {
        if self.users.is_empty() {
            return router;
        }
        let users = self.users.clone();
        router.layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let users = users.clone();
                let credentials = req
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                async move {
                    match users.check(credentials.as_deref()).await {
                        super::auth::Verdict::Allowed => next.run(req).await,
                        super::auth::Verdict::Busy => (
                            StatusCode::TOO_MANY_REQUESTS,
                            [(header::RETRY_AFTER, "1")],
                            "Too many authentication attempts at once\n",
                        )
                            .into_response(),
                        super::auth::Verdict::Denied => (
                            StatusCode::UNAUTHORIZED,
                            [(header::WWW_AUTHENTICATE, "Basic realm=\"mcpmon\"")],
                            "Unauthorized\n",
                        )
                            .into_response(),
                    }
                }
            },
        ))
    }

    /// Serve until `cancel`, then let open requests finish.
    pub async fn serve(
        &self,
        listener: TcpListener,
        router: Router,
        cancel: CancellationToken,
    ) -> std::io::Result<()> {
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let connections = tokio_util::task::TaskTracker::new();
        loop {
            let permit = tokio::select! {
                _ = cancel.cancelled() => break,
                p = permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let (stream, _) = tokio::select! {
                _ = cancel.cancelled() => break,
                r = listener.accept() => match r {
                    Ok(s) => s,
                    // Out of descriptors and the like: back off briefly, keep serving.
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let service = TowerToHyperService::new(router.clone());
            let tls = self.tls.clone();
            let cancel = cancel.clone();
            connections.spawn(async move {
                let _permit = permit;
                match tls {
                    Some(acceptor) => {
                        let accepted =
                            tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream))
                                .await;
                        if let Ok(Ok(tls_stream)) = accepted {
                            serve_connection(TokioIo::new(tls_stream), service, cancel).await;
                        }
                    }
                    None => serve_connection(TokioIo::new(stream), service, cancel).await,
                }
            });
        }
        connections.close();
        // Open requests get a moment to finish; idle keep-alive connections close.
        let _ = tokio::time::timeout(Duration::from_secs(5), connections.wait()).await;
        Ok(())
    }
}

async fn serve_connection<I, S>(io: I, service: S, cancel: CancellationToken)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<hyper::Request<hyper::body::Incoming>, Response = Response>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate found", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

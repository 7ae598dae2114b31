//! TLS to HTTPS servers, in Prometheus's `tls_config` shape (a CA file, a
//! client certificate, the name to verify, whether to verify at all, the
//! least version), and the certificates they present: every handshake's
//! chain is read for its earliest `notAfter`, which the supervisor
//! reports as `mcpmon_server_tls_cert_expiry_timestamp_seconds`, and the
//! version the handshake spoke is read from which signature it verified.
//!
//! Each HTTPS server gets a client of its own built here, so what one
//! server presents is never credited to another.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::config::{TlsSpec, TlsVersion};

/// The certificate chain a server presented, as a monitor needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The earliest `notAfter` in the presented chain.
    pub not_after: SystemTime,
    /// The TLS version of the handshake (`TLS 1.2`, `TLS 1.3`), once its
    /// signature was verified.
    pub version: Option<&'static str>,
}

/// What a client's handshakes saw, shared with the verifier.
#[derive(Clone, Debug, Default)]
pub struct Seen(Arc<Mutex<Option<PeerCertificate>>>);

impl Seen {
    /// The latest chain seen, if any handshake got that far.
    pub fn latest(&self) -> Option<PeerCertificate> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, chain: &[&CertificateDer<'_>]) {
        let earliest = chain
            .iter()
            .filter_map(|der| {
                let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
                let secs = cert.validity().not_after.timestamp();
                Some(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
            })
            .min();
        if let Some(not_after) = earliest {
            let version = None;
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(PeerCertificate { not_after, version });
        }
    }

    /// The handshake whose chain was recorded last speaks `version`.
    fn spoke(&self, version: &'static str) {
        if let Some(c) = self.0.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            c.version = Some(version);
        }
    }
}

/// A TLS setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{path}: {why}")]
    File {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
    /// rustls or reqwest refused the settings.
    #[error("TLS settings: {0}")]
    Settings(String),
}

fn file(path: &std::path::Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

fn pem_error(path: &std::path::Path, what: &str) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        why: format!("no {what} in it (PEM expected)"),
    }
}

/// The system's certificate authorities, read once per process: a fleet
/// of thousands of HTTPS servers would otherwise parse the same bundle
/// thousands of times. Like any client's, a bundle changed on disk is read
/// at the next start. Unreadable certificates are skipped, as every
/// client does.
fn system_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: std::sync::OnceLock<Arc<rustls::RootCertStore>> = std::sync::OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
            Arc::new(roots)
        })
        .clone()
}

/// The rustls config for `spec`, with a verifier that records into `seen`.
pub fn client_config(spec: &TlsSpec, seen: Seen) -> Result<rustls::ClientConfig, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let settings = |e: rustls::Error| TlsError::Settings(e.to_string());
    let roots = match &spec.ca_file {
        Some(ca) => {
            let pem = file(ca)?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|_| pem_error(ca, "certificate"))?;
                roots.add(cert).map_err(settings)?;
            }
            if roots.is_empty() {
                return Err(pem_error(ca, "certificate"));
            }
            Arc::new(roots)
        }
        None => system_roots(),
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let inner =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsError::Settings(e.to_string()))?;
    let server_name = match &spec.server_name {
        Some(n) => Some(
            ServerName::try_from(n.clone())
                .map_err(|e| TlsError::Settings(format!("server_name {n:?}: {e}")))?,
        ),
        None => None,
    };
    let verifier = Arc::new(Recording {
        inner,
        server_name,
        insecure: spec.insecure_skip_verify,
        seen,
    });
    let versions: &[&rustls::SupportedProtocolVersion] = match spec.min_version {
        Some(TlsVersion::Tls13) => &[&rustls::version::TLS13],
        Some(TlsVersion::Tls12) | None => &[&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(settings)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&spec.cert_file, &spec.key_file) {
        (Some(cert), Some(key)) => {
            let pem = file(cert)?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|_| pem_error(cert, "certificate"))?;
            let key_pem = file(key)?;
            let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|_| pem_error(key, "private key"))?;
            builder
                .with_client_auth_cert(certs, key_der)
                .map_err(settings)?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Clients of its own for an HTTPS server, the handshake's from `base`
/// (the shared client's settings), and what their handshakes see.
pub fn client(
    spec: &TlsSpec,
    base: reqwest::ClientBuilder,
) -> Result<(super::Http, Seen), TlsError> {
    let seen = Seen::default();
    let config = client_config(spec, seen.clone())?;
    let wire = super::wire::Wire::new(&config);
    let client = base
        .tls_backend_preconfigured(config)
        .build()
        .map_err(|e| TlsError::Settings(e.to_string()))?;
    Ok((super::Http { client, wire }, seen))
}

/// The standard verifier, with the chain recorded first (even one it then
/// refuses: an expired certificate's date is news), the configured name
/// verified instead of the URL's, or no verification at all.
#[derive(Debug)]
struct Recording {
    inner: Arc<rustls::client::WebPkiServerVerifier>,
    server_name: Option<ServerName<'static>>,
    insecure: bool,
    seen: Seen,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chain: Vec<&CertificateDer<'_>> =
            std::iter::once(end_entity).chain(intermediates).collect();
        self.seen.record(&chain);
        if self.insecure {
            return Ok(ServerCertVerified::assertion());
        }
        let name = self.server_name.as_ref().unwrap_or(server_name);
        self.inner
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // rustls asks for the signature check of the version it speaks.
        self.seen.spoke("TLS 1.2");
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.seen.spoke("TLS 1.3");
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_roots_are_read_once_per_process() {
        let spec = TlsSpec::default();
        let a = system_roots();
        assert!(client_config(&spec, Seen::default()).is_ok());
        assert!(client_config(&spec, Seen::default()).is_ok());
        assert!(Arc::ptr_eq(&a, &system_roots()));
    }
}

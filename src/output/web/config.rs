//! The `--web.config.file`, in the format of the Prometheus exporter toolkit,
//! so a `web-config.yml` written for node_exporter or Prometheus works here:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # or cert: <PEM text>
//!   key_file: server.key           # or key: <PEM text>
//!   client_ca_file: clients.crt    # or client_ca: <PEM text>
//!   client_auth_type: RequireAndVerifyClientCert
//!   min_version: TLS12
//!   max_version: TLS13
//!   cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]
//!   curve_preferences: [X25519, CurveP256]
//! http_server_config:
//!   headers:
//!     Strict-Transport-Security: max-age=31536000
//! basic_auth_users:
//!   prometheus: $2y$10$...   # bcrypt hash
//! ```
//!
//! Where mcpmon differs, it refuses rather than quietly weakening: TLS 1.0
//! and 1.1 are never offered, and the client auth types that accept a
//! certificate without verifying it (`RequestClientCert`,
//! `RequireAnyClientCert`) are rejected with the verifying alternative named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// A parsed `--web.config.file`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// TLS for mcpmon's endpoints.
    #[serde(default)]
    pub tls_server_config: Option<TlsServerConfig>,
    /// Response headers and HTTP options.
    #[serde(default)]
    pub http_server_config: HttpServerConfig,
    /// User name to bcrypt hash.
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
}

/// The exporter toolkit's `tls_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// Certificate chain file (PEM).
    pub cert_file: Option<PathBuf>,
    /// Private key file (PEM).
    pub key_file: Option<PathBuf>,
    /// Certificate chain, inline PEM.
    pub cert: Option<String>,
    /// Private key, inline PEM.
    pub key: Option<String>,
    /// CAs that sign client certificates (PEM file).
    pub client_ca_file: Option<PathBuf>,
    /// CAs that sign client certificates, inline PEM.
    pub client_ca: Option<String>,
    /// Go's `tls.ClientAuthType` names.
    #[serde(default)]
    pub client_auth_type: ClientAuth,
    /// Lowest TLS version offered (default TLS12).
    pub min_version: Option<TlsVersion>,
    /// Highest TLS version offered (default TLS13).
    pub max_version: Option<TlsVersion>,
    /// TLS 1.2 cipher suites, by their IANA names, in preference order.
    #[serde(default)]
    pub cipher_suites: Vec<String>,
    /// Key exchange groups, by Go's names, in preference order.
    #[serde(default)]
    pub curve_preferences: Vec<String>,
    /// Accepted for compatibility: the server's order is always preferred.
    pub prefer_server_cipher_suites: Option<bool>,
}

/// Client certificate policy, named as in Go's `crypto/tls`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    NoClientCert,
    /// Asked for, not required, not verified: refused by mcpmon.
    RequestClientCert,
    /// Required, not verified: refused by mcpmon.
    #[serde(alias = "RequireClientCert")]
    RequireAnyClientCert,
    /// Verified against the client CAs when one is sent.
    VerifyClientCertIfGiven,
    /// Required and verified against the client CAs.
    RequireAndVerifyClientCert,
}

/// A TLS protocol version, named as in the exporter toolkit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum TlsVersion {
    /// TLS 1.0 (never offered).
    TLS10,
    /// TLS 1.1 (never offered).
    TLS11,
    /// TLS 1.2.
    TLS12,
    /// TLS 1.3.
    TLS13,
}

/// The exporter toolkit's `http_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    /// Accepted for compatibility; mcpmon serves HTTP/1.1.
    pub http2: Option<bool>,
    /// Security headers added to every response.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The headers a web config may set, with the values allowed where the
/// header is an enumeration: the exporter toolkit's list, so a config
/// accepted here is accepted there.
const ALLOWED_HEADERS: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// Go's curve names and the TLS named groups they mean.
const CURVES: &[(&str, rustls::NamedGroup)] = &[
    ("X25519", rustls::NamedGroup::X25519),
    ("CurveP256", rustls::NamedGroup::secp256r1),
    ("CurveP384", rustls::NamedGroup::secp384r1),
    ("CurveP521", rustls::NamedGroup::secp521r1),
    ("X25519MLKEM768", rustls::NamedGroup::X25519MLKEM768),
];

/// Everything a web config file yields, ready to serve with.
pub struct Loaded {
    /// The TLS acceptor, when TLS is on.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// User name to bcrypt hash.
    pub users: BTreeMap<String, String>,
    /// Headers added to every response.
    pub headers: HeaderMap,
    /// Every file the config reads (itself included): a change to any of
    /// them is a reason to load it again.
    pub files: Vec<PathBuf>,
}

/// Read, check and build a web config; relative paths are resolved against
/// the file's directory. The error is one line, without secrets.
pub fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let cfg: WebConfig = if text.trim().is_empty() {
        WebConfig::default()
    } else {
        yaml_serde::from_str(&text).map_err(|e| e.to_string())?
    };
    for (user, hash) in &cfg.basic_auth_users {
        if hash.parse::<bcrypt::HashParts>().is_err() {
            return Err(format!(
                "basic_auth_users.{user}: the password must be a bcrypt hash"
            ));
        }
    }
    let headers = headers(&cfg.http_server_config.headers)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut files = vec![path.to_owned()];
    let tls = match &cfg.tls_server_config {
        None => None,
        Some(t) => Some(tls(t, base, &mut files).map_err(|e| format!("TLS: {e}"))?),
    };
    Ok(Loaded {
        tls,
        users: cfg.basic_auth_users,
        headers,
        files,
    })
}

fn headers(wanted: &BTreeMap<String, String>) -> Result<HeaderMap, String> {
    let mut out = HeaderMap::new();
    for (name, value) in wanted {
        let Some((_, allowed)) = ALLOWED_HEADERS.iter().find(|(n, _)| n == name) else {
            return Err(format!(
                "http_server_config.headers: {name:?} can not be configured"
            ));
        };
        if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
            return Err(format!(
                "http_server_config.headers.{name}: expected one of {allowed:?}, got {value:?}"
            ));
        }
        let v = HeaderValue::from_str(value)
            .map_err(|_| format!("http_server_config.headers.{name}: not a header value"))?;
        // Allowed names are valid; HeaderName lower-cases them.
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("http_server_config.headers: {name:?} is not a header name"))?;
        out.insert(name, v);
    }
    Ok(out)
}

/// PEM from a file (recorded in `files`) or inline text.
fn pem(
    file: &Option<PathBuf>,
    inline: &Option<String>,
    what: &str,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<Option<Vec<u8>>, String> {
    match (file, inline) {
        (Some(_), Some(_)) => Err(format!("set {what}_file or {what}, not both")),
        (Some(f), None) => {
            let f = base.join(f);
            let bytes = std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?;
            files.push(f);
            Ok(Some(bytes))
        }
        (None, Some(text)) => Ok(Some(text.clone().into_bytes())),
        (None, None) => Ok(None),
    }
}

fn tls(
    t: &TlsServerConfig,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<tokio_rustls::TlsAcceptor, String> {
    let cert = pem(&t.cert_file, &t.cert, "cert", base, files)?
        .ok_or("missing one of cert or cert_file")?;
    let key =
        pem(&t.key_file, &t.key, "key", base, files)?.ok_or("missing one of key or key_file")?;
    let client_ca = pem(&t.client_ca_file, &t.client_ca, "client_ca", base, files)?;

    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate found".into());
    }
    // The key's own parse error could quote key material; say only what failed.
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| "no usable private key found")?;

    let provider = Arc::new(provider(t)?);
    let versions = versions(t.min_version, t.max_version)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?;
    let builder = match (t.client_auth_type, client_ca) {
        (ClientAuth::NoClientCert, None) => builder.with_no_client_auth(),
        (ClientAuth::NoClientCert, Some(_)) => {
            return Err("client CAs are configured without a client_auth_type".into());
        }
        (ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert, _) => {
            return Err(format!(
                "client_auth_type {:?} accepts certificates without verifying them, which \
                 mcpmon does not do; use VerifyClientCertIfGiven or RequireAndVerifyClientCert \
                 with client_ca_file",
                t.client_auth_type
            ));
        }
        (_, None) => {
            return Err(format!(
                "client_auth_type {:?} needs client_ca_file or client_ca",
                t.client_auth_type
            ));
        }
        (mode, Some(ca)) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&ca) {
                let c = c.map_err(|e| format!("client CA: {e}"))?;
                roots.add(c).map_err(|e| format!("client CA: {e}"))?;
            }
            if roots.is_empty() {
                return Err("no client CA certificate found".into());
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let verifier = if mode == ClientAuth::VerifyClientCertIfGiven {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The TLS versions between `min` and `max` that rustls offers (1.2, 1.3).
fn versions(
    min: Option<TlsVersion>,
    max: Option<TlsVersion>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let min = min.unwrap_or(TlsVersion::TLS12);
    let max = max.unwrap_or(TlsVersion::TLS13);
    let out: Vec<_> = [
        (TlsVersion::TLS12, &rustls::version::TLS12),
        (TlsVersion::TLS13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| (min..=max).contains(v))
    .map(|(_, p)| p)
    .collect();
    if out.is_empty() {
        return Err(format!(
            "no TLS version between min_version {min:?} and max_version {max:?} is offered \
             (mcpmon offers TLS12 and TLS13)"
        ));
    }
    Ok(out)
}

/// The crypto provider narrowed to the configured suites and curves. As in
/// Go, `cipher_suites` governs TLS 1.2 only; TLS 1.3 suites stay on.
fn provider(t: &TlsServerConfig) -> Result<CryptoProvider, String> {
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    if !t.cipher_suites.is_empty() {
        let all = p.cipher_suites.clone();
        let name = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite());
        for wanted in &t.cipher_suites {
            if !all.iter().any(|s| &name(s) == wanted) {
                let known: Vec<String> = all.iter().map(name).collect();
                return Err(format!(
                    "cipher suite {wanted:?} is unknown or not supported; supported: {}",
                    known.join(", ")
                ));
            }
        }
        let tls13 = all
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13);
        let chosen = t
            .cipher_suites
            .iter()
            .filter_map(|w| all.iter().find(|s| &name(s) == w))
            .filter(|s| s.version() == &rustls::version::TLS12);
        p.cipher_suites = chosen.chain(tls13).copied().collect();
    }
    if !t.curve_preferences.is_empty() {
        let all = rustls::crypto::aws_lc_rs::ALL_KX_GROUPS;
        let mut chosen = Vec::new();
        for wanted in &t.curve_preferences {
            let group = CURVES
                .iter()
                .find(|(n, _)| n == wanted)
                .and_then(|(_, g)| all.iter().find(|k| k.name() == *g))
                .ok_or_else(|| {
                    format!(
                        "curve {wanted:?} is unknown or not supported; supported: X25519, \
                         CurveP256, CurveP384, X25519MLKEM768"
                    )
                })?;
            chosen.push(*group);
        }
        p.kx_groups = chosen;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> TlsServerConfig {
        yaml_serde::from_str(yaml).expect("yaml")
    }

    #[test]
    fn versions_between_bounds_and_never_below_tls12() {
        assert_eq!(versions(None, None).expect("default").len(), 2);
        assert_eq!(
            versions(Some(TlsVersion::TLS10), Some(TlsVersion::TLS12)).expect("1.2"),
            vec![&rustls::version::TLS12]
        );
        assert_eq!(
            versions(Some(TlsVersion::TLS13), None).expect("1.3"),
            vec![&rustls::version::TLS13]
        );
        assert!(versions(None, Some(TlsVersion::TLS11)).is_err());
        assert!(versions(Some(TlsVersion::TLS13), Some(TlsVersion::TLS12)).is_err());
    }

    #[test]
    fn cipher_suites_narrow_tls12_and_keep_tls13() {
        let p = provider(&parse(
            "cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]",
        ))
        .expect("provider");
        let tls12: Vec<String> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(
            tls12,
            [
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
            ]
        );
        assert!(
            p.cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS13)
        );
        let e = provider(&parse("cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]")).unwrap_err();
        assert!(e.contains("TLS_RSA_WITH_RC4_128_SHA"), "{e}");
    }

    #[test]
    fn curves_by_go_names_in_order() {
        let p = provider(&parse("curve_preferences: [CurveP384, X25519]")).expect("provider");
        let names: Vec<_> = p.kx_groups.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [rustls::NamedGroup::secp384r1, rustls::NamedGroup::X25519]
        );
        assert!(provider(&parse("curve_preferences: [CurveP521]")).is_err());
        assert!(provider(&parse("curve_preferences: [P256]")).is_err());
    }

    #[test]
    fn only_the_toolkits_headers_and_values() {
        let ok: BTreeMap<String, String> = [
            ("X-Frame-Options", "deny"),
            ("Strict-Transport-Security", "max-age=31536000"),
        ]
        .into_iter()
        .map(|(a, b)| (a.into(), b.into()))
        .collect();
        let h = headers(&ok).expect("headers");
        assert_eq!(h["x-frame-options"], "deny");
        let bad = |k: &str, v: &str| headers(&[(k.into(), v.into())].into_iter().collect());
        assert!(bad("X-Frame-Options", "allow-from x").is_err());
        assert!(bad("Set-Cookie", "a=b").is_err());
        assert!(bad("Content-Security-Policy", "a\nb").is_err());
    }

    #[test]
    fn client_auth_names_as_in_go() {
        assert_eq!(
            parse("client_auth_type: RequireClientCert").client_auth_type,
            ClientAuth::RequireAnyClientCert
        );
        assert_eq!(parse("{}").client_auth_type, ClientAuth::NoClientCert);
        assert!(yaml_serde::from_str::<TlsServerConfig>("client_auth_type: Always").is_err());
    }
}

//! HTTPS servers behind a real TLS terminator (HAProxy) with certificates
//! of known dates: a private CA and a server name configured with `tls:`,
//! the expiry series equal to the certificate's `notAfter`, and an expired
//! certificate read as unhealthy with its own reason; the version each
//! handshake spoke.

use std::time::Duration;

use crate::support::*;

/// 2035-12-31T23:59:59Z and 2020-01-02T00:00:00Z, as Unix time.
const GOOD_NOT_AFTER: f64 = 2_082_758_399.0;
const OLD_NOT_AFTER: f64 = 1_577_923_200.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_of_known_dates_are_reported_and_an_expired_one_is_unhealthy() {
    require!(program("haproxy"), program("openssl"));
    let dir = tempfile::tempdir().expect("tempdir");
    // Issued for a name the URL does not have: `server_name` is needed.
    let (good, good_pem) = dated_cert(
        dir.path(),
        "good",
        "DNS:mcp.internal",
        "20200101000000Z",
        "20351231235959Z",
    );
    let (old, old_pem) = dated_cert(
        dir.path(),
        "old",
        "IP:127.0.0.1",
        "20200101000000Z",
        "20200102000000Z",
    );
    let upstream = demo_http(&["--name", "behind-tls"], 0).await;
    // The held session (pings on mcpmon's own connections) is the legacy
    // era's.
    let legacy = demo_http(&["--name", "behind-h2", "--era", "legacy"], 0).await;
    let (good_port, old_port, v12_port) = (free_port(), free_port(), free_port());
    let h2_port = free_port();
    let cfg = dir.path().join("haproxy.cfg");
    let stats = dir.path().join("haproxy.sock");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 256\n  stats socket {}\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
             frontend good\n  bind 127.0.0.1:{good_port} ssl crt {}\n  default_backend be\n\
             frontend old\n  bind 127.0.0.1:{old_port} ssl crt {}\n  default_backend be\n\
             frontend v12\n  bind 127.0.0.1:{v12_port} ssl crt {} ssl-max-ver TLSv1.2\n  default_backend be\n\
             frontend h2\n  bind 127.0.0.1:{h2_port} ssl crt {} alpn h2,http/1.1\n  default_backend legacy\n\
             backend be\n  server s1 127.0.0.1:{}\n\
             backend legacy\n  server s1 127.0.0.1:{}\n",
            stats.display(),
            good_pem.display(),
            old_pem.display(),
            good_pem.display(),
            good_pem.display(),
            upstream.port,
            legacy.port
        ),
    )
    .expect("write");
    let _proxy = third_party_http(
        &which("haproxy"),
        &["-f", cfg.to_str().expect("utf-8"), "-db"],
        &[],
        good_port,
    )
    .await;
    let fleet = dir.path().join("fleet.yaml");
    std::fs::write(
        &fleet,
        format!(
            "{FAST_GLOBAL}servers:\n  \
             - {{id: private-ca, transport: http, url: 'https://127.0.0.1:{good_port}/mcp', tls: {{ca_file: {good:?}, server_name: mcp.internal, min_version: TLS12}}}}\n  \
             - {{id: expired, transport: http, url: 'https://127.0.0.1:{old_port}/mcp', tls: {{ca_file: {old:?}}}}}\n  \
             - {{id: wrong-name, transport: http, url: 'https://127.0.0.1:{good_port}/mcp', tls: {{ca_file: {good:?}}}}}\n  \
             - {{id: tls12, transport: http, url: 'https://127.0.0.1:{v12_port}/mcp', tls: {{ca_file: {good:?}, server_name: mcp.internal}}}}\n  \
             - {{id: http2, transport: http, url: 'https://127.0.0.1:{h2_port}/mcp', tls: {{ca_file: {good:?}, server_name: mcp.internal}}}}\n",
        ),
    )
    .expect("write");
    let mon = Binary::start(&fleet, &[]).await;
    let within = Duration::from_secs(30);
    mon.wait_status("private-ca", "healthy", within).await;
    mon.wait_status("tls12", "healthy", within).await;
    // A frontend whose ALPN offers HTTP/2 carries the held session's pings
    // on one multiplexed connection: they keep succeeding on it, and
    // HAProxy counts each as an HTTP/2 request, none as HTTP/1.
    mon.wait_status("http2", "healthy", within).await;
    let ping_count = async || {
        let m = mon.metrics().await;
        let failed = m.contains(r#"mcpmon_probe_failures_total{probe="ping",server="http2""#);
        assert!(!failed, "{m}");
        metric(&m, r#"mcpmon_probes_total{probe="ping",server="http2"}"#).unwrap_or(0.0) as u64
    };
    let h2 = async || haproxy_frontend_stat(&stats, "h2", "h2_headers_rcvd").await;
    let h1 = async || haproxy_frontend_stat(&stats, "h2", "h1_total_streams").await;
    // HAProxy's counts before mcpmon's and after them: a ping that falls
    // between the two reads is then counted by HAProxy's side only.
    let (h2_before, h1_before, pings_before) = (h2().await, h1().await, ping_count().await);
    eventually("three pings more", within, async || {
        let pings = ping_count().await;
        if pings >= pings_before + 3 {
            Ok(())
        } else {
            Err(format!("{pings} pings so far"))
        }
    })
    .await;
    let (pings, h2_after, h1_after) = (ping_count().await, h2().await, h1().await);
    assert!(
        h2_after - h2_before >= pings - pings_before,
        "{} pings, {} HTTP/2 requests",
        pings - pings_before,
        h2_after - h2_before
    );
    assert_eq!(h1_after, h1_before, "no request over HTTP/1 meanwhile");
    let (v, _) = mon.wait_status("expired", "unhealthy", within).await;
    assert_eq!(v["reason"], "tls_failed", "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or("")
            .to_lowercase()
            .contains("expired"),
        "{v}"
    );
    let (v, _) = mon.wait_status("wrong-name", "unhealthy", within).await;
    assert_eq!(
        v["reason"], "tls_failed",
        "the certificate is not for 127.0.0.1: {v}"
    );
    let (_, m) = mon.get("/metrics").await;
    let expiry = |id: &str| {
        metric(
            &m,
            &format!(r#"mcpmon_server_tls_cert_expiry_timestamp_seconds{{server="{id}"}}"#),
        )
    };
    assert_eq!(expiry("private-ca"), Some(GOOD_NOT_AFTER), "{m}");
    assert_eq!(
        expiry("expired"),
        Some(OLD_NOT_AFTER),
        "a refused certificate's date is reported too: {m}"
    );
    assert_eq!(expiry("wrong-name"), Some(GOOD_NOT_AFTER), "{m}");
    let spoke = |id: &str, version: &str| {
        metric(
            &m,
            &format!(r#"mcpmon_server_tls_version_info{{server="{id}",version="{version}"}}"#),
        )
    };
    assert_eq!(spoke("private-ca", "TLS 1.3"), Some(1.0), "{m}");
    assert_eq!(spoke("tls12", "TLS 1.2"), Some(1.0), "{m}");
    assert!(
        !m.contains(r#"mcpmon_server_tls_version_info{server="expired""#),
        "a refused handshake spoke no version: {m}"
    );
}

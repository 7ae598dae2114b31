//! Servers reached through a real forward proxy (tinyproxy, with proxy
//! credentials required) named by `HTTP_PROXY` and `HTTPS_PROXY`: plain
//! HTTP forwarded in absolute form, HTTPS through a CONNECT tunnel to a
//! TLS terminator (HAProxy). The held sessions' pings go through the proxy
//! too: with the proxy gone, both servers fall, though they still run.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_go_through_the_proxy_the_environment_names() {
    require!(program("tinyproxy"), program("haproxy"), program("openssl"));
    let dir = tempfile::tempdir().expect("tempdir");
    let upstream = demo_http(&["--name", "behind-proxy", "--era", "legacy"], 0).await;
    let (cert, pem) = dated_cert(
        dir.path(),
        "tls",
        "IP:127.0.0.1",
        "20200101000000Z",
        "20351231235959Z",
    );
    let tls_port = free_port();
    let haproxy_cfg = dir.path().join("haproxy.cfg");
    std::fs::write(
        &haproxy_cfg,
        format!(
            "global\n  maxconn 256\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
             frontend tls\n  bind 127.0.0.1:{tls_port} ssl crt {}\n  default_backend be\n\
             backend be\n  server s1 127.0.0.1:{}\n",
            pem.display(),
            upstream.port
        ),
    )
    .expect("write");
    let _tls = third_party_http(
        &which("haproxy"),
        &["-f", haproxy_cfg.to_str().expect("utf-8"), "-db"],
        &[],
        tls_port,
    )
    .await;
    // No ConnectPort line: CONNECT to any port. Credentials required, so a
    // request that reached it without them would be refused (407).
    let proxy_port = free_port();
    let log = dir.path().join("tinyproxy.log");
    let proxy_cfg = dir.path().join("tinyproxy.conf");
    std::fs::write(
        &proxy_cfg,
        format!(
            "User root\nGroup root\nPort {proxy_port}\nListen 127.0.0.1\nTimeout 60\n\
             LogFile \"{}\"\nLogLevel Info\nMaxClients 64\nAllow 127.0.0.1\nBasicAuth mon s3cret\n",
            log.display()
        ),
    )
    .expect("write");
    let mut proxy = third_party_http(
        &which("tinyproxy"),
        &["-d", "-c", proxy_cfg.to_str().expect("utf-8")],
        &[],
        proxy_port,
    )
    .await;
    let fleet = dir.path().join("fleet.yaml");
    std::fs::write(
        &fleet,
        format!(
            "{FAST_GLOBAL}servers:\n  \
             - {{id: plain, transport: http, url: 'http://127.0.0.1:{}/mcp'}}\n  \
             - {{id: tunnelled, transport: http, url: 'https://127.0.0.1:{tls_port}/mcp', tls: {{ca_file: {cert:?}}}}}\n",
            upstream.port
        ),
    )
    .expect("write");
    let via = format!("http://mon:s3cret@127.0.0.1:{proxy_port}");
    let mon = Binary::start_with_env(
        &fleet,
        &[],
        &[
            ("HTTP_PROXY", via.as_str()),
            ("HTTPS_PROXY", via.as_str()),
            ("NO_PROXY", ""),
        ],
    )
    .await;
    let within = Duration::from_secs(30);
    for id in ["plain", "tunnelled"] {
        mon.wait_status(id, "healthy", within).await;
    }
    // Pings answered after the handshake: the held sessions' own requests.
    let pings = |m: &str, id: &str| {
        metric(
            m,
            &format!(r#"mcpmon_probes_total{{probe="ping",server="{id}"}}"#),
        )
        .unwrap_or(0.0)
    };
    eventually("three pings each", within, async || {
        let (_, m) = mon.get("/metrics").await;
        let (p, t) = (pings(&m, "plain"), pings(&m, "tunnelled"));
        if p >= 3.0 && t >= 3.0 {
            Ok(())
        } else {
            Err(format!("plain {p}, tunnelled {t}"))
        }
    })
    .await;
    let logged = std::fs::read_to_string(&log).expect("proxy log");
    let forwarded = format!("POST http://127.0.0.1:{}/mcp", upstream.port);
    assert!(
        logged.matches(forwarded.as_str()).count() >= 3,
        "plain HTTP is forwarded in absolute form:\n{logged}"
    );
    assert!(
        logged.contains(&format!("CONNECT 127.0.0.1:{tls_port}")),
        "HTTPS goes through a tunnel:\n{logged}"
    );
    // The servers still run; only the way to them is gone.
    proxy.kill().await;
    // tinyproxy logs no refusal: a request without the proxy's credentials
    // leaves its "Request" line and nothing after it, where an accepted one
    // goes on to look for an upstream. Read once the proxy is gone, so no
    // line is half-way; one request may have been cut between its two lines.
    let logged = std::fs::read_to_string(&log).expect("proxy log");
    let (asked, accepted) = (
        logged.matches("]: Request (").count(),
        logged.matches("]: No upstream proxy for").count(),
    );
    assert!(
        asked >= 6 && asked - accepted <= 1,
        "every request carried the proxy's credentials ({accepted} of {asked} accepted):\n{logged}"
    );
    for id in ["plain", "tunnelled"] {
        mon.wait_status(id, "unhealthy", within).await;
    }
    tokio::net::TcpStream::connect(("127.0.0.1", upstream.port))
        .await
        .expect("the server itself still answers");
}

//! mcpmon's own endpoints, safe by default: TLS and basic auth from
//! `--web.config.file` (the format Prometheus exporters use), slow clients
//! cut off, request bodies bounded, and a bad web config refused at start.

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

fn fleet(dir: &std::path::Path) -> std::path::PathBuf {
    let cfg = dir.join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: one\n    transport: stdio\n    command: {:?}\n",
            demo_server().display()
        ),
    )
    .expect("write");
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_basic_auth_from_a_web_config_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, _key) = self_signed_cert(dir.path(), true);
    let hash = bcrypt::hash("correct horse", 4).expect("bcrypt");
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\nbasic_auth_users:\n  prometheus: {hash:?}\n"),
    )
    .expect("write");
    let mut mon = Binary::start(
        &fleet(dir.path()),
        &["--web.config.file", web.to_str().expect("utf-8")],
    )
    .await;

    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&cert).expect("cert")).expect("pem"),
        )
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let url = format!("https://{}/metrics", mon.addr);
    let fetch = |user: Option<(&'static str, &'static str)>| {
        let mut req = client.get(&url);
        if let Some((u, p)) = user {
            req = req.basic_auth(u, Some(p));
        }
        async move { req.send().await.expect("https") }
    };
    let r = fetch(None).await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("www-authenticate").is_some());
    assert_eq!(fetch(Some(("prometheus", "wrong"))).await.status(), 401);
    assert_eq!(fetch(Some(("nobody", "correct horse"))).await.status(), 401);
    let r = fetch(Some(("prometheus", "correct horse"))).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.expect("body").contains("mcpmon_build_info"));
    // Plain HTTP on the TLS port gets nothing useful.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/metrics", mon.addr))
        .send()
        .await;
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status() != 200));
    // A refused handshake is told in the log, with rustls's reason.
    eventually(
        "a refused TLS client logged",
        Duration::from_secs(10),
        async || {
            let logged = mon.log_text().contains("TLS handshake refused");
            if logged { Ok(()) } else { Err("not yet") }
        },
    )
    .await;
    mon.signal(libc::SIGTERM);
    assert!(mon.wait_exit(Duration::from_secs(15)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_bodies_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mon = Binary::start(&fleet(dir.path()), &["--web.enable-lifecycle"]).await;
    // Slowloris: headers that never finish. The connection is closed at the
    // header deadline (5 s) while other clients are served.
    let mut slow = std::net::TcpStream::connect(&mon.addr).expect("connect");
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .expect("write");
    slow.set_read_timeout(Some(Duration::from_secs(12)))
        .expect("timeout");
    let start = Instant::now();
    assert_eq!(
        mon.get("/-/healthy").await.0,
        200,
        "others are served meanwhile"
    );
    let mut buf = [0u8; 256];
    let n = slow.read(&mut buf).unwrap_or(0);
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(9),
        "slow client held {waited:?}"
    );
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(n == 0 || text.contains("408"), "{text}");

    // A large body is refused before it is read in full. Whether the client
    // gets to read the 413 or finds the connection closed under its write is
    // a race both ways of which are right; what must hold is that mcpmon
    // read at most the limit plus what the kernels buffer, and stays up.
    let body = 4 * 1024 * 1024;
    let sent = post_unread(&mon.addr, "/-/reload", body).await;
    assert!(
        sent.answer.is_empty() || sent.answer.starts_with("HTTP/1.1 413"),
        "neither a 413 nor a closed connection: {:?}",
        sent.answer
    );
    let bound = 64 * 1024 + sent.buffered;
    eprintln!(
        "body: {} of {body} bytes taken, bound {bound}, answer {:?}",
        sent.accepted, sent.answer
    );
    assert!(
        sent.accepted <= bound,
        "mcpmon took {} of {body} body bytes (limit and buffers {bound})",
        sent.accepted
    );
    assert_eq!(mon.get("/-/healthy").await.0, 200, "mcpmon stays up");
}

/// What became of a body sent to a server that should not read it.
struct Unread {
    /// Body bytes the kernel took from the client: what the server read,
    /// plus what sits in the two sockets' buffers.
    accepted: usize,
    /// An upper bound on those buffers: the client's send buffer, the
    /// server's initial receive window and one read buffer of hyper's.
    buffered: usize,
    /// The status line the server answered with, or empty if the
    /// connection was closed first.
    answer: String,
}

/// POST `total` bytes to `path` over a raw socket with a small send buffer,
/// writing until the server closes, resets, or stops reading for 3 s; then
/// read whatever answer arrives (bounded).
async fn post_unread(addr: &str, path: &str, total: usize) -> Unread {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_send_buffer_size(16 * 1024).expect("sndbuf");
    // What the kernel actually gave (it doubles a request).
    let send_buffer = socket.send_buffer_size().expect("sndbuf") as usize;
    let mut stream = socket
        .connect(addr.parse().expect("address"))
        .await
        .expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {total}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("headers");
    let chunk = vec![b'x'; 16 * 1024];
    let mut accepted = 0;
    while accepted < total {
        let n = chunk.len().min(total - accepted);
        match tokio::time::timeout(Duration::from_secs(3), stream.write(&chunk[..n])).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(written)) => accepted += written,
        }
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while answer.len() < 64 * 1024 {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    let rmem_default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse::<usize>().ok())
        .unwrap_or(128 * 1024);
    Unread {
        accepted,
        buffered: send_buffer + rmem_default + 64 * 1024,
        answer: answer.lines().next().unwrap_or("").to_owned(),
    }
}

#[test]
fn a_bad_web_config_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let web = dir.path().join("web.yml");
    // mcpmon's exit code and stderr with the web config as it is now.
    let start = || {
        let out = Command::new(env!("CARGO_BIN_EXE_mcpmon"))
            .args(["--config.file"])
            .arg(fleet(dir.path()))
            .args(["--web.listen-address", "127.0.0.1:0", "--web.config.file"])
            .arg(&web)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    std::fs::write(&web, "basic_auth_users:\n  alice: plaintext\n").expect("write");
    let (code, err) = start();
    assert_eq!(code, Some(2));
    assert!(err.contains("must be a bcrypt hash"), "{err}");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: nope.pem\n  key_file: nope.key\n",
    )
    .expect("write");
    let (code, err) = start();
    assert_eq!(code, Some(2));
    assert!(err.contains("nope.pem"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_tells_no_user_names_and_a_password_flood_harms_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The cost real configs use, so bcrypt dominates each check's time.
    let hash = bcrypt::hash("correct horse", 10).expect("bcrypt");
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: {hash:?}\n")).expect("write");
    let mon = Binary::start(
        &fleet(dir.path()),
        &["--web.config.file", web.to_str().expect("utf-8")],
    )
    .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let base = format!("http://{}", mon.addr);
    let get = |path: &str, user: &str, password: &str| {
        client
            .get(format!("{base}{path}"))
            .basic_auth(user, Some(password))
            .send()
    };

    // An unknown user costs what a wrong password costs: medians of five.
    let median = |user: &'static str| {
        let get = &get;
        async move {
            let mut times = Vec::new();
            for _ in 0..5 {
                let start = Instant::now();
                let r = get("/metrics", user, "wrong").await.expect("request");
                assert_eq!(r.status(), 401);
                times.push(start.elapsed());
            }
            times.sort();
            times[2]
        }
    };
    let known = median("prometheus").await;
    let unknown = median("nobody").await;
    let ratio = known.as_secs_f64() / unknown.as_secs_f64();
    eprintln!("wrong password {known:?}, unknown user {unknown:?}");
    assert!((0.5..=2.0).contains(&ratio), "ratio {ratio:.2}");

    // 100 wrong passwords at once: bcrypt runs in its own few slots, the
    // rest are told to come back (429), and a known scraper still gets in.
    let status = || async {
        let r = get("/health/servers/one", "prometheus", "correct horse")
            .await
            .expect("request");
        r.json::<serde_json::Value>().await.expect("json")
    };
    eventually("healthy", SLACK, async || {
        if status().await["status"] != "healthy" {
            Err("not yet")
        } else {
            Ok(())
        }
    })
    .await;
    let flood: Vec<_> = (0..100)
        .map(|_| get("/metrics", "prometheus", "wrong"))
        .collect();
    let during = async {
        let r = get("/-/healthy", "prometheus", "correct horse")
            .await
            .expect("request");
        r.status().as_u16()
    };
    let (answers, healthy) = tokio::join!(futures::future::join_all(flood), during);
    assert_eq!(healthy, 200, "/-/healthy answers during the flood");
    let codes: Vec<u16> = answers
        .into_iter()
        .map(|r| r.expect("request").status().as_u16())
        .collect();
    assert!(codes.iter().all(|c| *c == 401 || *c == 429), "{codes:?}");
    assert!(codes.contains(&429), "the bcrypt slots filled: {codes:?}");
    let v = status().await;
    let changes = v["events"].as_array().map_or(0, |e| {
        e.iter().filter(|e| e["kind"] == "state_changed").count()
    });
    assert_eq!(v["status"], "healthy", "{v}");
    assert_eq!(changes, 1, "the verdict never moved: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_from_an_exporter_toolkit_web_config_and_certificates_rotate_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first, _) = self_signed_cert(dir.path(), true);
    let first = std::fs::read(first).expect("cert");
    let (_ca, identity) = client_cert(dir.path());
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  \
         client_ca_file: ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n  \
         min_version: TLS12\n  max_version: TLS13\n  \
         cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n  \
         curve_preferences: [X25519, CurveP256]\n\
         http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    .expect("write");
    let mut mon = Binary::start(
        &fleet(dir.path()),
        &["--web.config.file", web.to_str().expect("utf-8")],
    )
    .await;
    let url = format!("https://{}/-/healthy", mon.addr);
    // A client trusting one server certificate, with or without its own;
    // no pooling, so every request is a new handshake.
    let client = |trust: &[u8], with_identity: bool| {
        let mut b = reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(trust).expect("pem")])
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(10));
        if with_identity {
            b = b.identity(reqwest::Identity::from_pem(&identity).expect("identity"));
        }
        b.build().expect("client")
    };
    let anonymous = client(&first, false).get(&url).send().await;
    assert!(
        anonymous.is_err(),
        "served without a client certificate: {anonymous:?}"
    );
    let r = client(&first, true).get(&url).send().await.expect("mTLS");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-frame-options"], "deny");

    // Rotate the server certificate the way cert-manager does: new files
    // renamed into place. New handshakes get it without a restart.
    let next_dir = dir.path().join("next");
    std::fs::create_dir(&next_dir).expect("mkdir");
    let (next_cert, next_key) = self_signed_cert(&next_dir, true);
    let next = std::fs::read(&next_cert).expect("cert");
    std::fs::rename(&next_key, dir.path().join("key.pem")).expect("rename key");
    std::fs::rename(&next_cert, dir.path().join("cert.pem")).expect("rename cert");
    let rotated = client(&next, true);
    eventually(
        "the rotated certificate served",
        Duration::from_secs(30),
        async || match rotated.get(&url).send().await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        },
    )
    .await;
    assert!(
        client(&first, true).get(&url).send().await.is_err(),
        "the old certificate is still served"
    );

    // A broken web config is refused and the running one stays, on SIGHUP
    // as on a file change.
    std::fs::write(&web, "tls_server_config:\n  cert_file: missing.pem\n").expect("write");
    mon.signal(libc::SIGHUP);
    eventually(
        "the bad web config reported",
        Duration::from_secs(30),
        async || {
            let logs = mon.logs.lock().expect("logs");
            let told = logs
                .iter()
                .any(|l| l.contains("web config reload rejected"));
            if told { Ok(()) } else { Err("not yet") }
        },
    )
    .await;
    let r = rotated.get(&url).send().await.expect("still served");
    assert_eq!(r.status(), 200);
    mon.signal(libc::SIGTERM);
    assert!(mon.wait_exit(Duration::from_secs(15)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowed_host_names_are_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mon = Binary::start(
        &fleet(dir.path()),
        &["--web.allowed-hosts", "localhost,mcpmon.internal"],
    )
    .await;
    let port = mon.addr.rsplit(':').next().expect("port").to_owned();
    let get = |path: &str, host: String| {
        mon.http
            .get(format!("http://{}{path}", mon.addr))
            .header("host", host)
            .send()
    };
    // A DNS-rebinding page reaches 127.0.0.1 under its own name.
    for path in ["/metrics", "/health/fleet"] {
        let r = get(path, format!("evil.example:{port}"))
            .await
            .expect("get");
        assert_eq!(r.status(), 403, "{path}");
    }
    for host in [format!("localhost:{port}"), "MCPMON.internal".to_owned()] {
        let r = get("/metrics", host.clone()).await.expect("get");
        assert_eq!(r.status(), 200, "{host}");
    }
    // Liveness and readiness answer whatever the Host (probes use pod IPs).
    let r = get("/-/healthy", format!("10.1.2.3:{port}"))
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_cannot_take_every_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 300 servers nobody answers for make /metrics some 160 KiB, so a few
    // responses fill a connection's buffers: the writes stall at once,
    // rather than after thousands of small scrapes a loaded machine takes
    // a minute to render.
    let cfg = fleet(dir.path());
    let mut yaml = std::fs::read_to_string(&cfg).expect("read");
    for i in 0..300 {
        yaml.push_str(&format!(
            "  - id: absent-{i:03}\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    backoff_initial: 30s\n    backoff_max: 60s\n"
        ));
    }
    std::fs::write(&cfg, yaml).expect("write");
    let mon = Binary::start(&cfg, &["--web.write-timeout", "3s"]).await;
    mon.wait_status("absent-299", "unhealthy", Duration::from_secs(30))
        .await;
    let (_, metrics) = mon.get("/metrics").await;
    assert!(
        metrics.len() > 128 << 10,
        "/metrics is only {} bytes",
        metrics.len()
    );
    let addr: std::net::SocketAddr = mon.addr.parse().expect("addr");
    // 512 clients from one address each pipeline 2000 scrapes and never
    // read: their responses fill the socket buffers and every write stalls.
    let pipelined = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000);
    let mut hogs = Vec::new();
    for _ in 0..512 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        socket
            .bind("127.0.0.2:0".parse().expect("addr"))
            .expect("bind");
        let stream = tokio::time::timeout(Duration::from_secs(10), socket.connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        let _ = stream.try_write(&pipelined);
        hogs.push(stream);
    }
    // Another client is still served at once...
    let r = tokio::time::timeout(Duration::from_secs(20), mon.get("/-/healthy"))
        .await
        .expect("/-/healthy answered while 512 clients hog their connections");
    assert_eq!(r.0, 200);
    // ...and past the write deadline the stalled connections are closed,
    // so even their own address gets in again.
    let same_address = reqwest::Client::builder()
        .local_address(Some("127.0.0.2".parse().expect("ip")))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let start = Instant::now();
    eventually(
        "stalled writers cut off",
        Duration::from_secs(60),
        async || {
            let r = same_address
                .get(format!("http://{}/-/healthy", mon.addr))
                .send()
                .await;
            if r.is_ok_and(|r| r.status() == 200) {
                eprintln!("stalled writers cut off after {:?}", start.elapsed());
                return Ok(());
            }
            Err("stalled writers were never cut off")
        },
    )
    .await;
    drop(hogs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exporter_parity_gzip_telemetry_path_handler_metrics_and_no_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let second = free_port().to_string();
    let second_address = format!("127.0.0.1:{second}");
    let mon = Binary::start(
        &fleet(dir.path()),
        &[
            "--web.telemetry-path",
            "/prom",
            "--web.listen-address",
            &second_address,
        ],
    )
    .await;
    // A second listen address serves the same endpoints.
    let r = reqwest::get(format!("http://{second_address}/-/healthy"))
        .await
        .expect("second address");
    assert_eq!(r.status(), 200);
    let base = format!("http://{}", mon.addr);
    // This client does not decompress: the encoding is seen as sent.
    let raw = reqwest::Client::new();
    let r = raw
        .get(format!("{base}/prom"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let zipped = r.bytes().await.expect("body");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&zipped[..]), &mut text)
        .expect("gunzip");
    assert!(text.contains("mcpmon_build_info"), "{text}");
    assert!(
        zipped.len() * 2 < text.len(),
        "compressed {} of {}",
        zipped.len(),
        text.len()
    );
    // Without asking, plain text.
    let r = raw.get(format!("{base}/prom")).send().await.expect("get");
    assert!(r.headers().get("content-encoding").is_none());
    // The old path is free, and health answers are never cached.
    assert_eq!(mon.get("/metrics").await.0, 404);
    let r = raw
        .get(format!("{base}/health/fleet"))
        .send()
        .await
        .expect("get");
    // A load balancer asks for the verdict only, not 10 000 servers.
    let (_, body) = mon.get("/health/fleet?summary=true").await;
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert!(
        v["summary"]["total"].is_number() && v.get("servers").is_none(),
        "{v}"
    );
    assert_eq!(r.headers()["cache-control"], "no-store");
    // Requests are counted by route, never by raw path. A scrape may be
    // answered by a render up to a second old: wait for a fresh one.
    let m = eventually("404s counted", Duration::from_secs(10), async || {
        let (_, m) = mon.get("/prom").await;
        let counted = metric(
            &m,
            r#"mcpmon_http_requests_total{code="200",handler="/prom"}"#,
        );
        if m.contains(r#"code="404",handler="other""#) && counted.is_some_and(|n| n >= 2.0) {
            return Ok(m);
        }
        Err(m)
    })
    .await;
    assert!(
        !m.contains("handler=\"/metrics\""),
        "raw paths never become labels"
    );
    assert!(
        metric(
            &m,
            r#"mcpmon_http_requests_total{code="404",handler="other"}"#
        )
        .is_some(),
        "{m}"
    );
    assert!(
        metric(
            &m,
            r#"mcpmon_http_requests_total{code="200",handler="/prom"}"#
        )
        .is_some_and(|n| n >= 2.0),
        "{m}"
    );
    assert!(m.contains(r#"mcpmon_http_request_duration_seconds_count{handler="/health/fleet"}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_labels_reach_metrics_json_and_the_status_filter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("fleet.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{FAST_GLOBAL}servers:\n  - id: pay\n    transport: stdio\n    command: {demo:?}\n    \
             labels: {{team: payments, env: prod}}\n  - id: other\n    transport: stdio\n    command: {demo:?}\n",
            demo = demo_server()
        ),
    )
    .expect("write");
    let mon = Binary::start(&cfg, &[]).await;
    // Listening comes before the fleet is published: wait for the servers.
    mon.wait_status("pay", "healthy", Duration::from_secs(20))
        .await;
    mon.wait_status("other", "healthy", Duration::from_secs(20))
        .await;
    let (_, m) = mon.get("/metrics").await;
    assert_eq!(
        metric(
            &m,
            r#"mcpmon_server_labels{label_env="prod",label_team="payments",server="pay"}"#
        ),
        Some(1.0),
        "{m}"
    );
    // A server without labels has the series too, so the alerts' group_left
    // join never drops it.
    assert_eq!(
        metric(&m, r#"mcpmon_server_labels{server="other"}"#),
        Some(1.0),
        "{m}"
    );
    let (_, v) = mon.server("pay").await;
    assert_eq!(
        v["labels"],
        serde_json::json!({"team": "payments", "env": "prod"})
    );
    // The status page filters by label, without JavaScript too.
    let (code, page) = mon.get("/?q=team%3Dpayments").await;
    assert_eq!(code, 200);
    assert!(page.contains(r#"href="/servers/pay""#), "{page}");
    assert!(!page.contains(r#"href="/servers/other""#), "{page}");
}

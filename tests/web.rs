//! mcpmon's own endpoints, safe by default: TLS and basic auth from
//! `--web.config.file` (the format Prometheus exporters use), slow clients
//! cut off, request bodies bounded, and a bad web config refused at start.

mod common;

use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

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
    mon.signal(libc::SIGTERM);
    assert!(mon.wait_exit(Duration::from_secs(15)).success());
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

    // A large body is refused before it is read in full.
    let big = vec![b'x'; 1024 * 1024];
    let r = mon
        .http
        .post(format!("http://{}/-/reload", mon.addr))
        .body(big)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 413);
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
    let start = Instant::now();
    while status().await["status"] != "healthy" {
        assert!(start.elapsed() < SLACK, "never healthy");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

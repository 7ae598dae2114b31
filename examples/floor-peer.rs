//! The floor of the benchmark: the least a Rust program can spend to ping N
//! MCP sessions over loopback HTTP. Raw tokio TCP, one keep-alive HTTP/1.1
//! connection per session, a pre-built ping request per session, answers
//! read by Content-Length with no JSON parsing on the ping path, one task
//! per session on a current-thread runtime. No MCP library.
//!
//! ```text
//! floor-peer http URL_BASE N INTERVAL_S DURATION_S
//! ```
//!
//! Prints one JSON line in the shape of bench/peers/raw-peer.py.

use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

struct Session {
    stream: BufReader<TcpStream>,
    ping: Vec<u8>,
    buf: Vec<u8>,
}

/// One request, its status and its body (read by Content-Length).
async fn exchange(
    stream: &mut BufReader<TcpStream>,
    request: &[u8],
    session: &mut Option<String>,
    body: &mut Vec<u8>,
) -> std::io::Result<u16> {
    stream.get_mut().write_all(request).await?;
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut length = 0usize;
    loop {
        line.clear();
        if stream.read_line(&mut line).await? == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            } else if k.eq_ignore_ascii_case("mcp-session-id") {
                *session = Some(v.trim().to_owned());
            }
        }
    }
    body.resize(length, 0);
    stream.read_exact(body).await?;
    Ok(status)
}

fn request(host: &str, path: &str, session: Option<&str>, body: &str) -> Vec<u8> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(s) = session {
        head.push_str(&format!(
            "Mcp-Session-Id: {s}\r\nMCP-Protocol-Version: 2025-11-25\r\n"
        ));
    }
    head.push_str("\r\n");
    head.push_str(body);
    head.into_bytes()
}

async fn open(host: &str, port: u16, i: usize) -> std::io::Result<Session> {
    let path = format!("/mcp/{i}");
    let mut stream = BufReader::new(TcpStream::connect((host, port)).await?);
    stream.get_mut().set_nodelay(true)?;
    let mut session = None;
    let mut body = Vec::new();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"floor","version":"1"}}}"#;
    exchange(
        &mut stream,
        &request(host, &path, None, init),
        &mut session,
        &mut body,
    )
    .await?;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let note = request(host, &path, session.as_deref(), initialized);
    exchange(&mut stream, &note, &mut session, &mut body).await?;
    // The same id every time: the floor does not even format a number.
    let ping = request(
        host,
        &path,
        session.as_deref(),
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    );
    Ok(Session {
        stream,
        ping,
        buf: body,
    })
}

fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, base, n, interval, duration] = args.as_slice() else {
        return Err("usage: floor-peer http URL_BASE N INTERVAL_S DURATION_S".into());
    };
    if mode != "http" {
        return Err("the floor client speaks HTTP only".into());
    }
    let url = reqwest::Url::parse(base)?;
    let host = url.host_str().ok_or("no host")?.to_owned();
    let port = url.port_or_known_default().ok_or("no port")?;
    let n: usize = n.parse()?;
    let interval = Duration::from_secs_f64(interval.parse()?);
    let duration = Duration::from_secs_f64(duration.parse()?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut sessions = Vec::with_capacity(n);
        for i in 0..n {
            sessions.push(open(&host, port, i).await?);
        }
        let cpu0 = cpu_seconds();
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, mut s) in sessions.into_iter().enumerate() {
            tasks.spawn(async move {
                let mut rtts = Vec::new();
                let mut failures = 0u64;
                let mut none = None;
                tokio::time::sleep(interval.mul_f64(i as f64 / n as f64)).await;
                let mut next = Instant::now();
                while start.elapsed() < duration {
                    let t0 = Instant::now();
                    let ping = std::mem::take(&mut s.ping);
                    let r = tokio::time::timeout(
                        Duration::from_secs(5),
                        exchange(&mut s.stream, &ping, &mut none, &mut s.buf),
                    )
                    .await;
                    s.ping = ping;
                    match r {
                        Ok(Ok(code)) if (200..300).contains(&code) => {
                            rtts.push(t0.elapsed().as_micros() as u64)
                        }
                        _ => failures += 1,
                    }
                    next += interval;
                    tokio::time::sleep_until(next.into()).await;
                }
                (rtts, failures)
            });
        }
        let mut rtts = Vec::new();
        let mut failures = 0;
        while let Some(r) = tasks.join_next().await {
            let (r, f) = r?;
            rtts.extend(r);
            failures += f;
        }
        let cpu = cpu_seconds() - cpu0;
        rtts.sort_unstable();
        let q = |x: f64| {
            rtts.get(((x * rtts.len() as f64) as usize).min(rtts.len().saturating_sub(1)))
                .copied()
        };
        println!(
            "{}",
            serde_json::json!({
                "client": "floor", "cpu_s": cpu, "peak_rss_kib": peak_rss_kib(),
                "pings": rtts.len(), "failures": failures,
                "p50_us": q(0.5), "p99_us": q(0.99),
            })
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(())
}

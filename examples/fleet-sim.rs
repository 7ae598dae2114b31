//! A fleet simulator for benchmarks: one process that serves N independent
//! MCP servers over Streamable HTTP (server `i` at `/mcp/i`, one port), or
//! one minimal MCP server over stdio. It answers `initialize`, `ping`,
//! `server/discover`, `tools/list` and a `health_check` tool with JSON
//! bodies and nothing else, so that it costs far less than the clients it
//! is measured with.
//!
//! ```text
//! fleet-sim --listen 127.0.0.1:0     # prints "listening on http://ADDR"
//! fleet-sim --stdio
//! ```

use std::convert::Infallible;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// The answer to one JSON-RPC message; `None` for notifications.
fn answer(msg: &Value, legacy_only: bool) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let result = match method {
        "initialize" => json!({
            "protocolVersion": msg["params"]["protocolVersion"].as_str().filter(|v| *v != "2026-07-28").unwrap_or("2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fleet-sim", "version": "1"},
        }),
        "ping" => json!({}),
        "server/discover" if !legacy_only => json!({
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fleet-sim", "version": "1"},
        }),
        "tools/list" => {
            json!({"tools": [{"name": "health_check", "inputSchema": {"type": "object"}}]})
        }
        "tools/call" => json!({"content": [{"type": "text", "text": "{\"status\":\"healthy\"}"}]}),
        _ => {
            return Some(
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}}),
            );
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

async fn handle(
    req: Request<hyper::body::Incoming>,
) -> Result<Response<http_body_util::Full<Bytes>>, Infallible> {
    use http_body_util::BodyExt;
    let empty = |code: StatusCode| {
        let mut r = Response::new(http_body_util::Full::new(Bytes::new()));
        *r.status_mut() = code;
        r
    };
    match *req.method() {
        Method::POST => {}
        Method::DELETE => return Ok(empty(StatusCode::OK)),
        // No standalone server-to-client stream.
        _ => return Ok(empty(StatusCode::METHOD_NOT_ALLOWED)),
    }
    let has_session = req.headers().contains_key("mcp-session-id");
    let Ok(body) = req.into_body().collect().await else {
        return Ok(empty(StatusCode::BAD_REQUEST));
    };
    let Ok(msg) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
        return Ok(empty(StatusCode::BAD_REQUEST));
    };
    let Some(reply) = answer(&msg, false) else {
        return Ok(empty(StatusCode::ACCEPTED));
    };
    let mut r = Response::new(http_body_util::Full::new(Bytes::from(reply.to_string())));
    r.headers_mut()
        .insert("content-type", "application/json".parse().expect("static"));
    if !has_session && msg["method"] == "initialize" {
        let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
        r.headers_mut()
            .insert("mcp-session-id", format!("s{n}").parse().expect("ascii"));
    }
    Ok(r)
}

fn stdio() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(reply) = answer(&msg, false)
            && writeln!(out, "{reply}").and_then(|_| out.flush()).is_err()
        {
            break;
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--stdio") {
        return stdio();
    }
    let listen = args
        .iter()
        .position(|a| a == "--listen")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:0".to_owned());
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fleet-sim: bind {listen}: {e}");
            std::process::exit(1);
        }
    };
    let addr = listener.local_addr().expect("bound");
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle))
                .await;
        });
    }
}

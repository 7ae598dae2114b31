//! Era detection under paused time, against scripted peers over in-memory
//! pipes: a slow modern starter is modern, a legacy server is legacy, and
//! detection and fallback share one deadline.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use super::stdio::{Failed, Start, handshake};
use super::*;

/// How a scripted peer answers.
#[derive(Clone, Copy)]
enum Peer {
    /// Modern, first answer only after this long (a slow start).
    Modern(Duration),
    /// Legacy: -32601 on `server/discover`, answers `initialize`.
    Legacy,
    /// Legacy and silent on methods it does not know.
    SilentLegacy,
    /// Legacy, reading nothing for this long (a Python server importing),
    /// then answering what came meanwhile in order: `server/discover`
    /// with -32602, as FastMCP 2 does, then `initialize`.
    SlowLegacy(Duration),
    /// Answers nothing at all.
    Mute,
}

fn answer(peer: Peer, msg: &Value) -> Option<Value> {
    let id = msg.get("id")?.clone();
    let method = msg["method"].as_str().unwrap_or("");
    let result = match (peer, method) {
        (Peer::Modern(_), "server/discover") => json!({
            "resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {},
            "ttlMs": 0, "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "slow-modern", "version": "1"}}
        }),
        (Peer::Legacy | Peer::SilentLegacy | Peer::SlowLegacy(_), "initialize") => json!({
            "protocolVersion": "2025-06-18", "capabilities": {},
            "serverInfo": {"name": "legacy", "version": "1"}
        }),
        (Peer::Legacy, _) => {
            return Some(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}}));
        }
        (Peer::SlowLegacy(_), _) => {
            return Some(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32602, "message": "Invalid request parameters"}}));
        }
        _ => return None,
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// A scripted peer on the far end of in-memory pipes; the near ends.
fn spawn_peer(
    peer: Peer,
) -> (
    tokio::io::ReadHalf<tokio::io::DuplexStream>,
    tokio::io::WriteHalf<tokio::io::DuplexStream>,
) {
    let (near, far) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Peer::Modern(start) | Peer::SlowLegacy(start) = peer {
            tokio::time::sleep(start).await;
        }
        let (read, mut write) = tokio::io::split(far);
        let mut lines = BufReader::new(read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if let Some(reply) = answer(peer, &msg) {
                let text = format!("{reply}\n");
                if write.write_all(text.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    });
    tokio::io::split(near)
}

async fn detect(peer: Peer, connect_timeout: Duration) -> (Result<Opened, Failed>, Duration) {
    let (read, write) = spawn_peer(peer);
    let handler = Monitor::new(Default::default(), latest_legacy());
    let meter = std::sync::Arc::new(Meter::default());
    let start = Instant::now();
    let clock = Start::fixed(connect_timeout);
    let r = handshake(&handler, read, write, &meter, &Plan::Detect, clock).await;
    (r, start.elapsed())
}

fn era_of(opened: &Opened) -> String {
    opened
        .service
        .peer()
        .peer_info()
        .map(|p| p.protocol_version.to_string())
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_modern_server_that_takes_12_s_to_start_is_modern_under_a_30_s_deadline() {
    let (r, took) = detect(
        Peer::Modern(Duration::from_secs(12)),
        Duration::from_secs(30),
    )
    .await;
    let opened = r.expect("opened");
    assert_eq!(era_of(&opened), "2026-07-28");
    assert!(opened.conclusive, "a modern answer settles the era");
    assert!(
        took >= Duration::from_secs(12) && took < Duration::from_secs(13),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_legacy_server_is_legacy_and_that_is_settled() {
    let (r, _) = detect(Peer::Legacy, Duration::from_secs(15)).await;
    let opened = r.expect("opened");
    assert_eq!(era_of(&opened), "2025-06-18");
    assert!(opened.conclusive);
}

#[tokio::test(start_paused = true)]
async fn a_legacy_server_silent_on_discover_is_opened_within_the_one_deadline_and_asked_again_next_time()
 {
    let (r, took) = detect(Peer::SilentLegacy, Duration::from_secs(15)).await;
    let opened = r.expect("opened");
    assert_eq!(era_of(&opened), "2025-06-18");
    assert!(
        !opened.conclusive,
        "slow is not legacy: detect again next time"
    );
    assert_eq!(took, discover_share(Duration::from_secs(15)), "{took:?}");
}

/// Its answer to the discover comes after initialize was sent on the same
/// pipes, with the same number from rmcp: it is dropped, not read as
/// initialize's.
#[tokio::test(start_paused = true)]
async fn a_late_answer_to_discover_is_not_taken_for_initialize_s() {
    let (r, took) = detect(
        Peer::SlowLegacy(Duration::from_secs(13)),
        Duration::from_secs(15),
    )
    .await;
    let opened = r.unwrap_or_else(|f| panic!("not opened: {}", f.describe()));
    assert_eq!(era_of(&opened), "2025-06-18");
    assert!(!opened.conclusive, "{took:?}");
    assert_eq!(took, Duration::from_secs(13), "answered as soon as it read");
}

#[tokio::test(start_paused = true)]
async fn a_mute_server_fails_at_its_deadline_saying_what_was_tried() {
    let (r, took) = detect(Peer::Mute, Duration::from_secs(15)).await;
    let Err(failed) = r else {
        panic!("a mute server opened");
    };
    assert_eq!(
        took,
        Duration::from_secs(15),
        "detection and fallback share the deadline"
    );
    let text = failed.describe();
    assert!(
        text.starts_with("no answer to initialize within 15s"),
        "{text}"
    );
    assert!(
        text.contains("server/discover was tried first: no answer within 12s"),
        "{text}"
    );
}

#[test]
fn detection_leaves_initialize_a_fifth_and_at_least_a_second() {
    assert_eq!(
        discover_share(Duration::from_secs(15)),
        Duration::from_secs(12)
    );
    assert_eq!(
        discover_share(Duration::from_secs(2)),
        Duration::from_secs(1)
    );
    assert_eq!(
        discover_share(Duration::from_millis(500)),
        Duration::from_millis(250)
    );
    assert_eq!(discover_share(Duration::ZERO), Duration::ZERO);
}

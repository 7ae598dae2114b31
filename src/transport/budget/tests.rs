use std::sync::Arc;

use super::read::SNIFF_BYTES;
use super::*;
use tokio::io::AsyncReadExt;

fn small() -> Budget {
    Budget {
        bytes_per_second: 100,
        messages_per_second: 5,
        requests_in_flight: 2,
        requests_per_second: 3,
        ..BUDGET
    }
}

fn msg(v: serde_json::Value) -> RxJsonRpcMessage<RoleClient> {
    serde_json::from_value(v).expect("a server message")
}

#[test]
fn each_bound_trips_once_and_names_itself() {
    let t0 = Instant::now();
    let m = Meter::new(small());
    assert!(
        m.bytes(60, t0) && m.bytes(40, t0),
        "at the bound is within it"
    );
    assert!(!m.bytes(1, t0));
    assert_eq!(m.breach(), Some(Breach::Bytes));
    assert!(!m.message(t0), "a tripped meter admits nothing more");
    assert_eq!(m.breach(), Some(Breach::Bytes), "the first breach stays");

    let m = Meter::new(small());
    for i in 0..5 {
        assert!(m.message(t0 + Duration::from_millis(i * 100)), "#{i}");
    }
    assert!(!m.message(t0 + Duration::from_millis(999)));
    assert_eq!(
        m.breach().map(Breach::failure),
        Some(LinkFailure::MessageFlood)
    );

    // A new second starts a new count.
    let m = Meter::new(small());
    for s in 0..10 {
        for _ in 0..5 {
            assert!(m.message(t0 + Duration::from_secs(s)));
        }
        assert!(m.bytes(100, t0 + Duration::from_secs(s)));
    }
    assert_eq!(m.breach(), None);
}

#[test]
fn requests_trip_on_either_request_bound() {
    let t0 = Instant::now();
    let m = Meter::new(small());
    assert!(m.request(t0) && m.request(t0));
    assert!(!m.request(t0), "a third unanswered request");
    assert_eq!(
        m.breach().map(Breach::failure),
        Some(LinkFailure::RequestFlood)
    );

    let m = Meter::new(small());
    for _ in 0..3 {
        assert!(m.dropped_request(t0));
    }
    assert!(!m.dropped_request(t0), "a fourth in one second");
    assert!(
        Breach::Requests
            .describe(&small())
            .contains("3 in one second")
    );
}

#[tokio::test]
async fn a_trip_wakes_whoever_waits() {
    let m = Arc::new(Meter::new(small()));
    let waiter = tokio::spawn({
        let m = m.clone();
        async move { m.tripped().await }
    });
    tokio::task::yield_now().await;
    let t0 = Instant::now();
    while m.message(t0) {}
    let b = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .expect("join");
    assert_eq!(b, Breach::Messages);
    // Also for a wait that starts after the trip.
    assert_eq!(m.tripped().await, Breach::Messages);
}

#[test]
fn only_what_mcpmon_uses_reaches_rmcp() {
    let t0 = Instant::now();
    let m = Meter::default();
    let log = msg(
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "x"}}),
    );
    assert_eq!(m.admit(&log, t0), Admit::Drop);
    let progress = |token: serde_json::Value| {
        msg(
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": 1}}),
        )
    };
    assert_eq!(
        m.admit(&progress(7.into()), t0),
        Admit::Drop,
        "no such request"
    );
    m.expect_progress(NumberOrString::Number(3), numbered(7));
    assert_eq!(m.admit(&progress(7.into()), t0), Admit::Pass);
    assert_eq!(m.admit(&progress("7".into()), t0), Admit::Drop);
    let answer = msg(serde_json::json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    assert_eq!(m.admit(&answer, t0), Admit::Pass);
    assert_eq!(
        m.admit(&progress(7.into()), t0),
        Admit::Drop,
        "after its answer, a request's progress is no sign of life"
    );
    let changed =
        msg(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    assert_eq!(
        m.admit(&changed, t0),
        Admit::Drop,
        "handled here, not by rmcp"
    );
    let ping = msg(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    assert_eq!(m.admit(&ping, t0), Admit::Pass);
}

#[tokio::test]
async fn list_changed_is_one_stored_wake_up() {
    let m = Meter::default();
    for _ in 0..1000 {
        m.note_tools_changed();
    }
    let wait = || tokio::time::timeout(Duration::from_millis(50), m.tools_changed());
    assert!(wait().await.is_ok(), "stored for a later wait");
    assert!(
        wait().await.is_err(),
        "a thousand notifications are one wake-up"
    );
}

#[tokio::test]
async fn a_metered_reader_ends_the_stream_past_the_budget() {
    let meter = Arc::new(Meter::new(small()));
    let data = vec![b'x'; 1000];
    let mut r = MeteredRead::new(&data[..], meter.clone());
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.expect("read");
    assert!(
        got.len() <= 100,
        "read {} bytes past a 100-byte budget",
        got.len()
    );
    assert_eq!(meter.breach(), Some(Breach::Bytes));
}

/// Reads of seven bytes at most: lines arrive in many pieces.
struct Sevens<'a>(&'a [u8]);

impl tokio::io::AsyncRead for Sevens<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self.0.len().min(7).min(buf.remaining());
        buf.put_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_stdio_listing_s_task_support_is_read_off_its_line_whatever_the_chunks() {
    use super::super::tools::TaskSupport;
    let listing = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a","inputSchema":{},"execution":{"taskSupport":"required"}},{"name":"b","inputSchema":{},"execution":{"taskSupport":"optional"}},{"name":"c","inputSchema":{}}]}}"#;
    let mut stream = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n".to_vec();
    stream.extend_from_slice(listing);
    stream.extend_from_slice(b"\n");
    // A line longer than the sniffer reads goes unread, and the next is read.
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":3,"result":{{"tools":[{{"name":"y","description":"{}","inputSchema":{{}},"execution":{{"taskSupport":"required"}}}}]}}}}"#,
        "d".repeat(SNIFF_BYTES)
    );
    stream.extend_from_slice(long.as_bytes());
    stream.extend_from_slice(b"\n");
    let renamed = String::from_utf8_lossy(listing).replace(r#""name":"a""#, r#""name":"z""#);
    stream.extend_from_slice(renamed.as_bytes());
    stream.extend_from_slice(b"\n");
    let meter = Arc::new(Meter::default());
    meter.expect_listing(NumberOrString::Number(2));
    meter.expect_listing(NumberOrString::Number(3));
    let mut r = MeteredRead::new(Sevens(&stream), meter.clone());
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.expect("read");
    assert_eq!(got, stream, "every byte handed on");
    assert_eq!(meter.task_support("a"), Some(TaskSupport::Required));
    assert_eq!(meter.task_support("b"), Some(TaskSupport::Optional));
    assert_eq!(meter.task_support("c"), Some(TaskSupport::Forbidden));
    assert_eq!(
        meter.task_support("z"),
        Some(TaskSupport::Required),
        "read after the long line"
    );
    assert_eq!(meter.task_support("y"), None);
}

#[tokio::test]
async fn only_answers_to_mcpmon_s_own_listings_are_read_and_long_names_are_not_kept() {
    use super::super::tools::{MAX_TOOL_NAME, TaskSupport};
    let line = |id: u32, name: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{{"name":"{name}","inputSchema":{{}},"execution":{{"taskSupport":"optional"}}}}]}}}}"#
        )
        .into_bytes()
    };
    let long = "n".repeat(MAX_TOOL_NAME + 1);
    let meter = Arc::new(Meter::default());
    // Nothing asked: a line that looks like a listing is not even kept.
    let mut r = MeteredRead::new(Sevens(b""), meter.clone());
    let mut unsolicited = line(7, "early");
    unsolicited.push(b'\n');
    r.sniff(&unsolicited[..20]);
    assert_eq!(r.line.capacity(), 0, "no copy while no listing is due");
    // A listing asked mid-line: the rest of that line is not read.
    meter.expect_listing(NumberOrString::Number(7));
    r.sniff(&unsolicited[20..]);
    assert_eq!(meter.task_support("early"), None);
    // An answer to another id, and a name over the bound, are not kept.
    let mut stream = line(99, "stranger");
    stream.push(b'\n');
    stream.extend(line(7, &long));
    stream.push(b'\n');
    stream.extend(line(7, "mine"));
    stream.push(b'\n');
    r.sniff(&stream);
    assert_eq!(meter.task_support("stranger"), None);
    assert_eq!(meter.task_support(&long), None);
    assert_eq!(meter.task_support("mine"), Some(TaskSupport::Optional));
    // Once answered, nothing more is read.
    meter.settled(&NumberOrString::Number(7));
    let mut after = line(7, "late");
    after.push(b'\n');
    r.sniff(&after);
    assert_eq!(meter.task_support("late"), None);
    assert_eq!(r.line.capacity(), 0);
}

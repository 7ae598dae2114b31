//! Server-sent events as bytes arrive: whole events taken off the front of
//! a buffer, their names and joined `data:` lines, each byte scanned for an
//! event's end once. Read by both HTTP links that carry event streams.

/// An SSE stream's bytes as they arrive, whole events taken off the front.
/// Each byte is scanned for an event's end once: an event that arrives a
/// few bytes at a time is not rescanned from its start at every chunk.
#[derive(Debug, Default)]
pub struct SseBuffer {
    buf: Vec<u8>,
    /// Where the unread events start.
    start: usize,
    /// How far past `start` holds no event's end.
    scanned: usize,
}

impl SseBuffer {
    /// Append what was read.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes held that belong to no whole event yet.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The joined `data:` lines of the next whole event.
    pub fn next_event(&mut self) -> Option<Vec<u8>> {
        self.next_named_event().map(|(_, data)| data)
    }

    /// The next whole event: its `event:` name (empty when it has none)
    /// and its joined `data:` lines.
    pub fn next_named_event(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.next_full_event().map(|e| (e.name, e.data))
    }

    /// The next whole event, with the fields a resumed stream needs.
    pub fn next_full_event(&mut self) -> Option<Event> {
        let rest = &self.buf[self.start..];
        match event_end(rest, self.scanned - self.start) {
            Some((len, used)) => {
                let event = &rest[..len];
                let full = Event {
                    name: field(event, b"event:").unwrap_or_default(),
                    data: event_data(event),
                    id: field(event, b"id:"),
                    retry: field(event, b"retry:")
                        .and_then(|r| std::str::from_utf8(&r).ok()?.parse().ok()),
                };
                self.start += used;
                self.scanned = self.start;
                Some(full)
            }
            None => {
                // An event's end is at most three bytes ("\n\r\n"): the
                // last two may still begin one.
                self.scanned = self.buf.len().saturating_sub(2).max(self.start);
                None
            }
        }
    }
}

/// One whole SSE event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// Its `event:` name; empty when it has none.
    pub name: Vec<u8>,
    /// Its joined `data:` lines.
    pub data: Vec<u8>,
    /// Its `id:`, which a stream resumed after it names (`Last-Event-ID`).
    pub id: Option<Vec<u8>>,
    /// Its `retry:`, in milliseconds: how long to wait before resuming.
    pub retry: Option<u64>,
}

/// The last value of field `name` (with its colon) in one SSE event.
fn field(event: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    event
        .split(|b| *b == b'\n')
        .filter_map(|line| line.strip_suffix(b"\r").unwrap_or(line).strip_prefix(name))
        .next_back()
        .map(|value| value.trim_ascii().to_vec())
}

/// The joined `data:` lines of one SSE event.
fn event_data(event: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    for line in event.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(rest) = line.strip_prefix(b"data:") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
        }
    }
    data
}

/// The length of the first event in `buf` and of the event plus its blank
/// line, if a whole event is there; `from` bytes are known to hold no end.
fn event_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while i < buf.len() {
        if buf[i] == b'\n' {
            let rest = &buf[i + 1..];
            if rest.first() == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if rest.starts_with(b"\r\n") {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_keep_their_names() {
        let mut stream = SseBuffer::default();
        stream.push(b"event: endpoint\r\ndata: /messages?s=1\r\n\r\ndata: {}\n\n");
        assert_eq!(
            stream.next_named_event(),
            Some((b"endpoint".to_vec(), b"/messages?s=1".to_vec()))
        );
        assert_eq!(stream.next_named_event(), Some((vec![], b"{}".to_vec())));
        assert_eq!(stream.next_named_event(), None);
    }

    #[test]
    fn an_event_s_id_and_retry_are_read_for_resuming() {
        let mut stream = SseBuffer::default();
        stream.push(b"id: event-1\nretry: 500\ndata: \n\nid:e2\nretry: soon\ndata: x\n\n");
        let e = stream.next_full_event().expect("an event");
        assert_eq!(
            (e.id.as_deref(), e.retry),
            (Some(&b"event-1"[..]), Some(500))
        );
        assert!(e.data.is_empty());
        let e = stream.next_full_event().expect("an event");
        assert_eq!((e.id.as_deref(), e.retry), (Some(&b"e2"[..]), None));
    }
}

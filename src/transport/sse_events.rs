//! Server-sent events as bytes arrive: whole events taken off the front of
//! a buffer, their names and joined `data:` lines, each byte scanned for an
//! event's end once and each event's lines read once. Read by both HTTP
//! links that carry event streams, so by every ping a server answers with
//! a stream.

use std::borrow::Cow;

/// What a stream's buffer holds from its first chunk: enough for a ping's
/// answer and its headers' worth of event fields.
const FIRST_ROOM: usize = 1024;

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
        if self.buf.capacity() == 0 {
            // An answer often comes in two or three chunks: room for them
            // at once, not a copy to a larger buffer at each.
            self.buf.reserve(chunk.len().max(FIRST_ROOM));
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes held that belong to no whole event yet.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The joined `data:` lines of the next whole event.
    pub fn next_event(&mut self) -> Option<Vec<u8>> {
        self.next_full_event().map(|e| e.data.into_owned())
    }

    /// The next whole event: its `event:` name (empty when it has none)
    /// and its joined `data:` lines.
    pub fn next_named_event(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.next_full_event()
            .map(|e| (e.name.to_vec(), e.data.into_owned()))
    }

    /// The next whole event, with the fields a resumed stream needs, read
    /// in place: it borrows the buffer until the next push.
    pub fn next_full_event(&mut self) -> Option<Event<'_>> {
        let at = self.start;
        match event_end(&self.buf[at..], self.scanned - at) {
            Some((len, used)) => {
                self.start += used;
                self.scanned = self.start;
                Some(Event::parse(&self.buf[at..at + len]))
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

/// One whole SSE event, its fields borrowed from the stream's buffer (a
/// ping's answer is one event: reading it in place copies nothing).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Event<'a> {
    /// Its `event:` name; empty when it has none.
    pub name: &'a [u8],
    /// Its joined `data:` lines: borrowed when there is one, joined into
    /// a copy when there are more.
    pub data: Cow<'a, [u8]>,
    /// Its `id:`, which a stream resumed after it names (`Last-Event-ID`).
    pub id: Option<&'a [u8]>,
    /// Its `retry:`, in milliseconds: how long to wait before resuming.
    pub retry: Option<u64>,
}

impl<'a> Event<'a> {
    /// One whole event's fields, its lines read once: a field named more
    /// than once keeps its last value, and `data` lines are joined with
    /// newlines (each without the one space after its colon).
    fn parse(event: &'a [u8]) -> Event<'a> {
        let mut e = Event::default();
        let mut data_lines = 0usize;
        let mut retry: Option<&[u8]> = None;
        let mut rest = event;
        while !rest.is_empty() {
            let line;
            (line, rest) = match memchr::memchr(b'\n', rest) {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None => (rest, &[][..]),
            };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            // A line without a colon is a field with an empty value.
            let (name, value) = match memchr::memchr(b':', line) {
                Some(colon) => (&line[..colon], &line[colon + 1..]),
                None => (line, &b""[..]),
            };
            match name {
                b"data" => {
                    let value = value.strip_prefix(b" ").unwrap_or(value);
                    if data_lines == 0 {
                        e.data = Cow::Borrowed(value);
                    } else {
                        let joined = e.data.to_mut();
                        joined.push(b'\n');
                        joined.extend_from_slice(value);
                    }
                    data_lines += 1;
                }
                b"event" => e.name = value.trim_ascii(),
                b"id" => e.id = Some(value.trim_ascii()),
                b"retry" => retry = Some(value.trim_ascii()),
                _ => {}
            }
        }
        e.retry = retry.and_then(|r| std::str::from_utf8(r).ok()?.parse().ok());
        e
    }
}

/// The length of the first event in `buf` and of the event plus its blank
/// line, if a whole event is there; `from` bytes are known to hold no end.
fn event_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while let Some(at) = memchr::memchr(b'\n', &buf[i..]) {
        let end = i + at;
        let rest = &buf[end + 1..];
        if rest.first() == Some(&b'\n') {
            return Some((end, end + 2));
        }
        if rest.starts_with(b"\r\n") {
            return Some((end, end + 3));
        }
        i = end + 1;
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
        assert_eq!((e.id, e.retry), (Some(&b"event-1"[..]), Some(500)));
        assert!(e.data.is_empty());
        let e = stream.next_full_event().expect("an event");
        assert_eq!((e.id, e.retry), (Some(&b"e2"[..]), None));
    }

    #[test]
    fn an_event_s_fields_are_read_as_the_standard_says() {
        let mut stream = SseBuffer::default();
        // Split anywhere: an event is whole only at its blank line.
        let bytes: &[u8] = b": a comment\r\nevent: first\r\nevent:  message \r\ndata:\r\ndata:  two spaces\r\ndata:x\r\nid: 7\r\nunknown: y\r\ndata\r\n\r\nretry: 20\ndata: {}\n\n";
        for piece in bytes.chunks(5) {
            stream.push(piece);
        }
        let e = stream.next_full_event().expect("an event");
        assert_eq!(e.name, b"message", "the last name, trimmed");
        assert_eq!(
            &e.data[..],
            b"\n two spaces\nx\n",
            "empty data lines count, with or without a colon; one space goes"
        );
        assert_eq!(e.id, Some(&b"7"[..]));
        assert_eq!(e.retry, None);
        let e = stream.next_full_event().expect("a second event");
        assert_eq!(
            (e.name, &e.data[..], e.retry),
            (&b""[..], &b"{}"[..], Some(20))
        );
        assert!(stream.next_full_event().is_none());
        assert_eq!(stream.pending(), 0);
    }
}

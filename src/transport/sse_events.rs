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
        let rest = &self.buf[self.start..];
        match event_end(rest, self.scanned - self.start) {
            Some((len, used)) => {
                let event = &rest[..len];
                let named = (event_name(event), event_data(event));
                self.start += used;
                self.scanned = self.start;
                Some(named)
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

/// The `event:` name of one SSE event; empty when it has none.
fn event_name(event: &[u8]) -> Vec<u8> {
    event
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            line.strip_suffix(b"\r")
                .unwrap_or(line)
                .strip_prefix(b"event:")
        })
        .next_back()
        .map(|name| name.trim_ascii().to_vec())
        .unwrap_or_default()
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
}

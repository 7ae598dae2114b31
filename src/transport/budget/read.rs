//! The stdio pipe's bytes as they come in: each counted against the
//! session's meter, and, while a listing of mcpmon's awaits its answer,
//! each line read for the task support that rmcp's types drop.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::time::Instant;

use super::Meter;

/// A reader that counts every byte against the meter; once the meter trips
/// it reads end of stream. While a `tools/list` of mcpmon's awaits its
/// answer it also reads each line that mentions `taskSupport`, for what
/// rmcp's types drop; otherwise it copies nothing.
pub struct MeteredRead<R> {
    inner: R,
    meter: Arc<Meter>,
    /// The line being read, while a listing is due.
    pub(super) line: Vec<u8>,
    /// The rest of the line being read is skipped: it grew past
    /// [`SNIFF_BYTES`], or began while no listing was due.
    long: bool,
}

/// Longest line read for task support: a listing's page is parsed on the
/// reading task, so a longer one goes unread (its tools then run as tasks
/// only with `task: always`).
pub(super) const SNIFF_BYTES: usize = 1 << 20;
/// Largest line buffer kept between lines.
const KEPT_LINE_BYTES: usize = 64 << 10;

impl<R> MeteredRead<R> {
    /// Meter what is read from `inner`.
    pub fn new(inner: R, meter: Arc<Meter>) -> Self {
        MeteredRead {
            inner,
            meter,
            line: Vec::new(),
            long: false,
        }
    }

    pub(super) fn sniff(&mut self, mut bytes: &[u8]) {
        if !self.meter.awaits_listing() {
            // No listing of mcpmon's is due: nothing is copied, and all
            // that matters is whether the next byte starts a line.
            if self.line.capacity() > 0 {
                self.line = Vec::new();
            }
            if let Some(last) = bytes.last() {
                self.long = *last != b'\n';
            }
            return;
        }
        loop {
            let end = memchr::memchr(b'\n', bytes);
            let part = &bytes[..end.unwrap_or(bytes.len())];
            if !self.long && self.line.len() + part.len() <= SNIFF_BYTES {
                self.line.extend_from_slice(part);
            } else {
                (self.long, self.line) = (true, Vec::new());
            }
            let Some(end) = end else { return };
            if !self.long && memchr::memmem::find(&self.line, b"\"taskSupport\"").is_some() {
                self.meter.note_task_support(&self.line);
            }
            // A big line's buffer is not kept for the session's life.
            if self.line.capacity() > KEPT_LINE_BYTES {
                self.line = Vec::new();
            } else {
                self.line.clear();
            }
            self.long = false;
            bytes = &bytes[end + 1..];
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for MeteredRead<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.meter.breach().is_some() {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let n = buf.filled().len() - before;
            if n > 0 && !self.meter.bytes(n, Instant::now()) {
                // What was just read is not handed on: the stream ends here.
                buf.set_filled(before);
            } else if n > 0 {
                let this = &mut *self;
                this.sniff(&buf.filled()[before..]);
            }
        }
        polled
    }
}

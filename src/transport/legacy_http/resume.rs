//! An answer's event stream resumed (2025-11-25): a server may end a POST's
//! stream on purpose after naming an event (`id:`, `retry:`), and send the
//! answer on a GET that names it in `Last-Event-ID`, once its retry delay
//! passed. Bounded: a few resumptions per request, a retry of at most
//! [`MAX_RETRY`], every wait within the call's deadlines.

use std::time::Duration;

use http::header::{ACCEPT, HeaderValue};
use http::{Method, StatusCode};
use tokio::time::Instant;

use super::{CallError, LegacyLink, Window, is_stream, refusal};
use crate::transport::RequestError;
use crate::transport::sse_events::Event;

/// Most times one request's stream is resumed: a server that ends every
/// stream before the answer costs a few GETs, not a loop.
const MAX_RESUMES: u32 = 3;
/// How long to wait before resuming when the server named no `retry`.
const RESUME_AFTER: Duration = Duration::from_secs(1);
/// The longest `retry` honoured: the call's deadlines bound it anyway.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Where a request's event stream could be resumed from: the last event
/// id it named, the retry delay it asked for, and how often it was resumed.
pub(super) struct Resume {
    last: Option<Vec<u8>>,
    pub(super) after: Duration,
    resumed: u32,
}

impl Default for Resume {
    fn default() -> Self {
        Resume {
            last: None,
            after: RESUME_AFTER,
            resumed: 0,
        }
    }
}

impl Resume {
    /// An event came: its id and retry, if it has them, are the latest.
    pub(super) fn saw(&mut self, event: &Event<'_>) {
        if let Some(id) = event.id {
            self.last = (!id.is_empty()).then(|| id.to_vec());
        }
        if let Some(ms) = event.retry {
            self.after = Duration::from_millis(ms).min(MAX_RETRY);
        }
    }

    /// The stream ended without the answer: the event to resume after, or
    /// why it cannot be.
    pub(super) fn next(&mut self) -> Result<Vec<u8>, CallError> {
        let Some(last) = self.last.clone() else {
            let why = "the stream ended without the answer, naming no event to resume from";
            return Err(RequestError::Transport(why.to_owned()).into());
        };
        if self.resumed == MAX_RESUMES {
            let why = format!("the stream ended without the answer, {MAX_RESUMES} times resumed");
            return Err(RequestError::Transport(why).into());
        }
        self.resumed += 1;
        Ok(last)
    }
}

impl LegacyLink {
    /// The stream of a request resumed after event `last`: a GET naming it
    /// (`Last-Event-ID`), `after` the server's retry delay, within the
    /// call's deadlines.
    pub(super) async fn resumed(
        &self,
        last: &[u8],
        after: Duration,
        window: &Window,
    ) -> Result<super::Answer, CallError> {
        let at = Instant::now() + after;
        if at >= window.next() {
            tokio::time::sleep_until(window.next()).await;
            return Err(window.expired());
        }
        tokio::time::sleep_until(at).await;
        let mut route = self.route();
        self.authorize(&mut route).await?;
        let id = HeaderValue::from_bytes(last)
            .map_err(|_| RequestError::Transport("an event id that is no header value".into()))?;
        let mut request = self.request(Method::GET, &route, super::Body::default());
        let headers = request.headers_mut();
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        headers.remove(http::header::CONTENT_TYPE);
        headers.insert("last-event-id", id);
        let request = self.wire.send(request, false);
        let response = match tokio::time::timeout_at(window.next(), request).await {
            Err(_) => return Err(window.expired()),
            Ok(Err(e)) => return Err(crate::transport::error::classify_transport(&e).into()),
            Ok(Ok(r)) => r,
        };
        match response.status() {
            StatusCode::NOT_FOUND => return Err(CallError::Expired),
            StatusCode::METHOD_NOT_ALLOWED => {
                let why = "the stream ended before the answer, and the server offers no stream to resume it (GET: 405)";
                return Err(RequestError::Transport(why.to_owned()).into());
            }
            _ => {}
        }
        refusal(&response)?;
        if !is_stream(&response)? {
            let why = "a resumed stream answered with JSON, not an event stream";
            return Err(RequestError::Transport(why.to_owned()).into());
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_resumes_after_its_last_event_as_the_server_asked_a_few_times_at_most() {
        let event = |id: Option<&'static str>, retry: Option<u64>| Event {
            id: id.map(str::as_bytes),
            retry,
            ..Event::default()
        };
        // Nothing named: the end is a failure, in its own words.
        let mut r = Resume::default();
        let Err(CallError::Request(RequestError::Transport(why))) = r.next() else {
            panic!("no event id, no resumption")
        };
        assert!(why.contains("naming no event to resume from"), "{why}");
        // The latest id and retry win; no retry named waits a second.
        let mut r = Resume::default();
        r.saw(&event(Some("e1"), None));
        assert_eq!(r.after, RESUME_AFTER);
        r.saw(&event(Some("e2"), Some(500)));
        r.saw(&event(None, None));
        assert_eq!(r.after, Duration::from_millis(500));
        r.saw(&event(None, Some(3_600_000)));
        assert_eq!(
            r.after, MAX_RETRY,
            "a server cannot park a request for an hour"
        );
        for _ in 0..MAX_RESUMES {
            assert_eq!(r.next().ok().as_deref(), Some(&b"e2"[..]));
        }
        let Err(CallError::Request(RequestError::Transport(why))) = r.next() else {
            panic!("resumed past the cap")
        };
        assert!(why.contains("3 times resumed"), "{why}");
    }
}

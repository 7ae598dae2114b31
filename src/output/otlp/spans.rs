//! Probe spans: one CLIENT span per sampled probe, named and attributed as
//! the MCP conventions say, whose ids are the `traceparent` the probe sent,
//! so a server that traces has the monitor's span as its parent. Finished
//! spans wait on a bounded queue; one task exports them in batches. A full
//! queue or a failed export drops spans and counts them; probing never
//! waits for any of it.

use std::borrow::Cow;
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Counters;
use crate::state::operations::Operation;

/// Most spans in one export request.
const BATCH: usize = 512;
/// Longest a finished span waits for a fuller batch.
const LINGER: Duration = Duration::from_secs(2);

/// The span of a sampled probe; `None` when it was not sampled or had no
/// trace.
pub fn span(
    op: &Operation<'_>,
    attributes: Vec<KeyValue>,
    scope: &InstrumentationScope,
) -> Option<SpanData> {
    let ids = op.span?;
    let trace_id = TraceId::from_bytes(ids.trace_id.to_be_bytes());
    let span_id = SpanId::from_bytes(ids.span_id.to_be_bytes());
    let name = match op.tool {
        Some(t) => format!("{} {t}", op.method),
        None => op.method.to_owned(),
    };
    let status = match op.failure {
        Some(reason) => Status::error(reason),
        None => Status::Unset,
    };
    Some(SpanData {
        span_context: SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Client,
        name: Cow::Owned(name),
        start_time: ids.started,
        end_time: ids.started + op.duration,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    })
}

/// The sending end of the span queue.
#[derive(Debug, Clone)]
pub struct Queue {
    tx: mpsc::Sender<SpanData>,
    counters: Counters,
}

impl Queue {
    /// Queue `span`, or drop and count it when the queue is full.
    pub fn push(&self, span: SpanData) {
        if self.tx.try_send(span).is_err() {
            self.counters.dropped("queue_full", 1);
        }
    }
}

/// Start the export task; it drains what is queued when `cancel` fires,
/// within one more `timeout`.
pub fn start<E: SpanExporter + 'static>(
    exporter: E,
    size: usize,
    timeout: Duration,
    counters: Counters,
    cancel: CancellationToken,
) -> (Queue, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(size);
    let queue = Queue {
        tx,
        counters: counters.clone(),
    };
    let task = tokio::spawn(export_loop(exporter, rx, timeout, counters, cancel));
    (queue, task)
}

async fn export_loop<E: SpanExporter>(
    exporter: E,
    mut rx: mpsc::Receiver<SpanData>,
    timeout: Duration,
    counters: Counters,
    cancel: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let first = tokio::select! {
            s = rx.recv() => s,
            _ = cancel.cancelled() => None,
        };
        let Some(first) = first else { break };
        batch.push(first);
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < BATCH {
            tokio::select! {
                s = rx.recv() => match s {
                    Some(s) => batch.push(s),
                    None => break,
                },
                _ = &mut linger => break,
                _ = cancel.cancelled() => break,
            }
        }
        export(&exporter, &mut batch, timeout, &counters).await;
    }
    // Shutdown: what is already queued gets one last export.
    rx.close();
    while let Ok(s) = rx.try_recv() {
        batch.push(s);
        if batch.len() == BATCH {
            export(&exporter, &mut batch, timeout, &counters).await;
        }
    }
    if !batch.is_empty() {
        export(&exporter, &mut batch, timeout, &counters).await;
    }
}

async fn export<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    timeout: Duration,
    counters: &Counters,
) {
    let n = batch.len() as u64;
    let spans = std::mem::replace(batch, Vec::with_capacity(BATCH));
    // The exporter retries with backoff inside; this bounds it all.
    let error = match tokio::time::timeout(timeout, exporter.export(spans)).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {timeout:?}")),
    };
    counters.export(
        "traces",
        error.as_ref().map(|e| e as &dyn std::fmt::Display),
    );
    if error.is_some() {
        counters.dropped("export_failed", n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{FailureReason, ProbeKind, trace};
    use crate::state::testing::{failed, spec};

    fn status() -> crate::state::snapshot::ServerStatus {
        crate::state::evidence::Tracker::new(&spec("a"), tokio::time::Instant::now())
            .status()
            .clone()
    }

    #[test]
    fn a_sampled_probe_s_span_has_the_ids_it_sent_and_its_outcome() {
        let st = status();
        let mut outcome = failed(ProbeKind::HealthCheck, FailureReason::Timeout);
        let mut t = trace::new();
        t.sampled = true;
        outcome.trace = Some(Box::new(t.clone()));
        let op = Operation::of(&st, None, "health_check", &outcome);
        let scope = InstrumentationScope::builder("mcpmon").build();
        let s = span(&op, vec![], &scope).expect("sampled");
        assert_eq!(s.span_context.trace_id().to_string(), t.trace_hex());
        assert_eq!(s.span_context.span_id().to_string(), t.span_hex());
        assert_eq!(s.name, "tools/call health_check");
        assert_eq!(s.span_kind, SpanKind::Client);
        assert_eq!(s.status, Status::error("timeout"));
        assert_eq!(s.end_time, t.started + outcome.duration);

        let mut unsampled = outcome.clone();
        unsampled.trace.as_mut().expect("trace").sampled = false;
        let op = Operation::of(&st, None, "health_check", &unsampled);
        assert!(span(&op, vec![], &scope).is_none(), "not sampled");
    }
}

//! Opening a legacy HTTP+SSE session (see [`crate::transport::legacy_sse`]):
//! the event stream and its `endpoint` event, then `initialize` over it,
//! all inside the one deadline. The transport belongs to the legacy era,
//! so there is nothing to detect.

use std::sync::Arc;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use tokio::time::Instant;

use super::{Opened, Plan, Started, finish, flooded, shown};
use crate::config::{ServerSpec, TransportSpec};
use crate::transport::budget::{Meter, Metered};
use crate::transport::error::classify_open;
use crate::transport::legacy_sse;
use crate::transport::progress::Activity;
use crate::transport::session::{McpSession, Monitor};
use crate::transport::{LinkFailure, OpenError};

/// Open the session, or say why not, by `until`.
pub(in crate::transport) async fn open_sse(
    spec: &ServerSpec,
    http: &reqwest::Client,
    plan: &Plan,
    until: Instant,
) -> Result<McpSession, OpenError> {
    let TransportSpec::Http {
        url,
        headers,
        bearer_token,
        ..
    } = &spec.transport
    else {
        return Err(OpenError::new(
            LinkFailure::ConnectFailed,
            "connect",
            "not an HTTP server".to_owned(),
        ));
    };
    let within = shown(until.saturating_duration_since(Instant::now()));
    let mut sent: HeaderMap = super::header_pairs(headers).collect();
    if let Some(token) = bearer_token
        && let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
    {
        value.set_sensitive(true);
        sent.insert(AUTHORIZATION, value);
    }
    let meter = Arc::new(Meter::default());
    let connected = tokio::time::timeout_at(
        until,
        legacy_sse::connect(
            http,
            url,
            sent,
            meter.clone(),
            spec.settings.request_timeout.0,
        ),
    )
    .await
    .map_err(|_| {
        OpenError::new(
            LinkFailure::HandshakeFailed,
            "connect",
            format!("no `endpoint` event on the stream within {within}"),
        )
    })??;
    let stream = connected.end();
    let activity = Arc::new(Activity::default());
    let handler = Monitor::new(activity.clone(), plan.legacy_version());
    let served = tokio::time::timeout_at(
        until,
        handler.serve_with_lifecycle(
            Metered::new(connected, meter.clone()),
            ClientLifecycleMode::Initialize,
        ),
    )
    .await;
    if let Some(e) = flooded(&meter) {
        return Err(e);
    }
    let service = match served {
        Ok(Ok(service)) => service,
        Ok(Err(e)) => return Err(classify_open(&e)),
        Err(_) => {
            return Err(OpenError::new(
                LinkFailure::HandshakeFailed,
                "handshake",
                format!("no answer to initialize within {within}"),
            ));
        }
    };
    let started = Started {
        opened: Opened {
            service,
            conclusive: true,
        },
        child: None,
        stream: Some(stream),
        meter,
        activity,
    };
    Ok(finish(spec, None, started, None, plan).await)
}

//! OTLP push (opt-in): the MCP conventions' client histograms and mcpmon's
//! judgment as OpenTelemetry metrics, and sampled probe spans, sent to a
//! collector or backend. `/metrics` is unchanged; both read the owner.
//!
//! - [`config`]: flags and `OTEL_*` variables, resolved purely.
//! - [`instruments`]: what is measured, named as the conventions say.
//! - [`spans`]: probe spans and their bounded export queue.
//!
//! A receiver that is down or stalls costs a bounded amount: metrics are
//! cumulative aggregates of fixed cardinality (a failed push loses
//! nothing the next one does not carry), each export is bounded by the
//! timeout (the exporter retries with backoff inside it), spans wait on a
//! bounded queue, and everything dropped is counted in `/metrics`.

pub mod config;
pub mod instruments;
pub mod spans;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use tokio_util::sync::CancellationToken;

pub use config::{OtlpConfig, OtlpError, OtlpFlags, Protocol};

use crate::state::Reader;
use crate::state::operations::{Operation, Operations, SessionEnd};

/// Counts of what the export did, in `/metrics`
/// (`mcpmon_otlp_exports_total{signal, result}`,
/// `mcpmon_otlp_spans_dropped_total{reason}`), and whether each signal is
/// failing now, so a change is logged once rather than every push.
#[derive(Clone, Debug)]
pub struct Counters {
    exports: prometheus::IntCounterVec,
    dropped: prometheus::IntCounterVec,
    failing: Arc<[std::sync::atomic::AtomicBool; 2]>,
}

impl Counters {
    /// Counters over these two families.
    pub fn new(exports: prometheus::IntCounterVec, dropped: prometheus::IntCounterVec) -> Self {
        Counters {
            exports,
            dropped,
            failing: Arc::default(),
        }
    }

    /// The families, to register.
    pub fn families(&self) -> [prometheus::IntCounterVec; 2] {
        [self.exports.clone(), self.dropped.clone()]
    }

    fn export(&self, signal: &'static str, error: Option<&dyn std::fmt::Display>) {
        let result = if error.is_some() { "failed" } else { "ok" };
        self.exports.with_label_values(&[signal, result]).inc();
        let slot = &self.failing[usize::from(signal == "traces")];
        let was = slot.swap(error.is_some(), std::sync::atomic::Ordering::Relaxed);
        match error {
            Some(e) if !was => tracing::warn!(signal, error = %e, "OTLP export failing"),
            Some(e) => tracing::debug!(signal, error = %e, "OTLP export failed again"),
            None if was => tracing::info!(signal, "OTLP export recovered"),
            None => {}
        }
    }

    fn dropped(&self, reason: &str, n: u64) {
        self.dropped.with_label_values(&[reason]).inc_by(n);
    }
}

/// The running export: the owner's operations sink.
#[derive(Debug)]
pub struct Otlp {
    provider: SdkMeterProvider,
    histograms: instruments::Histograms,
    spans: Option<spans::Queue>,
    span_task: Option<tokio::task::JoinHandle<()>>,
    scope: InstrumentationScope,
    cancel: CancellationToken,
}

impl Otlp {
    /// Build the exporters and start pushing. Call from inside the runtime.
    pub fn start(
        cfg: &OtlpConfig,
        snapshots: &Reader,
        counters: Counters,
    ) -> Result<Otlp, OtlpError> {
        let resource = resource();
        let metrics = Counted {
            inner: metric_exporter(cfg)?,
            handle: tokio::runtime::Handle::current(),
            timeout: cfg.timeout,
            counters: counters.clone(),
        };
        let reader = PeriodicReader::builder(metrics)
            .with_interval(cfg.interval)
            .build();
        let provider = SdkMeterProvider::builder()
            .with_resource(resource.clone())
            .with_reader(reader)
            .build();
        let scope = InstrumentationScope::builder("mcpmon")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let meter = provider.meter_with_scope(scope.clone());
        let histograms = instruments::Histograms::new(&meter);
        instruments::observe_judgment(&meter, snapshots);
        let cancel = CancellationToken::new();
        let (spans, span_task) = match &cfg.traces_endpoint {
            Some(endpoint) => {
                let mut exporter = span_exporter(cfg, endpoint)?;
                opentelemetry_sdk::trace::SpanExporter::set_resource(&mut exporter, &resource);
                let (q, t) = spans::start(
                    exporter,
                    cfg.queue_size,
                    cfg.timeout,
                    counters,
                    cancel.clone(),
                );
                (Some(q), Some(t))
            }
            None => (None, None),
        };
        tracing::info!(
            endpoint = %cfg.metrics_endpoint,
            protocol = ?cfg.protocol,
            interval_ms = cfg.interval.as_millis() as u64,
            traces = cfg.traces_endpoint.is_some(),
            sample_ratio = cfg.sample_ratio,
            "OTLP export on"
        );
        Ok(Otlp {
            provider,
            histograms,
            spans,
            span_task,
            scope,
            cancel,
        })
    }

    /// Push what is left (one last metrics export, the queued spans) and
    /// stop, within `deadline`.
    pub async fn shutdown(self, deadline: Duration) {
        self.cancel.cancel();
        let provider = self.provider;
        // The SDK's shutdown blocks until its reader thread has exported;
        // that export runs on this runtime, so it must not block a worker.
        let metrics = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(deadline));
        let spans = async {
            if let Some(t) = self.span_task {
                let _ = t.await;
            }
        };
        let _ = tokio::time::timeout(deadline, async { tokio::join!(metrics, spans) }).await;
    }
}

impl Operations for Otlp {
    fn operation(&self, op: &Operation<'_>) {
        let attributes = self.histograms.operation(op);
        if let Some(q) = &self.spans
            && let Some(span) = spans::span(op, attributes, &self.scope)
        {
            q.push(span);
        }
    }

    fn session_ended(&self, end: &SessionEnd<'_>) {
        self.histograms.session(end);
    }
}

/// The monitor's resource: `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES` (read by the SDK), `service.name` mcpmon
/// when neither names one.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let b = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if named {
        b.build()
    } else {
        b.with_service_name("mcpmon").build()
    }
}

fn header_map(cfg: &OtlpConfig) -> HashMap<String, String> {
    cfg.headers
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_owned()))
        .collect()
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, OtlpError> {
    std::fs::read(path).map_err(|error| OtlpError::File {
        path: path.display().to_string(),
        error,
    })
}

/// The HTTP client of OTLP/HTTP: rustls, the configured CA and identity.
fn http_client(cfg: &OtlpConfig) -> Result<reqwest::Client, OtlpError> {
    let build = |e: reqwest::Error| OtlpError::Build(e.to_string());
    let mut b = reqwest::Client::builder()
        .timeout(cfg.timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(ca) = &cfg.ca_file {
        for cert in reqwest::Certificate::from_pem_bundle(&read(ca)?).map_err(build)? {
            b = b.add_root_certificate(cert);
        }
    }
    if let Some((cert, key)) = &cfg.identity {
        let mut pem = read(cert)?;
        pem.extend(read(key)?);
        b = b.identity(reqwest::Identity::from_pem(&pem).map_err(build)?);
    }
    b.build().map_err(build)
}

/// gRPC's TLS, when the endpoint is `https://` or TLS files are given.
fn grpc_tls(
    cfg: &OtlpConfig,
    endpoint: &str,
) -> Result<Option<tonic::transport::ClientTlsConfig>, OtlpError> {
    if !endpoint.starts_with("https://") && cfg.ca_file.is_none() && cfg.identity.is_none() {
        return Ok(None);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
    if let Some(ca) = &cfg.ca_file {
        tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    if let Some((cert, key)) = &cfg.identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(
            read(cert)?,
            read(key)?,
        ));
    }
    Ok(Some(tls))
}

fn metadata(cfg: &OtlpConfig) -> tonic::metadata::MetadataMap {
    let mut m = tonic::metadata::MetadataMap::new();
    for (k, v) in &cfg.headers {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(k.as_bytes()),
            v.expose().parse(),
        ) {
            m.insert(k, v);
        }
    }
    m
}

fn built(e: opentelemetry_otlp::ExporterBuildError) -> OtlpError {
    OtlpError::Build(e.to_string())
}

/// One exporter builder (metrics' or spans') set up for `endpoint` over
/// the configured protocol, headers, timeout and TLS, then built.
macro_rules! exporter {
    ($builder:expr, $cfg:expr, $endpoint:expr) => {{
        let (cfg, endpoint): (&OtlpConfig, &str) = ($cfg, $endpoint);
        match cfg.protocol {
            Protocol::HttpProtobuf => $builder
                .with_http()
                .with_endpoint(endpoint)
                .with_timeout(cfg.timeout)
                .with_headers(header_map(cfg))
                .with_http_client(http_client(cfg)?)
                .build(),
            Protocol::Grpc => {
                let b = $builder
                    .with_tonic()
                    .with_endpoint(endpoint)
                    .with_timeout(cfg.timeout)
                    .with_metadata(metadata(cfg));
                match grpc_tls(cfg, endpoint)? {
                    Some(tls) => b.with_tls_config(tls).build(),
                    None => b.build(),
                }
            }
        }
        .map_err(built)
    }};
}

fn metric_exporter(cfg: &OtlpConfig) -> Result<opentelemetry_otlp::MetricExporter, OtlpError> {
    let b = opentelemetry_otlp::MetricExporter::builder().with_temporality(Temporality::Cumulative);
    exporter!(b, cfg, &cfg.metrics_endpoint)
}

fn span_exporter(
    cfg: &OtlpConfig,
    endpoint: &str,
) -> Result<opentelemetry_otlp::SpanExporter, OtlpError> {
    exporter!(opentelemetry_otlp::SpanExporter::builder(), cfg, endpoint)
}

/// The metrics exporter as the SDK's reader thread drives it: each export
/// runs on the runtime (where the HTTP and gRPC clients live), bounded by
/// the timeout, and counted.
#[derive(Debug)]
struct Counted {
    inner: opentelemetry_otlp::MetricExporter,
    handle: tokio::runtime::Handle,
    timeout: Duration,
    counters: Counters,
}

impl PushMetricExporter for Counted {
    fn export(
        &self,
        metrics: &ResourceMetrics,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        // The reader thread is not a runtime thread, so it may block on one.
        let r = self.handle.block_on(async {
            match tokio::time::timeout(self.timeout, self.inner.export(metrics)).await {
                Ok(r) => r,
                Err(_) => Err(OTelSdkError::Timeout(self.timeout)),
            }
        });
        let error = r.as_ref().err().map(|e| e as &dyn std::fmt::Display);
        self.counters.export("metrics", error);
        std::future::ready(r)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

//! OTLP export settings: the `--otlp.*` flags, and the OpenTelemetry
//! environment variables users expect, resolved once into an
//! [`OtlpConfig`] by a pure function of both. A flag wins over its
//! variable; a signal's own variable wins over the generic one, as the
//! OTLP exporter specification says.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::Secret;

/// The `--otlp.*` flags.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct OtlpFlags {
    /// Push metrics (and sampled probe spans) over OTLP to this collector
    /// or backend: the base URL (`/v1/metrics` and `/v1/traces` are added
    /// for HTTP). Also on when OTEL_EXPORTER_OTLP_ENDPOINT or
    /// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set.
    #[arg(long = "otlp.endpoint", value_name = "URL")]
    pub endpoint: Option<String>,
    /// `http/protobuf` (default) or `grpc` (OTEL_EXPORTER_OTLP_PROTOCOL).
    #[arg(long = "otlp.protocol", value_name = "PROTOCOL")]
    pub protocol: Option<String>,
    /// A request header, NAME=VALUE; repeatable (OTEL_EXPORTER_OTLP_HEADERS).
    /// Values are secrets: never logged.
    #[arg(long = "otlp.header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,
    /// How often metrics are pushed (OTEL_METRIC_EXPORT_INTERVAL, in ms; default 60s).
    #[arg(long = "otlp.interval", value_parser = crate::config::parse_duration)]
    pub interval: Option<Duration>,
    /// Longest one export may take, retries included (OTEL_EXPORTER_OTLP_TIMEOUT, in ms; default 10s).
    #[arg(long = "otlp.timeout", value_parser = crate::config::parse_duration)]
    pub timeout: Option<Duration>,
    /// CA certificates (PEM) that sign the receiver's certificate.
    #[arg(long = "otlp.tls.ca-file", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM), with `--otlp.tls.key-file`.
    #[arg(
        long = "otlp.tls.cert-file",
        value_name = "FILE",
        requires = "key_file"
    )]
    pub cert_file: Option<PathBuf>,
    /// Client key (PEM), with `--otlp.tls.cert-file`.
    #[arg(
        long = "otlp.tls.key-file",
        value_name = "FILE",
        requires = "cert_file"
    )]
    pub key_file: Option<PathBuf>,
    /// Share of probes whose spans are exported, 0 to 1 (OTEL_TRACES_SAMPLER
    /// and OTEL_TRACES_SAMPLER_ARG; default 0: no spans). Sampled probes
    /// send the sampled flag in their `traceparent`.
    #[arg(long = "otlp.traces.sample-ratio", value_name = "RATIO")]
    pub sample_ratio: Option<f64>,
    /// Most finished spans waiting for export; more are dropped and counted.
    #[arg(long = "otlp.traces.queue-size", default_value_t = 2048)]
    pub queue_size: usize,
}

/// The wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Protobuf over HTTP POST.
    HttpProtobuf,
    /// gRPC.
    Grpc,
}

/// Resolved OTLP settings.
#[derive(Clone, Debug)]
pub struct OtlpConfig {
    /// Where metrics go (the full URL for HTTP).
    pub metrics_endpoint: String,
    /// Where spans go, when spans are sampled at all.
    pub traces_endpoint: Option<String>,
    /// The wire protocol.
    pub protocol: Protocol,
    /// Request headers (values secret).
    pub headers: Vec<(String, Secret)>,
    /// Metrics push interval.
    pub interval: Duration,
    /// Bound on one export.
    pub timeout: Duration,
    /// TLS files.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// Share of probe spans exported.
    pub sample_ratio: f64,
    /// Span queue bound.
    pub queue_size: usize,
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// A bad value, named with where it came from.
    #[error("{source_name}: {problem}")]
    Invalid {
        /// The flag or variable.
        source_name: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The exporter refused to build.
    #[error("OTLP exporter: {0}")]
    Build(String),
    /// A TLS file could not be read.
    #[error("{path}: {error}")]
    File {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
}

fn invalid(source_name: &'static str, problem: impl Into<String>) -> OtlpError {
    OtlpError::Invalid {
        source_name,
        problem: problem.into(),
    }
}

/// Resolve `flags` against the environment (`env` looks a variable up).
/// `None` when no endpoint is configured: export is off.
pub fn resolve(
    flags: &OtlpFlags,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<OtlpConfig>, OtlpError> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let protocol = protocol(flags, &env)?;
    let signal = |path: &str, own: &str| -> Option<String> {
        let base = |b: String| match protocol {
            Protocol::HttpProtobuf => format!("{}/{path}", b.trim_end_matches('/')),
            Protocol::Grpc => b,
        };
        flags
            .endpoint
            .clone()
            .map(base)
            .or_else(|| env(own))
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(base))
    };
    // The SDK's off switch, as every OpenTelemetry SDK honours it.
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let Some(metrics_endpoint) = signal("v1/metrics", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") else {
        return Ok(None);
    };
    // Checked here so a typo fails at start, with the flag's name.
    url::Url::parse(&metrics_endpoint).map_err(|e| {
        invalid(
            "--otlp.endpoint",
            format!("the metrics endpoint {metrics_endpoint:?}: {e}"),
        )
    })?;
    let sample_ratio = match flags.sample_ratio {
        Some(r) => r,
        None => sampler(env("OTEL_TRACES_SAMPLER"), env("OTEL_TRACES_SAMPLER_ARG"))?,
    };
    if !(0.0..=1.0).contains(&sample_ratio) {
        return Err(invalid(
            "--otlp.traces.sample-ratio",
            "must be between 0 and 1",
        ));
    }
    let traces_endpoint = (sample_ratio > 0.0)
        .then(|| signal("v1/traces", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        .flatten();
    let millis = |name: &'static str| -> Result<Option<Duration>, OtlpError> {
        env(name)
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| invalid(name, format!("{v:?} is not a number of milliseconds")))
            })
            .transpose()
    };
    let interval = match flags.interval {
        Some(d) => d,
        None => millis("OTEL_METRIC_EXPORT_INTERVAL")?.unwrap_or(Duration::from_secs(60)),
    };
    let timeout = match flags.timeout {
        Some(d) => d,
        None => millis("OTEL_EXPORTER_OTLP_TIMEOUT")?.unwrap_or(Duration::from_secs(10)),
    };
    if interval.is_zero() || timeout.is_zero() {
        return Err(invalid(
            "--otlp.interval",
            "the interval and timeout must be above zero",
        ));
    }
    Ok(Some(OtlpConfig {
        metrics_endpoint,
        traces_endpoint,
        protocol,
        headers: headers(&flags.headers, env("OTEL_EXPORTER_OTLP_HEADERS"))?,
        interval,
        // An export outliving its interval would only queue behind itself.
        timeout: timeout.min(interval),
        ca_file: flags.ca_file.clone(),
        identity: flags.cert_file.clone().zip(flags.key_file.clone()),
        sample_ratio,
        queue_size: flags.queue_size.max(1),
    }))
}

/// The wire protocol: the flag, else the metrics variable, else the
/// generic one; HTTP/protobuf when none is set.
fn protocol(
    flags: &OtlpFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Protocol, OtlpError> {
    let chosen = flags
        .protocol
        .clone()
        .map(|p| ("--otlp.protocol", p))
        .or_else(|| {
            env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
                .map(|p| ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", p))
        })
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL").map(|p| ("OTEL_EXPORTER_OTLP_PROTOCOL", p)));
    match chosen {
        None => Ok(Protocol::HttpProtobuf),
        Some((_, p)) if p.trim() == "http/protobuf" => Ok(Protocol::HttpProtobuf),
        Some((_, p)) if p.trim() == "grpc" => Ok(Protocol::Grpc),
        Some((from, p)) => Err(invalid(
            from,
            format!("protocol {p:?} is not offered; use http/protobuf or grpc"),
        )),
    }
}

/// The share of probes sampled by `OTEL_TRACES_SAMPLER` (and its
/// argument): the ratio samplers take their argument (default 1), the
/// always samplers 1 or 0, nothing set 0. mcpmon's spans are roots, so a
/// parent-based sampler reads as its root sampler.
fn sampler(name: Option<String>, arg: Option<String>) -> Result<f64, OtlpError> {
    let ratio = || -> Result<f64, OtlpError> {
        arg.as_deref().map_or(Ok(1.0), |a| {
            a.trim()
                .parse::<f64>()
                .map_err(|_| invalid("OTEL_TRACES_SAMPLER_ARG", format!("{a:?} is not a ratio")))
        })
    };
    match name.as_deref().map(str::trim) {
        None => Ok(0.0),
        Some("always_on" | "parentbased_always_on") => Ok(1.0),
        Some("always_off" | "parentbased_always_off") => Ok(0.0),
        Some("traceidratio" | "parentbased_traceidratio") => ratio(),
        Some(other) => Err(invalid(
            "OTEL_TRACES_SAMPLER",
            format!("sampler {other:?} is not offered; use always_on, always_off or traceidratio"),
        )),
    }
}

/// Flag headers (`NAME=VALUE`) after the variable's (`k1=v1,k2=v2`), so a
/// flag overrides a variable of the same name.
fn headers(flags: &[String], var: Option<String>) -> Result<Vec<(String, Secret)>, OtlpError> {
    let mut out: Vec<(String, Secret)> = Vec::new();
    let mut add = |from: &'static str, pair: &str| -> Result<(), OtlpError> {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(invalid(from, "a header is NAME=VALUE"));
        };
        let k = k.trim().to_ascii_lowercase();
        if http::HeaderName::from_bytes(k.as_bytes()).is_err()
            || http::HeaderValue::from_str(v.trim()).is_err()
        {
            return Err(invalid(
                from,
                format!("header {k:?} is not a valid HTTP header"),
            ));
        }
        out.retain(|(name, _)| *name != k);
        out.push((k, Secret::new(v.trim().to_owned())));
        Ok(())
    };
    for pair in var
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|p| !p.trim().is_empty())
    {
        add("OTEL_EXPORTER_OTLP_HEADERS", pair)?;
    }
    for pair in flags {
        add("--otlp.header", pair)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn export_is_off_without_an_endpoint() {
        let got = resolve(&OtlpFlags::default(), env(&[])).expect("valid");
        assert!(got.is_none());
        let got = resolve(
            &OtlpFlags::default(),
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]),
        );
        assert!(got.expect("valid").is_none(), "an empty variable is unset");
    }

    #[test]
    fn the_generic_variable_gets_signal_paths_and_a_signal_variable_is_taken_as_is() {
        let flags = OtlpFlags {
            sample_ratio: Some(0.5),
            ..OtlpFlags::default()
        };
        let c = resolve(
            &flags,
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://tempo:4318/custom",
                ),
            ]),
        )
        .expect("valid")
        .expect("on");
        assert_eq!(c.metrics_endpoint, "http://collector:4318/v1/metrics");
        assert_eq!(
            c.traces_endpoint.as_deref(),
            Some("http://tempo:4318/custom")
        );
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(
            (c.interval, c.timeout),
            (Duration::from_secs(60), Duration::from_secs(10))
        );
    }

    #[test]
    fn flags_win_over_variables() {
        let flags = OtlpFlags {
            endpoint: Some("http://flag:4317".into()),
            protocol: Some("grpc".into()),
            headers: vec!["Authorization=Bearer flag".into()],
            interval: Some(Duration::from_secs(5)),
            ..OtlpFlags::default()
        };
        let c = resolve(
            &flags,
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "authorization=Bearer env,x-tenant=a",
                ),
                ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "30000"),
            ]),
        )
        .expect("valid")
        .expect("on");
        assert_eq!(
            c.metrics_endpoint, "http://flag:4317",
            "gRPC takes the URL as is"
        );
        assert_eq!(c.protocol, Protocol::Grpc);
        assert_eq!(c.traces_endpoint, None, "no spans unless sampled");
        let names: Vec<(&str, &str)> = c
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(names, [("x-tenant", "a"), ("authorization", "Bearer flag")]);
        assert_eq!(c.interval, Duration::from_secs(5));
        assert_eq!(c.timeout, Duration::from_secs(5), "capped at the interval");
    }

    #[test]
    fn the_sdk_switch_and_samplers_are_honoured() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        let got = |vars: &[(&str, &str)]| resolve(&OtlpFlags::default(), env(vars)).expect("valid");
        assert!(got(&[on, ("OTEL_SDK_DISABLED", "true")]).is_none());
        let ratio = |vars: &[(&str, &str)]| got(vars).expect("on").sample_ratio;
        assert_eq!(ratio(&[on]), 0.0, "no spans unless asked");
        assert_eq!(ratio(&[on, ("OTEL_TRACES_SAMPLER", "always_on")]), 1.0);
        assert_eq!(
            ratio(&[
                on,
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25")
            ]),
            0.25
        );
        let c = got(&[on, ("OTEL_TRACES_SAMPLER", "always_on")]).expect("on");
        assert_eq!(
            c.traces_endpoint.as_deref(),
            Some("http://c:4318/v1/traces")
        );
        let flag = OtlpFlags {
            sample_ratio: Some(0.0),
            ..OtlpFlags::default()
        };
        let c = resolve(&flag, env(&[on, ("OTEL_TRACES_SAMPLER", "always_on")]));
        assert_eq!(
            c.expect("valid").expect("on").sample_ratio,
            0.0,
            "the flag wins"
        );
        let e = resolve(
            &OtlpFlags::default(),
            env(&[on, ("OTEL_TRACES_SAMPLER", "jaeger_remote")]),
        );
        assert!(
            e.expect_err("refused")
                .to_string()
                .starts_with("OTEL_TRACES_SAMPLER: ")
        );
    }

    #[test]
    fn bad_values_name_their_source() {
        let bad = |flags: OtlpFlags, vars: &[(&str, &str)]| {
            resolve(&flags, env(vars)).expect_err("refused").to_string()
        };
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        let e = bad(
            OtlpFlags::default(),
            &[on[0], ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
        );
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL: "), "{e}");
        let e = bad(
            OtlpFlags::default(),
            &[on[0], ("OTEL_METRIC_EXPORT_INTERVAL", "5s")],
        );
        assert!(e.starts_with("OTEL_METRIC_EXPORT_INTERVAL: "), "{e}");
        let e = bad(
            OtlpFlags {
                headers: vec!["novalue".into()],
                ..OtlpFlags::default()
            },
            &on,
        );
        assert!(e.starts_with("--otlp.header: "), "{e}");
        let e = bad(
            OtlpFlags {
                sample_ratio: Some(2.0),
                ..OtlpFlags::default()
            },
            &on,
        );
        assert!(e.starts_with("--otlp.traces.sample-ratio: "), "{e}");
        let e = bad(
            OtlpFlags {
                endpoint: Some("not a url".into()),
                ..OtlpFlags::default()
            },
            &[],
        );
        assert!(e.starts_with("--otlp.endpoint: "), "{e}");
    }
}

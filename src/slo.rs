//! SLO documents for a fleet: an availability and a latency objective per
//! server (or per value of a label), written as Sloth `prometheus/v1`
//! specs, Pyrra `ServiceLevelObjective`s or OpenSLO v1 documents over
//! mcpmon's own series. A pure function of the loaded configuration.
//!
//! - Availability is time: `mcpmon_server_down_seconds_total` over
//!   `mcpmon_server_observed_seconds_total`, so an unreachable server
//!   spends budget though no probe reaches it, and maintenance spends none.
//! - Latency is liveness probes answered within a bucket bound of
//!   `mcpmon_ping_duration_seconds`, over all of them.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::ServerSpec;
use crate::config::slo::Slo;

/// The document shape to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SloFormat {
    /// Sloth `prometheus/v1` specs (`sloth generate -i`).
    Sloth,
    /// Pyrra `ServiceLevelObjective` objects (`pyrra.dev/v1alpha1`).
    Pyrra,
    /// OpenSLO v1: a Service and its SLOs.
    Openslo,
}

/// Why no documents could be written.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SloError {
    /// Nothing to write for.
    #[error("no server in the fleet file{0}")]
    NoServers(String),
    /// Sloth takes one period per run, from its command line.
    #[error(
        "Sloth reads one SLO period per run (--default-slo-period), and these objectives differ: {0}; write them in separate runs, or give them one window"
    )]
    SlothPeriods(String),
}

/// The series an objective's queries select, and for whom.
#[derive(Clone, Debug, PartialEq)]
pub struct Objective {
    /// A name every format accepts (lowercase, digits and `-`), unique.
    pub name: String,
    /// Whom it is for, in words.
    pub who: String,
    /// The matcher that selects its servers' series.
    pub matcher: String,
    /// Labels its documents carry (`server`, or the grouping label).
    pub labels: BTreeMap<String, String>,
    /// Its targets.
    pub slo: Slo,
}

/// One objective per server, or per value of the label `by` among the
/// servers that have it (the strictest of their targets).
pub fn objectives<S: Borrow<ServerSpec>>(
    servers: &[S],
    by: Option<&str>,
) -> Result<Vec<Objective>, SloError> {
    let servers = servers.iter().map(Borrow::borrow);
    let out: Vec<Objective> = match by {
        None => servers
            .map(|s: &ServerSpec| Objective {
                name: name(&s.id),
                who: format!("MCP server {}", s.id),
                matcher: format!("server=\"{}\"", s.id),
                labels: BTreeMap::from([("server".to_owned(), s.id.clone())]),
                slo: s.settings.slo.clone(),
            })
            .collect(),
        Some(label) => {
            let mut groups: BTreeMap<&str, Vec<&ServerSpec>> = BTreeMap::new();
            for s in servers {
                if let Some(l) = s.labels.iter().find(|l| l.name == label) {
                    groups.entry(&l.value).or_default().push(s);
                }
            }
            groups
                .into_iter()
                .map(|(value, members)| {
                    // Ids are `[A-Za-z0-9_.-]`: only the dot needs escaping.
                    let ids: Vec<String> =
                        members.iter().map(|s| s.id.replace('.', "\\\\.")).collect();
                    Objective {
                        name: name(&format!("{label}-{value}")),
                        who: format!("the MCP servers with {label}={value}"),
                        matcher: format!("server=~\"{}\"", ids.join("|")),
                        labels: BTreeMap::from([(label.to_owned(), value.to_owned())]),
                        slo: strictest(members.iter().map(|s| &s.settings.slo)),
                    }
                })
                .collect()
        }
    };
    if out.is_empty() {
        let with = by
            .map(|l| format!(" with the label {l:?}"))
            .unwrap_or_default();
        return Err(SloError::NoServers(with));
    }
    Ok(out)
}

/// The highest targets, the tightest latency bound, the longest window.
fn strictest<'a>(slos: impl Iterator<Item = &'a Slo>) -> Slo {
    let mut out: Option<Slo> = None;
    for s in slos {
        out = Some(match out {
            None => s.clone(),
            Some(o) => Slo {
                availability: o.availability.max(s.availability),
                latency: o.latency.max(s.latency),
                latency_threshold: o.latency_threshold.min(s.latency_threshold),
                window: o.window.max(s.window),
            },
        });
    }
    out.unwrap_or_default()
}

/// `text` as a name every format takes: DNS-label characters, and a hash
/// of the original when that changed it, so two ids never meet.
fn name(text: &str) -> String {
    use md5::Digest;
    let mut n: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    n = n
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    n.truncate(40);
    let n = n.trim_end_matches('-').to_owned();
    if n == text && !n.is_empty() {
        return n;
    }
    let sum = md5::Md5::digest(text.as_bytes());
    let tag: String = sum[..3].iter().map(|b| format!("{b:02x}")).collect();
    if n.is_empty() {
        format!("x-{tag}")
    } else {
        format!("{n}-{tag}")
    }
}

/// A window as Prometheus writes durations: days when whole, else hours.
fn window(slo: &Slo) -> String {
    let s = slo.window.0.as_secs();
    if s.is_multiple_of(86_400) {
        format!("{}d", s / 86_400)
    } else {
        format!("{}h", s / 3600)
    }
}

/// The two indicators of an objective, with `{w}` where the rate window goes.
struct Queries {
    down: String,
    observed: String,
    answered_in_time: String,
    answered: String,
}

fn queries(o: &Objective) -> Queries {
    let seconds = o.slo.latency_threshold.0.as_secs_f64();
    // Validated when the config loaded: the bound is a bucket's.
    let le = Slo::threshold_le(seconds).unwrap_or("+Inf");
    let m = &o.matcher;
    Queries {
        down: format!("mcpmon_server_down_seconds_total{{{m}}}"),
        observed: format!("mcpmon_server_observed_seconds_total{{{m}}}"),
        answered_in_time: format!("mcpmon_ping_duration_seconds_bucket{{{m},le=\"{le}\"}}"),
        answered: format!("mcpmon_ping_duration_seconds_count{{{m}}}"),
    }
}

/// The documents for `objectives` in `format`, as one YAML stream.
/// `namespace` is where Pyrra's objects go.
pub fn render(
    objectives: &[Objective],
    format: SloFormat,
    namespace: &str,
) -> Result<String, SloError> {
    let docs: Vec<Value> = match format {
        SloFormat::Sloth => vec![sloth(objectives)?],
        SloFormat::Pyrra => objectives
            .iter()
            .flat_map(|o| pyrra(o, namespace))
            .collect(),
        SloFormat::Openslo => std::iter::once(openslo_service())
            .chain(objectives.iter().flat_map(openslo))
            .collect(),
    };
    let mut out = String::new();
    if format == SloFormat::Sloth {
        let period = objectives
            .first()
            .map(|o| window(&o.slo))
            .unwrap_or_default();
        out.push_str(&format!(
            "# Sloth takes the SLO period from its command line:\n#   sloth generate -i THIS_FILE --default-slo-period {period}\n"
        ));
    }
    for doc in docs {
        out.push_str("---\n");
        // A Value of strings, numbers and maps always serializes.
        out.push_str(&yaml_serde::to_string(&doc).unwrap_or_default());
    }
    Ok(out)
}

/// The availability objective in words.
fn availability(o: &Objective) -> String {
    format!(
        "Availability of {}: up {}% of the time observed (maintenance windows left out).",
        o.who, o.slo.availability
    )
}

/// The latency objective in words.
fn latency(o: &Objective) -> String {
    format!(
        "Latency of {}: {}% of liveness probes answered within {}.",
        o.who,
        o.slo.latency,
        humantime::format_duration(o.slo.latency_threshold.0)
    )
}

fn sloth(objectives: &[Objective]) -> Result<Value, SloError> {
    let periods: Vec<String> = objectives
        .iter()
        .map(|o| format!("{} {}", o.name, window(&o.slo)))
        .collect();
    if objectives
        .iter()
        .any(|o| o.slo.window != objectives[0].slo.window)
    {
        return Err(SloError::SlothPeriods(periods.join(", ")));
    }
    let mut slos = Vec::new();
    for o in objectives {
        let q = queries(o);
        let rate = |m: &str| format!("sum(rate({m}[{{{{.window}}}}]))");
        let alerting = |what: &str| {
            // The objective's own labels tell its alerts apart.
            let mut labels = o.labels.clone();
            labels.insert("category".to_owned(), what.to_lowercase());
            json!({
                "name": format!("Mcp{what}BudgetBurn"),
                "labels": labels,
                "annotations": {"summary": format!("{} burns its {} error budget too fast", o.who, what.to_lowercase())},
                "page_alert": {"labels": {"severity": "critical"}},
                "ticket_alert": {"labels": {"severity": "warning"}},
            })
        };
        slos.push(json!({
            "name": format!("{}-availability", o.name),
            "objective": o.slo.availability,
            "description": availability(o),
            "labels": o.labels,
            "sli": {"events": {"error_query": rate(&q.down), "total_query": rate(&q.observed)}},
            "alerting": alerting("Availability"),
        }));
        slos.push(json!({
            "name": format!("{}-latency", o.name),
            "objective": o.slo.latency,
            "description": latency(o),
            "labels": o.labels,
            "sli": {"events": {
                "error_query": format!("{} - {}", rate(&q.answered), rate(&q.answered_in_time)),
                "total_query": rate(&q.answered),
            }},
            "alerting": alerting("Latency"),
        }));
    }
    Ok(json!({"version": "prometheus/v1", "service": "mcpmon", "slos": slos}))
}

fn pyrra(o: &Objective, namespace: &str) -> [Value; 2] {
    let q = queries(o);
    let doc = |suffix: &str, target: f64, description: String, indicator: Value| {
        json!({
            "apiVersion": "pyrra.dev/v1alpha1",
            "kind": "ServiceLevelObjective",
            "metadata": {
                "name": format!("{}-{suffix}", o.name),
                "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "mcpmon"},
            },
            "spec": {
                "target": target.to_string(),
                "window": window(&o.slo),
                "description": description,
                "indicator": indicator,
            },
        })
    };
    [
        doc(
            "availability",
            o.slo.availability,
            up_text(o),
            json!({"ratio": {"errors": {"metric": q.down}, "total": {"metric": q.observed}}}),
        ),
        doc(
            "latency",
            o.slo.latency,
            answered_text(o),
            json!({"latency": {"success": {"metric": q.answered_in_time}, "total": {"metric": q.answered}}}),
        ),
    ]
}

/// What the availability objective says, in words (Pyrra and OpenSLO).
fn up_text(o: &Objective) -> String {
    format!(
        "{} is up {}% of the time it is observed.",
        o.who, o.slo.availability
    )
}

/// What the latency objective says, in words (Pyrra and OpenSLO).
fn answered_text(o: &Objective) -> String {
    format!(
        "Liveness probes to {} answered within {}.",
        o.who,
        humantime::format_duration(o.slo.latency_threshold.0)
    )
}

/// A percentage as a ratio, without the binary residue of dividing
/// (99.9 / 100 is 0.9990000000000001): the nearest double to the decimal.
fn fraction(percent: f64) -> f64 {
    (percent * 1e6).round() / 1e8
}

fn openslo_service() -> Value {
    json!({
        "apiVersion": "openslo/v1",
        "kind": "Service",
        "metadata": {"name": "mcpmon"},
        "spec": {"description": "MCP servers as mcpmon judges them"},
    })
}

fn openslo(o: &Objective) -> [Value; 2] {
    let q = queries(o);
    let source =
        |query: &str| json!({"metricSource": {"type": "Prometheus", "spec": {"query": query}}});
    let doc = |suffix: &str, target: f64, description: String, ratio: Value| {
        json!({
            "apiVersion": "openslo/v1",
            "kind": "SLO",
            "metadata": {"name": format!("{}-{suffix}", o.name)},
            "spec": {
                "description": description,
                "service": "mcpmon",
                "indicator": {
                    "metadata": {"name": format!("{}-{suffix}-sli", o.name)},
                    "spec": {"ratioMetric": ratio},
                },
                "timeWindow": [{"duration": window(&o.slo), "isRolling": true}],
                "budgetingMethod": "Occurrences",
                "objectives": [{"displayName": suffix, "target": fraction(target)}],
            },
        })
    };
    [
        doc(
            "availability",
            o.slo.availability,
            up_text(o),
            json!({"counter": true, "bad": source(&q.down), "total": source(&q.observed)}),
        ),
        doc(
            "latency",
            o.slo.latency,
            answered_text(o),
            json!({"counter": true, "good": source(&q.answered_in_time), "total": source(&q.answered)}),
        ),
    ]
}

#[cfg(test)]
mod tests;

//! The history read from a Prometheus-compatible query API (Prometheus,
//! Thanos, Mimir) over mcpmon's own series, for replicas and shards that
//! share one history and keep no file. Rows come from `increase()` over
//! each period; transitions from the changes of `mcpmon_server_state`.
//! Where several locations watch a server, a period counts the most
//! observed time and the least down time among them: a broken path is not
//! the server's downtime, as in the burn-rate rules.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::rows::{Daily, Resolution, Row, Transition};
use super::store::StoreError;
use crate::state::series::Spent;

/// Most points Prometheus returns of one series (its own limit is 11 000).
const MOST_POINTS: i64 = 10_000;

/// The most bytes one answer may take: a window's points for a few
/// series are well under a megabyte; a larger answer is not one.
const MOST_BYTES: usize = 16 << 20;

/// A query API.
#[derive(Clone)]
pub struct Remote {
    client: reqwest::Client,
    base: String,
}

impl Remote {
    /// The API at `base` (`http://prometheus:9090`), asked with `client`.
    pub fn new(client: reqwest::Client, base: &str) -> Remote {
        Remote {
            client,
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    /// `server`'s rows of resolution `res` from `since` to `now` (unix
    /// seconds), and its state changes.
    pub async fn read(
        &self,
        server: &str,
        res: Resolution,
        since: i64,
        now: i64,
    ) -> Result<(Vec<(i64, Row)>, Vec<Transition>), StoreError> {
        let step = res.seconds();
        let sel = selector(server);
        let inc = |m: &str| format!("increase({m}{sel}[{step}s])");
        let q = |agg: &str, m: &str| format!("{agg}({})", inc(m));
        let quantile = |p: f64| {
            format!(
                "histogram_quantile({p}, sum by (le) ({})) * 1000",
                inc("mcpmon_ping_duration_seconds_bucket")
            )
        };
        // Each series at the end of its period: the row starts a step before.
        let (start, end) = (since + step, now - now.rem_euclid(step) + step);
        let series = [
            q("max", "mcpmon_server_observed_seconds_total"),
            q("min", "mcpmon_server_down_seconds_total"),
            q("max", "mcpmon_probes_total"),
            q("max", "mcpmon_probe_failures_total"),
            q("max", "mcpmon_ping_duration_seconds_count"),
            quantile(0.5),
            quantile(0.95),
        ];
        let mut columns = Vec::with_capacity(series.len());
        for expr in &series {
            columns.push(self.range(expr, start, end, step).await?);
        }
        let mut rows: BTreeMap<i64, Row> = BTreeMap::new();
        for (i, column) in columns.iter().enumerate() {
            for (t, v) in column.iter().flat_map(|c| c.1.iter()) {
                let row = rows.entry(t - step).or_default();
                let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
                match i {
                    0 => row.spent.healthy += v,
                    1 => row.spent.down += v,
                    2 => row.probes += v.round() as u64,
                    3 => row.failures += v.round() as u64,
                    4 => row.latency_count += v.round() as u64,
                    5 => row.latency_p50_ms = v,
                    _ => row.latency_p95_ms = v,
                }
            }
        }
        for row in rows.values_mut() {
            // Observed minus down is the up time; no split by verdict here.
            row.spent = Spent {
                healthy: (row.spent.healthy - row.spent.down).max(0.0),
                ..row.spent
            };
        }
        let transitions = self.transitions(&sel, since, now).await?;
        Ok((rows.into_iter().collect(), transitions))
    }

    /// Every server's observed and down seconds per day from `since` to
    /// `now`, for the fleet page's strip: two queries for the whole fleet.
    pub async fn days(&self, since: i64, now: i64) -> Result<Daily, StoreError> {
        let step = Resolution::Day.seconds();
        let (start, end) = (since + step, now - now.rem_euclid(step) + step);
        let q = |agg: &str, m: &str| format!("{agg} by (server) (increase({m}[{step}s]))");
        let observed = self
            .range(
                &q("max", "mcpmon_server_observed_seconds_total"),
                start,
                end,
                step,
            )
            .await?;
        let down = self
            .range(
                &q("min", "mcpmon_server_down_seconds_total"),
                start,
                end,
                step,
            )
            .await?;
        let mut daily = Daily::default();
        for (column, is_down) in [(&observed, false), (&down, true)] {
            for (server, points) in column {
                for &(t, v) in points.iter().filter(|p| p.1.is_finite()) {
                    let v = v.max(0.0);
                    let (o, d) = if is_down { (0.0, v) } else { (v, 0.0) };
                    daily.add(server, t - step, o, d);
                }
            }
        }
        Ok(daily)
    }

    /// State changes, from the state series at the finest step the API
    /// allows over the window; the reason is the one in force then.
    async fn transitions(
        &self,
        sel: &str,
        since: i64,
        now: i64,
    ) -> Result<Vec<Transition>, StoreError> {
        let step = ((now - since) / MOST_POINTS).max(1);
        let states = self
            .range(
                &format!("max by (state) (mcpmon_server_state{sel}) == 1"),
                since,
                now,
                step,
            )
            .await?;
        let reasons = self
            .range(
                &format!("max by (reason) (mcpmon_server_reason{sel})"),
                since,
                now,
                step,
            )
            .await?;
        let at = |series: &[(String, Vec<(i64, f64)>)]| -> BTreeMap<i64, String> {
            let mut out = BTreeMap::new();
            for (label, points) in series {
                for (t, _) in points {
                    out.insert(*t, label.clone());
                }
            }
            out
        };
        let (states, reasons) = (at(&states), at(&reasons));
        let mut out = Vec::new();
        let mut last: Option<&String> = None;
        for (t, state) in &states {
            if last.is_some_and(|l| l != state) && state != "unknown" {
                out.push(Transition {
                    at: *t as f64,
                    state: state.clone(),
                    reason: reasons
                        .range(..=t)
                        .next_back()
                        .map(|(_, r)| r.clone())
                        .unwrap_or_default(),
                    detail: format!("from Prometheus, to within {step} s"),
                });
            }
            last = Some(state);
        }
        Ok(out)
    }

    /// A range query: each series as (its one label's value, points).
    async fn range(
        &self,
        expr: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<(String, Vec<(i64, f64)>)>, StoreError> {
        let remote = |e: String| StoreError::Remote(e);
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query_range", self.base),
            &[
                ("query", expr.to_owned()),
                ("start", start.to_string()),
                ("end", end.to_string()),
                ("step", step.to_string()),
            ],
        )
        .map_err(|e| remote(e.to_string()))?;
        let mut response = self
            .client
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| remote(e.to_string()))?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| remote(e.to_string()))? {
            if body.len() + chunk.len() > MOST_BYTES {
                return Err(remote(format!("an answer over {MOST_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        let answer: Value = serde_json::from_slice(&body).map_err(|e| remote(e.to_string()))?;
        if answer["status"] != "success" {
            // The API's own words reach the page and the log: defused.
            let said = format!("{}: {}", answer["errorType"], answer["error"]);
            return Err(remote(crate::config::defuse(&said, 300)));
        }
        let series = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(series
            .iter()
            .map(|s| {
                let label = s["metric"]
                    .as_object()
                    .and_then(|m| m.values().next())
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let points = s["values"]
                    .as_array()
                    .map(|vs| {
                        vs.iter()
                            .filter_map(|p| {
                                let t = p[0].as_f64()? as i64;
                                let v = p[1].as_str()?.parse::<f64>().ok()?;
                                Some((t, v))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (label, points)
            })
            .collect())
    }
}

/// The PromQL selector of one server; its id quoted as a PromQL string
/// (ids come from discovery too, so they are escaped, not trusted).
fn selector(server: &str) -> String {
    let quoted = server.replace('\\', "\\\\").replace('"', "\\\"");
    format!("{{server=\"{quoted}\"}}")
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An "API" that answers every query with `body`, once per connection.
    async fn answering(body: Vec<u8>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    let _ = c.write_all(head.as_bytes()).await;
                    let _ = c.write_all(&body).await;
                });
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn an_answer_too_large_or_hostile_is_refused_bounded_and_defused() {
        let client = reqwest::Client::new();
        let huge = answering(vec![b' '; super::MOST_BYTES + 1]).await;
        let e = super::Remote::new(client.clone(), &huge)
            .range("up", 0, 60, 60)
            .await
            .expect_err("too large");
        assert!(e.to_string().contains("an answer over"), "{e}");
        let said = br#"{"status":"error","errorType":"bad_data","error":"x\u001b[31m\nforged"}"#;
        let hostile = answering(said.to_vec()).await;
        let e = super::Remote::new(client, &hostile)
            .range("up", 0, 60, 60)
            .await
            .expect_err("an error");
        let text = e.to_string();
        assert!(!text.contains('\u{1b}') && !text.contains('\n'), "{text:?}");
    }

    #[test]
    fn a_server_id_cannot_leave_its_selector() {
        assert_eq!(super::selector("a"), r#"{server="a"}"#);
        assert_eq!(
            super::selector(r#"a"} or up{x="\"#),
            r#"{server="a\"} or up{x=\"\\"}"#
        );
    }
}

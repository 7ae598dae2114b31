//! A `registry_sd_configs` source: walks an MCP Registry's
//! `GET /v0.1/servers` page by page, then, every `refresh_interval`, asks
//! only for what changed since the last walk (`updated_since`).
//!
//! What is kept between walks is one slim record per server name in a
//! [`Kept`] store, bounded in bytes; each page is bounded as an http_sd
//! answer is, read item by item with every field bounded, and a walk reads
//! at most [`MAX_WALK_BYTES`]. A walk that fails leaves the last good list
//! in place; the next one starts over from the beginning.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::BoxFuture;

use super::http::{MAX_REQUEST, client, fetch, remote, shown_url};
use super::{Discover, Document, Mechanism, Task};
use crate::config::clients::Translated;
use crate::config::registry::{Kept, read_page};
use crate::config::{ConfigError, EntrySource, HttpSd};

/// A `registry_sd_configs` entry.
#[derive(Debug, PartialEq)]
pub(super) struct Registry(pub(super) HttpSd);

impl Discover for Registry {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Registry
    }

    fn entry_source<'a>(
        &'a self,
        _origin: &'a Path,
        base: &'a Path,
        own: &'a [SocketAddr],
    ) -> EntrySource<'a> {
        remote(&self.0, base, own)
    }

    /// A walk's kept records, as entries.
    fn translate(
        &self,
        origin: &Path,
        text: &str,
        _env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Translated>, ConfigError> {
        crate::config::registry::as_entries(origin, text).map(Some)
    }

    fn run(&self, task: Task) -> BoxFuture<'static, ()> {
        Box::pin(run(self.0.clone(), task))
    }
}

/// Servers asked for per page (the registry's own maximum is 100).
const PAGE: usize = 100;
/// Most pages one walk reads: 100 000 servers.
const MAX_PAGES: usize = 1000;
/// Most bytes of pages one walk reads: a thousand pages of the registry's
/// own size, 250 KiB each.
const MAX_WALK_BYTES: usize = 256 << 20;
/// No walk outlives this.
const MAX_WALK: Duration = Duration::from_secs(300);

/// Walk now and every interval until cancelled.
async fn run(sd: HttpSd, mut task: Task) {
    let origin = PathBuf::from(shown_url(&sd.url));
    let client = client(&sd);
    // Walked in place (never copied): a failed walk starts over anyway.
    let mut kept = Kept::default();
    let mut since: Option<String> = None;
    loop {
        let started = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let walked = match &client {
            Ok(c) => {
                let walk = walk(c, &sd, since.as_deref(), &mut kept);
                tokio::select! {
                    _ = task.cancel.cancelled() => return,
                    r = tokio::time::timeout(MAX_WALK, walk) => {
                        r.unwrap_or_else(|_| Err("the walk did not finish within its deadline".to_owned()))
                    }
                }
            }
            Err(e) => Err(e.clone()),
        };
        let text = match walked {
            Ok(()) => {
                since = Some(started);
                kept.to_text()
            }
            Err(e) => {
                // Start over next time: an incremental walk needs a whole one before it.
                (kept, since) = (Kept::default(), None);
                Err(e)
            }
        };
        let documents = vec![Document {
            origin: origin.clone(),
            text,
        }];
        if !task.report(documents).await {
            return;
        }
        tokio::select! {
            _ = task.cancel.cancelled() => return,
            _ = tokio::time::sleep(sd.refresh_interval) => {}
            _ = task.checker.global_changed() => {}
        }
    }
}

/// Read every page (or, with `since`, every page of what changed) into
/// `kept`.
async fn walk(
    client: &reqwest::Client,
    sd: &HttpSd,
    since: Option<&str>,
    kept: &mut Kept,
) -> Result<(), String> {
    let search = sd.registry.as_ref().and_then(|r| r.search.as_deref());
    let mut cursor: Option<String> = None;
    let mut read = 0usize;
    for _ in 0..MAX_PAGES {
        let url = page_url(&sd.url, search, since, cursor.as_deref())?;
        let text = tokio::time::timeout(MAX_REQUEST, fetch(client, sd, &url))
            .await
            .unwrap_or_else(|_| Err("no complete page within the deadline".to_owned()))?;
        read += text.len();
        if read > MAX_WALK_BYTES {
            return Err(format!(
                "more than {} MiB of pages in one walk",
                MAX_WALK_BYTES >> 20
            ));
        }
        let (next, items) = take_page(text, kept).await?;
        cursor = next;
        if cursor.is_none() || items == 0 {
            return Ok(());
        }
    }
    Err(format!("more than {MAX_PAGES} pages"))
}

/// Read one page's servers into `kept` on a blocking thread: a page of
/// tens of thousands of entries is CPU work, and on a runtime worker it
/// would stall whatever shares that worker (the health endpoints too).
/// The next page's cursor, and how many servers this one held.
async fn take_page(text: String, kept: &mut Kept) -> Result<(Option<String>, usize), String> {
    let mut held = std::mem::take(kept);
    let (held, read) = tokio::task::spawn_blocking(move || {
        let mut items = 0usize;
        let read = read_page(&text, &mut |item| {
            items += 1;
            held.take(item);
        });
        (held, read.map(|cursor| (cursor, items)))
    })
    .await
    .map_err(|e| format!("reading a page: {e}"))?;
    *kept = held;
    read
}

/// `{base}/v0.1/servers` with the walk's query.
fn page_url(
    base: &reqwest::Url,
    search: Option<&str>,
    since: Option<&str>,
    cursor: Option<&str>,
) -> Result<reqwest::Url, String> {
    let mut base = base.clone();
    if !base.path().ends_with('/') {
        base.set_path(&format!("{}/", base.path()));
    }
    let mut url = base
        .join("v0.1/servers")
        .map_err(|e| format!("registry url: {e}"))?;
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("limit", &PAGE.to_string());
        q.append_pair("version", "latest");
        if let Some(s) = search {
            q.append_pair("search", s);
        }
        if let Some(s) = since {
            q.append_pair("updated_since", s);
        }
        if let Some(c) = cursor {
            q.append_pair("cursor", c);
        }
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_asked_for_under_the_base_url() {
        let base = reqwest::Url::parse("https://registry.example/mirror").expect("url");
        let url = page_url(
            &base,
            Some("git hub"),
            Some("2026-12-01T10:00:00Z"),
            Some("c/1"),
        )
        .expect("url");
        assert_eq!(
            url.as_str(),
            "https://registry.example/mirror/v0.1/servers?limit=100&version=latest&search=git+hub&updated_since=2026-12-01T10%3A00%3A00Z&cursor=c%2F1"
        );
    }
}

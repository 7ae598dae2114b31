//! An `http_sd_configs` source: asks its endpoint every `refresh_interval`
//! for a JSON list of server entries, with a bounded deadline and body.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::BoxFuture;

use super::{Discover, Document, MAX_DOCUMENT, Mechanism, Task};
use crate::config::{EntrySource, Format, HttpSd, Trust};

/// An `http_sd_configs` entry.
#[derive(Debug, PartialEq)]
pub(super) struct Endpoint(pub(super) HttpSd);

impl Discover for Endpoint {
    fn mechanism(&self) -> Mechanism {
        Mechanism::Http
    }

    fn entry_source<'a>(
        &'a self,
        _origin: &'a Path,
        base: &'a Path,
        own: &'a [SocketAddr],
    ) -> EntrySource<'a> {
        remote(&self.0, base, own)
    }

    fn run(&self, task: Task) -> BoxFuture<'static, ()> {
        Box::pin(run(self.0.clone(), task))
    }
}

/// How an endpoint's entries are read: as JSON from a remote writer, who
/// may start processes only if the main file allows it.
pub(super) fn remote<'a>(sd: &'a HttpSd, base: &'a Path, own: &'a [SocketAddr]) -> EntrySource<'a> {
    EntrySource {
        trust: Trust::Remote {
            allow_stdio: sd.allow_stdio,
        },
        format: Format::Json,
        labels: &sd.labels,
        base,
        max_servers: sd.max_servers,
        own_addresses: own,
        relabel: &[],
    }
}

/// No request outlives this, however long the interval.
pub(super) const MAX_REQUEST: Duration = Duration::from_secs(30);

/// Ask now and every interval until cancelled.
async fn run(sd: HttpSd, mut task: Task) {
    let origin = PathBuf::from(shown_url(&sd.url));
    let client = client(&sd);
    loop {
        let text = match &client {
            Ok(c) => {
                tokio::select! {
                    _ = task.cancel.cancelled() => return,
                    r = tokio::time::timeout(sd.refresh_interval.min(MAX_REQUEST), fetch(c, &sd, &sd.url)) => {
                        r.unwrap_or_else(|_| Err("no complete answer within the deadline".to_owned()))
                    }
                }
            }
            Err(e) => Err(e.clone()),
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

/// The URL as logs and errors show it: no credentials, no query.
pub(super) fn shown_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.to_string()
}

/// A client of this endpoint's own: its CA, its client certificate.
pub(super) fn client(sd: &HttpSd) -> Result<reqwest::Client, String> {
    let mut b = reqwest::Client::builder()
        .user_agent(concat!("mcpmon/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none());
    let read =
        |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    if let Some(ca) = &sd.tls.ca_file {
        let pem = read(ca)?;
        for cert in
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| format!("ca_file: {e}"))?
        {
            b = b.add_root_certificate(cert);
        }
    }
    if let (Some(cert), Some(key)) = (&sd.tls.cert_file, &sd.tls.key_file) {
        let mut pem = read(cert)?;
        pem.push(b'\n');
        pem.extend(read(key)?);
        b = b.identity(
            reqwest::Identity::from_pem(&pem).map_err(|e| format!("cert_file/key_file: {e}"))?,
        );
    }
    if sd.tls.insecure_skip_verify {
        b = b.danger_accept_invalid_certs(true);
    }
    b.build().map_err(|e| format!("http client: {e}"))
}

/// One request of `url` with `sd`'s headers and token: 200, JSON, at most
/// [`MAX_DOCUMENT`] bytes of UTF-8.
pub(super) async fn fetch(
    client: &reqwest::Client,
    sd: &HttpSd,
    url: &reqwest::Url,
) -> Result<String, String> {
    let mut req = client
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json");
    for (k, v) in &sd.headers {
        req = req.header(k.as_str(), v.expose());
    }
    if let Some(t) = &sd.bearer_token {
        req = req.bearer_auth(t.expose());
    }
    // reqwest's errors name the URL, query included: keep only the cause.
    let resp = req
        .send()
        .await
        .map_err(|e| format!("request failed: {}", cause(&e)))?;
    if resp.status() != reqwest::StatusCode::OK {
        return Err(format!("server returned HTTP status {}", resp.status()));
    }
    let json = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if !json {
        return Err("the answer's Content-Type is not application/json".to_owned());
    }
    if resp.content_length().is_some_and(|n| n > MAX_DOCUMENT) {
        return Err(format!("the answer is larger than {MAX_DOCUMENT} bytes"));
    }
    let mut resp = resp;
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("reading the answer failed: {}", cause(&e)))?
    {
        if (body.len() + chunk.len()) as u64 > MAX_DOCUMENT {
            return Err(format!("the answer is larger than {MAX_DOCUMENT} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| "the answer is not UTF-8".to_owned())
}

/// What went wrong, from the error's causes (its own text names the URL).
fn cause(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        "error".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shown_url_has_no_credentials_or_query() {
        let url = reqwest::Url::parse("https://u:pw@sd.example:8443/targets?token=s3cret").unwrap();
        assert_eq!(shown_url(&url), "https://sd.example:8443/targets");
    }
}

//! What every test's mcpmon answers over HTTP, in-process ([`Monitor`]) or
//! the real binary ([`Binary`]): one set of requests and waits, written
//! once over the address each one listens on.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Binary, Monitor, eventually};

/// An mcpmon a test can ask.
// Used only inside this test crate, never as a `dyn` or across threads
// by a caller that needs `Send` named: plain async fns are enough.
#[allow(async_fn_in_trait)]
pub trait Served {
    /// `http://host:port`.
    fn base(&self) -> String;
    /// The client the test asks with.
    fn client(&self) -> &reqwest::Client;

    /// `method` on `path`: the status and the body.
    async fn request(&self, method: reqwest::Method, path: &str) -> (u16, String) {
        let r = (self.client())
            .request(method.clone(), format!("{}{path}", self.base()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        (r.status().as_u16(), r.text().await.expect("body"))
    }

    /// `GET path`.
    async fn get(&self, path: &str) -> (u16, String) {
        self.request(reqwest::Method::GET, path).await
    }

    /// `POST path`.
    async fn post(&self, path: &str) -> (u16, String) {
        self.request(reqwest::Method::POST, path).await
    }

    /// `GET path` as JSON (`null` when the body is not JSON).
    async fn get_json(&self, path: &str) -> (u16, Value) {
        let (code, body) = self.get(path).await;
        (code, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// `/health/servers/{id}`.
    async fn server(&self, id: &str) -> (u16, Value) {
        self.get_json(&format!("/health/servers/{id}")).await
    }

    /// The `/metrics` text.
    async fn metrics(&self) -> String {
        self.get("/metrics").await.1
    }

    /// Poll until server `id` reads `status`: its JSON, and how long that took.
    async fn wait_status(&self, id: &str, status: &str, within: Duration) -> (Value, Duration) {
        let start = Instant::now();
        let what = format!("{id} reading {status}");
        let v = eventually(&what, within, async || {
            let (_, v) = self.server(id).await;
            if v["status"] == status { Ok(v) } else { Err(v) }
        })
        .await;
        (v, start.elapsed())
    }

    /// Poll until `/-/ready` answers 200.
    async fn wait_ready(&self, within: Duration) {
        eventually("mcpmon ready", within, async || {
            match self.get("/-/ready").await.0 {
                200 => Ok(()),
                code => Err(code),
            }
        })
        .await;
    }
}

impl Served for Monitor {
    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
    fn client(&self) -> &reqwest::Client {
        &self.http
    }
}

impl Served for Binary {
    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
    fn client(&self) -> &reqwest::Client {
        &self.http
    }
}

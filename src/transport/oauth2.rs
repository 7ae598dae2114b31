//! OAuth 2.0 client credentials (RFC 6749 §4.4) for remote servers: a token
//! is fetched before a session opens, refreshed ahead of its expiry, and
//! fetched anew when a server refuses it (once, before the refusal is
//! judged). Tokens never leave this module except as request headers, and
//! each one is added to its server's scrubber while it is in use.
//!
//! Also reads the expiry of a static bearer token that is a JWT, so both
//! kinds of credential export when they stop working.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::config::OAuth2Spec;
use crate::redact::Scrubber;

/// Deadline of one token request.
pub const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest token response read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// Why no token could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token endpoint: {0}")]
pub struct TokenError(pub String);

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<f64>,
}

#[derive(Clone)]
struct Token {
    value: Arc<str>,
    fetched: SystemTime,
    expires: Option<SystemTime>,
}

impl Token {
    /// Refresh when less than a fifth of the lifetime is left (at least 5 s
    /// or half a short life, and at most 5 minutes ahead), so a request
    /// never carries a token about to lapse in flight.
    fn due(&self, now: SystemTime) -> bool {
        let Some(expires) = self.expires else {
            return false;
        };
        let life = expires.duration_since(self.fetched).unwrap_or_default();
        let floor = Duration::from_secs(5).min(life / 2);
        let margin = (life / 5).max(floor).min(Duration::from_secs(300));
        now + margin >= expires
    }
}

/// The tokens of one server.
pub struct TokenSource {
    /// The server's scrubber, which learns every token fetched.
    scrubber: Arc<Scrubber>,
    spec: OAuth2Spec,
    http: reqwest::Client,
    current: Mutex<Option<Token>>,
    /// One fetch at a time; others wait for its token.
    fetching: tokio::sync::Mutex<()>,
    /// The held token's expiry, told to every session that watches it.
    expiry: tokio::sync::watch::Sender<Option<SystemTime>>,
}

impl TokenSource {
    /// Tokens for server `id` from `spec`, fetched with `http`.
    /// Tokens for `spec`, fetched with `http`; each one is added to the
    /// server's `scrubber` while it is in use.
    pub fn new(spec: OAuth2Spec, http: reqwest::Client, scrubber: Arc<Scrubber>) -> Self {
        TokenSource {
            scrubber,
            spec,
            http,
            current: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(()),
            expiry: tokio::sync::watch::Sender::new(None),
        }
    }

    fn held(&self) -> Option<Token> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A token fit to send: the one held, unless it is due for refresh.
    pub async fn token(&self) -> Result<Arc<str>, TokenError> {
        if let Some(t) = self.held().filter(|t| !t.due(SystemTime::now())) {
            return Ok(t.value);
        }
        self.fetch(None).await
    }

    /// A new token, because the server refused `refused`. When another
    /// request already replaced it, that newer token is used as is.
    pub async fn refresh(&self, refused: &str) -> Result<Arc<str>, TokenError> {
        self.fetch(Some(refused)).await
    }

    /// When the token held expires, if it says: now, and at each fetch.
    pub fn expiry(&self) -> tokio::sync::watch::Receiver<Option<SystemTime>> {
        self.expiry.subscribe()
    }

    async fn fetch(&self, refused: Option<&str>) -> Result<Arc<str>, TokenError> {
        let _one = self.fetching.lock().await;
        // Someone fetched while this one waited.
        if let Some(t) = self.held() {
            let fresh = match refused {
                Some(r) => &*t.value != r,
                None => !t.due(SystemTime::now()),
            };
            if fresh {
                return Ok(t.value);
            }
        }
        let token = tokio::time::timeout(TOKEN_TIMEOUT, self.request())
            .await
            .map_err(|_| TokenError(format!("no answer within {TOKEN_TIMEOUT:?}")))??;
        self.scrubber.obtained(token.value.to_string());
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
        self.expiry.send_replace(token.expires);
        Ok(token.value)
    }

    async fn request(&self) -> Result<Token, TokenError> {
        let s = &self.spec;
        let mut form: Vec<(&str, &str)> = vec![("grant_type", "client_credentials")];
        let scopes = s.scopes.join(" ");
        if !scopes.is_empty() {
            form.push(("scope", &scopes));
        }
        for (k, v) in &s.endpoint_params {
            form.push((k, v.expose()));
        }
        let fetched = SystemTime::now();
        let response = self
            .http
            .post(s.token_url.clone())
            .basic_auth(&s.client_id, Some(s.client_secret.expose()))
            .form(&form)
            .send()
            .await
            .map_err(|e| TokenError(super::truncate(&e.to_string(), 200)))?;
        let status = response.status();
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| TokenError(super::truncate(&e.to_string(), 200)))?
        {
            if body.len() + chunk.len() > MAX_TOKEN_RESPONSE {
                return Err(TokenError("response over 64 KiB".into()));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            // RFC 6749 §5.2: `error` is a short code, safe to show.
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"].as_str().map(|e| super::truncate(e, 64)));
            return Err(TokenError(match code {
                Some(c) => format!("HTTP {status}: {c}"),
                None => format!("HTTP {status}"),
            }));
        }
        let parsed: TokenResponse = serde_json::from_slice(&body)
            .map_err(|_| TokenError("the answer is not a token response".into()))?;
        if parsed.access_token.is_empty() {
            return Err(TokenError("empty access_token".into()));
        }
        let expires = parsed
            .expires_in
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| fetched + Duration::from_secs_f64(s.min(1e9)))
            .or_else(|| jwt_expiry(&parsed.access_token));
        Ok(Token {
            value: Arc::from(parsed.access_token),
            fetched,
            expires,
        })
    }
}

/// Deadline of the protected-resource metadata request.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// What a 401's RFC 9728 challenge points at: the server's protected-resource
/// metadata, fetched only from the server's own origin (a refusal must not
/// send mcpmon to arbitrary hosts), summarised as its authorization servers.
pub async fn protected_resource(
    http: &reqwest::Client,
    server: &reqwest::Url,
    challenge: &str,
) -> Option<String> {
    let at = challenge
        .split("resource_metadata=\"")
        .nth(1)?
        .split('"')
        .next()?;
    let url = reqwest::Url::parse(at).ok()?;
    if url.origin() != server.origin() {
        return Some("resource metadata is on another host; not fetched".to_owned());
    }
    let fetched = async {
        let mut response = http.get(url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.ok()? {
            if body.len() + chunk.len() > MAX_TOKEN_RESPONSE {
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        Some(body)
    };
    let body = tokio::time::timeout(METADATA_TIMEOUT, fetched)
        .await
        .ok()??;
    let meta: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let servers: Vec<String> = meta["authorization_servers"]
        .as_array()?
        .iter()
        .filter_map(|s| s.as_str())
        .take(8)
        .map(|s| super::truncate(s, 200))
        .collect();
    Some(format!("authorization servers: {}", servers.join(", ")))
}

/// The `exp` claim of a token that is a JWT; `None` for anything else.
/// The signature is not checked: this is only when the token stops working.
pub fn jwt_expiry(token: &str) -> Option<SystemTime> {
    use base64::Engine;
    let mut parts = token.split('.');
    let (_, payload, _) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || payload.len() > 16 * 1024 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let exp = serde_json::from_slice::<serde_json::Value>(&bytes).ok()?["exp"].as_f64()?;
    (exp.is_finite() && exp > 0.0 && exp < 1e11)
        .then(|| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(exp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn jwt(claims: &str) -> String {
        let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", b(r#"{"alg":"none"}"#), b(claims))
    }

    #[tokio::test]
    async fn resource_metadata_is_fetched_only_from_the_server_s_origin() {
        let http = reqwest::Client::new();
        let server = reqwest::Url::parse("https://mcp.example/mcp").expect("url");
        let elsewhere = "authorization required: Bearer resource_metadata=\"https://evil.example/.well-known/oauth-protected-resource\"";
        assert_eq!(
            protected_resource(&http, &server, elsewhere)
                .await
                .as_deref(),
            Some("resource metadata is on another host; not fetched")
        );
        assert_eq!(
            protected_resource(&http, &server, "Bearer realm=\"x\"").await,
            None
        );
    }

    #[test]
    fn a_jwt_tells_its_expiry_and_nothing_else_does() {
        assert_eq!(
            jwt_expiry(&jwt(r#"{"sub":"m","exp":1900000000}"#)),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000))
        );
        assert_eq!(jwt_expiry(&jwt(r#"{"sub":"m"}"#)), None);
        assert_eq!(jwt_expiry("opaque-token"), None);
        assert_eq!(jwt_expiry("a.b.c.d"), None);
        assert_eq!(jwt_expiry(&jwt(r#"{"exp":"soon"}"#)), None);
    }

    #[test]
    fn a_token_is_refreshed_before_the_last_fifth_of_its_life() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let t = Token {
            value: Arc::from("x"),
            fetched: t0,
            expires: Some(t0 + Duration::from_secs(100)),
        };
        assert!(!t.due(t0 + Duration::from_secs(79)));
        assert!(t.due(t0 + Duration::from_secs(80)));
        // A life of seconds is refreshed at its half; no expiry, no refresh.
        let short = Token {
            expires: Some(t0 + Duration::from_secs(4)),
            ..t.clone()
        };
        assert!(!short.due(t0 + Duration::from_millis(1900)));
        assert!(short.due(t0 + Duration::from_secs(2)));
        let forever = Token { expires: None, ..t };
        assert!(!forever.due(t0 + Duration::from_secs(1_000_000)));
    }
}

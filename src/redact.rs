//! Keeps secrets out of everything mcpmon publishes, and keeps each secret
//! with its owner.
//!
//! - A [`Scrubber`] belongs to one server: the values the operator marked
//!   secret for it (`${VAR}` values, `*_env` keys, header values, OAuth
//!   credentials, URL credentials and queries) and the tokens obtained for
//!   it at run time. It scrubs that server's texts (details, events,
//!   stderr) before they are logged or published. A secret of one server
//!   never changes another server's text, and an untrusted source (an
//!   http_sd entry, a token endpoint) can only ever hide text of the one
//!   server it describes.
//! - The log writer's safety net ([`Redacting`]) scrubs every line, whoever
//!   wrote it (rmcp, reqwest), of the operator's own secrets only: those of
//!   the main file and local files ([`set_secrets`]). It replaces values
//!   inside a JSON line, never the line's text, so a JSON log line stays
//!   valid JSON whatever a secret looks like.

use std::borrow::Cow;
use std::io::Write;
use std::sync::{Arc, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use tracing_subscriber::fmt::MakeWriter;

/// What a secret is replaced with.
const REDACTED: &str = "<redacted>";

/// Shorter values would hide ordinary words (and mcpmon never prints one
/// of its own accord).
const SHORTEST_SECRET: usize = 4;

/// Every spelling a secret can take in mcpmon's output: as is, and as it
/// reads inside a JSON string (`"` and `\\` escaped, control characters as
/// `\\n` or `\\u00XX`), which is how it appears in the JSON bodies of
/// `/health`.
fn spellings(secret: &str) -> Vec<String> {
    let mut out = vec![secret.to_owned()];
    if let Ok(json) = serde_json::to_string(secret) {
        let inner = &json[1..json.len() - 1];
        if inner != secret {
            out.push(inner.to_owned());
        }
    }
    out
}

/// One automaton over every spelling of `secrets`; `None` when there are none.
fn automaton<'a>(secrets: impl IntoIterator<Item = &'a String>) -> Option<Arc<AhoCorasick>> {
    let mut patterns: Vec<String> = secrets
        .into_iter()
        .filter(|s| s.len() >= SHORTEST_SECRET)
        .flat_map(|s| spellings(s))
        .collect();
    patterns.sort();
    patterns.dedup();
    if patterns.is_empty() {
        return None;
    }
    // Leftmost-longest: a secret that contains another is replaced whole.
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&patterns)
        .ok()
        .map(Arc::new)
}

fn replace<'t>(automaton: Option<&AhoCorasick>, text: &'t str) -> Cow<'t, str> {
    match automaton {
        Some(ac) if ac.is_match(text) => {
            let mut out = String::with_capacity(text.len());
            ac.replace_all_with(text, &mut out, |_, _, dst| {
                dst.push_str(REDACTED);
                true
            });
            Cow::Owned(out)
        }
        _ => Cow::Borrowed(text),
    }
}

/// One server's secrets, and the scrubbing of its texts.
pub struct Scrubber {
    /// What the configuration marked secret.
    configured: Vec<String>,
    /// Tokens obtained at run time: the newest two, since an error about
    /// the previous one may still be on its way.
    obtained: RwLock<Vec<String>>,
    automaton: RwLock<Option<Arc<AhoCorasick>>>,
}

impl Scrubber {
    /// A scrubber of `configured` secrets.
    pub fn new(configured: Vec<String>) -> Scrubber {
        let automaton = automaton(&configured);
        Scrubber {
            configured,
            obtained: RwLock::new(Vec::new()),
            automaton: RwLock::new(automaton),
        }
    }

    /// A token obtained at run time for this server (OAuth).
    pub fn obtained(&self, secret: String) {
        let mut held = self.obtained.write().unwrap_or_else(|p| p.into_inner());
        if held.first() == Some(&secret) {
            return;
        }
        held.insert(0, secret);
        held.truncate(2);
        let a = automaton(self.configured.iter().chain(held.iter()));
        *self.automaton.write().unwrap_or_else(|p| p.into_inner()) = a;
    }

    /// `text` with every secret of this server replaced.
    pub fn scrub<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let a = self
            .automaton
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        replace(a.as_deref(), text)
    }
}

impl Default for Scrubber {
    fn default() -> Self {
        Scrubber::new(Vec::new())
    }
}

// Two specs with the same configured secrets are the same server: what was
// obtained at run time belongs to the running session, not to the config.
impl PartialEq for Scrubber {
    fn eq(&self, other: &Self) -> bool {
        self.configured == other.configured
    }
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Scrubber({} secrets)", self.configured.len())
    }
}

/// The operator's own secrets, for the log writer's safety net.
static OPERATOR: RwLock<Option<Arc<AhoCorasick>>> = RwLock::new(None);

/// Replace the operator's secrets (on start and on every reload): those of
/// the main file and local files, never those an untrusted source wrote.
pub fn set_secrets(secrets: Vec<String>) {
    *OPERATOR.write().unwrap_or_else(|p| p.into_inner()) = automaton(&secrets);
}

/// `text` with every one of the operator's secrets replaced.
pub fn redact(text: &str) -> Cow<'_, str> {
    let a = OPERATOR.read().unwrap_or_else(|p| p.into_inner()).clone();
    replace(a.as_deref(), text)
}

/// A log line with the operator's secrets replaced: inside each string
/// value of a JSON line (so it stays JSON), or anywhere in a text line.
pub fn redact_line(line: &str) -> Cow<'_, str> {
    let a = OPERATOR.read().unwrap_or_else(|p| p.into_inner()).clone();
    let Some(a) = a else {
        return Cow::Borrowed(line);
    };
    if !a.is_match(line) {
        return Cow::Borrowed(line);
    }
    let body = line.trim_end_matches('\n');
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(mut v @ serde_json::Value::Object(_)) => {
            if !scrub_values(&mut v, &a) {
                return Cow::Borrowed(line);
            }
            let mut out = v.to_string();
            out.push_str(&line[body.len()..]);
            Cow::Owned(out)
        }
        _ => replace(Some(&a), line),
    }
}

/// Replace secrets in every string of `v`; whether any was.
fn scrub_values(v: &mut serde_json::Value, a: &AhoCorasick) -> bool {
    match v {
        serde_json::Value::String(s) => match replace(Some(a), s) {
            Cow::Owned(clean) => {
                *s = clean;
                true
            }
            Cow::Borrowed(_) => false,
        },
        // Every value is visited: no short-circuit.
        serde_json::Value::Array(items) => {
            let mut any = false;
            for x in items {
                any |= scrub_values(x, a);
            }
            any
        }
        serde_json::Value::Object(m) => {
            let mut any = false;
            for x in m.values_mut() {
                any |= scrub_values(x, a);
            }
            any
        }
        _ => false,
    }
}

/// A `MakeWriter` whose writers pass every line through [`redact_line`].
/// The fmt layer writes each event in one call, so a line is never split.
pub struct Redacting<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = RedactWriter<M::Writer>;
    fn make_writer(&'a self) -> Self::Writer {
        RedactWriter(self.0.make_writer())
    }
}

/// See [`Redacting`].
pub struct RedactWriter<W>(W);

impl<W: Write> Write for RedactWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(redact_line(&text).as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrubber_hides_its_own_secrets_and_the_tokens_obtained_for_it() {
        let s = Scrubber::new(vec!["hunter2".into(), "hunter2-long".into(), "abc".into()]);
        assert_eq!(
            s.scrub("a hunter2-long b hunter2"),
            "a <redacted> b <redacted>"
        );
        assert_eq!(
            s.scrub("abc is too short to be a secret"),
            "abc is too short to be a secret"
        );
        s.obtained("token-one".into());
        s.obtained("token-two".into());
        s.obtained("token-three".into());
        assert_eq!(
            s.scrub("token-one token-two token-three"),
            "token-one <redacted> <redacted>",
            "the newest two tokens"
        );
        // As a JSON body spells it: quotes and backslashes escaped.
        let odd = r#"pa"ss\word"#;
        let s = Scrubber::new(vec![odd.into()]);
        let body = serde_json::json!({"detail": format!("bad {odd}!")}).to_string();
        assert!(s.scrub(&body).contains("bad <redacted>!"));
    }

    #[test]
    fn a_json_log_line_stays_json_whatever_the_secret() {
        // A secret that is JSON syntax itself broke lines when the whole
        // line was rewritten.
        let nasty = r#"{"timestamp":""#;
        set_secrets(vec![nasty.into(), "hunter2".into()]);
        let line = format!(
            "{}\n",
            serde_json::json!({"timestamp": "2026", "fields": {"message": format!("x {nasty} hunter2 y")}})
        );
        let clean = redact_line(&line);
        assert!(clean.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(clean.trim_end()).expect("still JSON");
        assert_eq!(v["fields"]["message"], "x <redacted> <redacted> y");
        assert_eq!(v["timestamp"], "2026");
        // A text line is scrubbed as text.
        assert_eq!(
            redact_line("INFO token=hunter2\n"),
            "INFO token=<redacted>\n"
        );
        let mut out = Vec::new();
        RedactWriter(&mut out)
            .write_all(b"token=hunter2\n")
            .expect("write");
        assert_eq!(out, b"token=<redacted>\n");
        set_secrets(Vec::new());
        assert_eq!(redact("hunter2"), "hunter2");
    }
}

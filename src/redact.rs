//! Keeps configured secrets out of logs. Header values, tokens, env values
//! and URL credentials of the running configuration are registered here; the
//! log writer replaces any of them with `<redacted>` before a line leaves the
//! process, whichever library wrote it (ours, rmcp's, reqwest's).

use std::borrow::Cow;
use std::io::Write;
use std::sync::RwLock;

use aho_corasick::{AhoCorasick, MatchKind};
use tracing_subscriber::fmt::MakeWriter;

/// The registered secrets, as one automaton over every spelling of each.
static SECRETS: RwLock<Option<AhoCorasick>> = RwLock::new(None);

/// Every spelling a secret can take in mcpmon's output: as is, and as it
/// reads inside a JSON string (`"` and `\\` escaped, control characters as
/// `\\n` or `\\u00XX`), which is how it appears in `--log.format json`
/// lines and in the JSON bodies of `/health`.
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

/// Secrets of the running config (replaced on start and on every reload).
static CONFIGURED: RwLock<Vec<String>> = RwLock::new(Vec::new());
/// Secrets obtained at run time (OAuth tokens), by owner: the newest two of
/// each, since an error about the previous one may still be on its way.
static OBTAINED: RwLock<Vec<(String, Vec<String>)>> = RwLock::new(Vec::new());

/// Replace the registered secrets (on start and on every reload).
pub fn set_secrets(secrets: Vec<String>) {
    *CONFIGURED.write().unwrap_or_else(|p| p.into_inner()) = secrets;
    rebuild();
}

/// Register `secrets` obtained at run time for `owner` (a server id),
/// keeping the ones registered just before them too.
pub fn set_dynamic(owner: &str, secrets: Vec<String>) {
    {
        let mut all = OBTAINED.write().unwrap_or_else(|p| p.into_inner());
        match all.iter_mut().find(|(o, _)| o == owner) {
            Some((_, held)) => {
                let previous = std::mem::replace(held, secrets);
                held.extend(previous.into_iter().take(1));
            }
            None => all.push((owner.to_owned(), secrets)),
        }
    }
    rebuild();
}

fn rebuild() {
    let configured = CONFIGURED.read().unwrap_or_else(|p| p.into_inner());
    let obtained = OBTAINED.read().unwrap_or_else(|p| p.into_inner());
    let mut patterns: Vec<String> = configured
        .iter()
        .chain(obtained.iter().flat_map(|(_, s)| s))
        .filter(|s| s.len() >= 4)
        .flat_map(|s| spellings(s))
        .collect();
    patterns.sort();
    patterns.dedup();
    // Leftmost-longest: a secret that contains another is replaced whole.
    let automaton = (!patterns.is_empty())
        .then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&patterns)
                .ok()
        })
        .flatten();
    *SECRETS.write().unwrap_or_else(|p| p.into_inner()) = automaton;
}

/// `text` with every registered secret replaced.
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    match secrets.as_ref() {
        Some(ac) if ac.is_match(text) => {
            let mut out = String::with_capacity(text.len());
            ac.replace_all_with(text, &mut out, |_, _, dst| {
                dst.push_str("<redacted>");
                true
            });
            Cow::Owned(out)
        }
        _ => Cow::Borrowed(text),
    }
}

/// A `MakeWriter` whose writers redact what passes through them. The fmt
/// layer writes each event in one call, so a secret is never split.
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
        self.0.write_all(redact(&text).as_bytes())?;
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
    fn replaces_every_registered_secret() {
        set_secrets(vec!["hunter2".into(), "hunter2-long".into()]);
        assert_eq!(
            redact("a hunter2-long b hunter2"),
            "a <redacted> b <redacted>"
        );
        assert_eq!(redact("nothing here"), "nothing here");
        let mut out = Vec::new();
        RedactWriter(&mut out)
            .write_all(b"token=hunter2\n")
            .expect("write");
        assert_eq!(out, b"token=<redacted>\n");

        // As a JSON log line spells it: quotes and backslashes escaped.
        let odd = r#"pa"ss\word"#;
        set_secrets(vec![odd.into()]);
        let line = serde_json::json!({"fields": {"error": format!("bad {odd}!")}}).to_string();
        assert!(!line.contains(odd), "the test needs the escaped spelling");
        let clean = redact(&line).into_owned();
        assert!(clean.contains("bad <redacted>!"), "{clean}");
        assert_eq!(redact(&format!("raw {odd}")), "raw <redacted>");
        set_secrets(Vec::new());
        assert_eq!(redact("hunter2"), "hunter2");
    }
}

//! Keeps configured secrets out of logs. Header values, tokens, env values
//! and URL credentials of the running configuration are registered here; the
//! log writer replaces any of them with `<redacted>` before a line leaves the
//! process, whichever library wrote it (ours, rmcp's, reqwest's).

use std::borrow::Cow;
use std::io::Write;
use std::sync::RwLock;

use tracing_subscriber::fmt::MakeWriter;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Replace the registered secrets (on start and on every reload).
pub fn set_secrets(mut secrets: Vec<String>) {
    secrets.sort();
    secrets.dedup();
    // Longest first, so a secret that contains another is replaced whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    *SECRETS.write().unwrap_or_else(|p| p.into_inner()) = secrets;
}

/// `text` with every registered secret replaced.
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    let mut out = Cow::Borrowed(text);
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = Cow::Owned(out.replace(s.as_str(), "<redacted>"));
        }
    }
    out
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
        set_secrets(Vec::new());
    }
}

//! The Prometheus text format, written by one [`Writer`]: it owns the
//! declaration of every family (`# HELP`, `# TYPE`, even with no samples),
//! label order (by name, a histogram's `le` last), the escaping of label
//! values and the spelling of numbers. A renderer says which family, which
//! labels and which value; nothing else writes exposition text.

use std::fmt::{Display, Write as _};

use crate::output::families::Family;
use crate::state::series::Histogram;

/// One exposition being written, a buffer per family so that families
/// stay together whatever order their samples come in.
pub struct Writer {
    bufs: Vec<String>,
}

impl Writer {
    /// A writer whose buffers start at `sizes` (the last render's, so a
    /// large fleet's buffers are allocated once).
    pub fn with_sizes(sizes: &[usize]) -> Writer {
        Writer {
            bufs: (0..Family::COUNT)
                .map(|i| {
                    let n = sizes.get(i).copied().unwrap_or(0);
                    String::with_capacity(n + n / 8)
                })
                .collect(),
        }
    }

    /// Each family's size, for the next render.
    pub fn sizes(&self) -> Vec<usize> {
        self.bufs.iter().map(String::len).collect()
    }

    /// One sample of `f`.
    pub fn sample(&mut self, f: Family, labels: &[(&str, &str)], value: impl Display) {
        self.line(f, "", labels, None, value);
    }

    /// A histogram's `_bucket`, `_sum` and `_count` lines. With `keep`,
    /// only the buckets with those `le` values are written (still
    /// cumulative, so the coarser histogram is exact at its bounds).
    pub fn histogram(
        &mut self,
        f: Family,
        labels: &[(&str, &str)],
        h: &Histogram,
        keep: Option<&[&str]>,
    ) {
        let mut cumulative = 0;
        for (le, n) in h.buckets.le.iter().zip(h.counts.iter()) {
            cumulative += n;
            if keep.is_none_or(|k| k.contains(le)) {
                self.line(f, "_bucket", labels, Some(le), cumulative);
            }
        }
        self.line(f, "_bucket", labels, Some("+Inf"), h.count);
        self.line(f, "_sum", labels, None, Float(h.sum));
        self.line(f, "_count", labels, None, h.count);
    }

    fn line(
        &mut self,
        f: Family,
        suffix: &str,
        labels: &[(&str, &str)],
        le: Option<&str>,
        value: impl Display,
    ) {
        debug_assert!(
            labels
                .iter()
                .all(|(k, _)| f.labels().contains(k) || k.starts_with("label_")),
            "{} has no label in {labels:?}",
            f.name()
        );
        let buf = &mut self.bufs[f as usize];
        let _ = write!(buf, "{}{suffix}", f.name());
        let mut sorted: [(&str, &str); 8] = [("", ""); 8];
        let labels: &[(&str, &str)] = if labels.is_sorted_by_key(|(k, _)| *k) || labels.len() > 8 {
            labels
        } else {
            sorted[..labels.len()].copy_from_slice(labels);
            sorted[..labels.len()].sort_unstable_by_key(|(k, _)| *k);
            &sorted[..labels.len()]
        };
        if !labels.is_empty() || le.is_some() {
            buf.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    buf.push(',');
                }
                let _ = write!(buf, "{k}=\"{}\"", Escaped(v));
            }
            if let Some(le) = le {
                if !labels.is_empty() {
                    buf.push(',');
                }
                let _ = write!(buf, "le=\"{le}\"");
            }
            buf.push('}');
        }
        let _ = writeln!(buf, " {value}");
    }

    /// Every family, declared, with its samples, appended to `out`.
    pub fn finish(self, out: &mut String) {
        out.reserve(self.bufs.iter().map(String::len).sum::<usize>() + 16 * 1024);
        for (f, lines) in Family::ALL.iter().zip(&self.bufs) {
            let name = f.name();
            let _ = write!(
                out,
                "# HELP {name} {}\n# TYPE {name} {}\n",
                f.help(),
                f.kind()
            );
            out.push_str(lines);
        }
    }
}

/// A label value escaped for the text format.
pub struct Escaped<'a>(pub &'a str);

impl Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.0.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
            return f.write_str(self.0);
        }
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// A sample value in the text format's spelling of infinities and NaN.
pub struct Float(pub f64);

impl Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let x = self.0;
        if x.is_nan() {
            f.write_str("NaN")
        } else if x.is_infinite() {
            f.write_str(if x > 0.0 { "+Inf" } else { "-Inf" })
        } else {
            write!(f, "{x}")
        }
    }
}

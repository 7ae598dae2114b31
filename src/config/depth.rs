//! How deep a JSON, JSON5 or CEL text nests, counted before a parser that
//! recurses is let at it: the JSON5 parser has no depth limit of its own
//! (twenty thousand `[` overflowed a runtime worker's stack), and CEL's
//! takes a dozen frames per bracket. The scan knows only what can hide a
//! bracket (strings in either quote, comments) and leaves everything else
//! to the parser.

/// The deepest nesting accepted: serde_json's own limit.
pub const MAX_DEPTH: usize = 128;

/// The 1-based line and column of the first `[`, `{` or `(` that opens a
/// level past `max`, if there is one.
pub fn too_deep(text: &str, max: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'[' | b'{' | b'(' => {
                depth += 1;
                if depth > max {
                    return Some(line_column(text, i));
                }
            }
            b']' | b'}' | b')' => depth = depth.saturating_sub(1),
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = memchr::memchr(b'\n', &bytes[i..]).map_or(bytes.len(), |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = memchr::memmem::find(&bytes[i + 2..], b"*/").map_or(bytes.len(), |n| i + n + 3);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// 1-based line and column (in characters) of byte `at`.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..at];
    let line = memchr::memchr_iter(b'\n', before).count() + 1;
    let start = memchr::memrchr(b'\n', before).map_or(0, |n| n + 1);
    let column = text[start..at].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bracket_past_the_limit_is_named() {
        assert_eq!(too_deep("[[[]]]", 3), None);
        assert_eq!(too_deep("[[[[]]]]", 3), Some((1, 4)));
        assert_eq!(too_deep("{\n \"a\": {\n  \"b\": [[1]]}}", 3), Some((3, 9)));
        let deep = "[".repeat(50_000);
        assert_eq!(too_deep(&deep, MAX_DEPTH), Some((1, MAX_DEPTH + 1)));
    }

    #[test]
    fn brackets_in_strings_and_comments_do_not_count() {
        let text = "{ // [[[[\n 'a': \"[[[[\\\"[[\", /* {{{{ */ b: '\\'[[[[' }";
        assert_eq!(too_deep(text, 1), None);
        assert_eq!(too_deep("/* never closed [[[[", 1), None);
        assert_eq!(too_deep("\"never closed [[[[", 1), None);
    }
}

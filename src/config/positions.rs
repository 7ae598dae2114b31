//! Where each node of a YAML (or JSON) document is, found in one pass over
//! its events, and how far its aliases expand.
//!
//! Errors name `file:line:column`. Finding one node's position by walking
//! the document again for every error made validation quadratic: 4 000
//! bad discovery entries took 30 s of CPU. [`Positions::of`] reads the
//! events once and keeps a tree of positions that each error then looks up
//! by its path.
//!
//! YAML aliases repeat a node without repeating its text, so a 35 KB
//! document of aliases to aliases can stand for gigabytes of values.
//! [`check_aliases`] counts the nodes they stand for, streaming, before
//! anything builds a value: a document whose aliases expand to more nodes
//! than [`alias_budget`] allows is refused with the alias's position.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, Span};

/// One step of a path into the document.
#[derive(Clone, Debug)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

impl Seg {
    pub(super) fn key(k: &str) -> Seg {
        Seg::Key(k.to_owned())
    }
}

/// A document that could not be read as YAML, or whose aliases expand
/// beyond the budget: what, and where (1-based line and column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unreadable {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Most nodes a document's aliases may add, for a document of `events`
/// events: as many as the document itself holds, and at least 10 000 (a
/// hand-written file with anchors for shared settings stays far below).
pub(super) fn alias_budget(events: usize) -> usize {
    events.max(10_000)
}

/// Whether the document's aliases stay within [`alias_budget`]; a syntax
/// error is left to the deserializer, which reports it in its own words.
pub(super) fn check_aliases(text: &str) -> Result<(), Unreadable> {
    match walk(text, &mut |_, _| {}) {
        Ok(_) | Err(Stop::Syntax) => Ok(()),
        Err(Stop::Aliases(e) | Stop::Deep(e)) => Err(e),
    }
}

/// Why a walk over the events stopped early.
enum Stop {
    /// Not YAML: the deserializer says where and why, in its own words.
    Syntax,
    Aliases(Unreadable),
    /// Nested past [`MAX_DEPTH`]: the parsers that build values recurse.
    Deep(Unreadable),
}

/// The deepest nesting read: as deep as the JSON parsers go.
const MAX_DEPTH: usize = super::depth::MAX_DEPTH;

/// Every node's position, by path.
pub(super) struct Positions {
    nodes: Vec<Node>,
}

struct Node {
    line: usize,
    column: usize,
    kids: Kids,
}

enum Kids {
    Leaf,
    Seq(Vec<usize>),
    Map(Vec<(String, usize)>),
}

impl Positions {
    /// Index `text`; `None` when it does not parse (its errors carry their
    /// own positions).
    pub(super) fn of(text: &str) -> Option<Positions> {
        let mut tree = Builder::default();
        walk(text, &mut |event, span| tree.event(event, span)).ok()?;
        Some(Positions { nodes: tree.nodes })
    }

    /// The position of the node at `path`, or of its nearest parent that
    /// exists.
    pub(super) fn find(&self, path: &[Seg]) -> Option<(usize, usize)> {
        let mut at = 0;
        let root = self.nodes.first()?;
        let mut found = (root.line, root.column);
        for seg in path {
            let next = match (&self.nodes[at].kids, seg) {
                (Kids::Seq(items), Seg::Index(i)) => items.get(*i).copied(),
                (Kids::Map(entries), Seg::Key(k)) => {
                    entries.iter().find(|(key, _)| key == k).map(|(_, n)| *n)
                }
                _ => None,
            };
            let Some(next) = next else { break };
            at = next;
            found = (self.nodes[at].line, self.nodes[at].column);
        }
        Some(found)
    }
}

/// Finds positions in a document: indexed whole at the first lookup, or,
/// for a JSON list read entry by entry, one entry at a time, so that a
/// 16 MiB list of bad entries never holds a tree of all its nodes.
pub(super) struct Locator<'t> {
    text: &'t str,
    whole: std::cell::OnceCell<Option<Positions>>,
    /// The entry being checked: its index, its text, and its positions.
    entry: std::cell::RefCell<Option<Current<'t>>>,
    /// Line and column (1-based) at a byte offset of `text`, advanced as
    /// entries are entered, in order.
    cursor: std::cell::Cell<(usize, usize, usize)>,
}

struct Current<'t> {
    index: usize,
    raw: &'t str,
    /// Line and column where `raw` starts.
    start: (usize, usize),
    positions: Option<Option<Positions>>,
}

impl<'t> Locator<'t> {
    pub(super) fn new(text: &'t str) -> Self {
        Locator {
            text,
            whole: std::cell::OnceCell::new(),
            entry: std::cell::RefCell::new(None),
            cursor: std::cell::Cell::new((0, 1, 1)),
        }
    }

    /// From now on, lookups under `[index]` are within `raw`, a slice of
    /// the text (entries are entered in order).
    pub(super) fn enter(&self, index: usize, raw: &'t str) {
        let offset = (raw.as_ptr() as usize).saturating_sub(self.text.as_ptr() as usize);
        let start = self.advance(offset);
        *self.entry.borrow_mut() = Some(Current {
            index,
            raw,
            start,
            positions: None,
        });
    }

    /// Line and column at byte `offset`, counting on from the cursor.
    fn advance(&self, offset: usize) -> (usize, usize) {
        let (at, mut line, mut column) = self.cursor.get();
        let offset = offset.clamp(at, self.text.len());
        for c in self.text[at..offset].chars() {
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        self.cursor.set((offset, line, column));
        (line, column)
    }

    /// The position of the node at `path`, or of its nearest parent.
    pub(super) fn find(&self, path: &[Seg]) -> Option<(usize, usize)> {
        if let (Some(Seg::Index(i)), Some(current)) = (path.first(), &mut *self.entry.borrow_mut())
            && *i == current.index
        {
            let (line, column) = current.start;
            let found = current
                .positions
                .get_or_insert_with(|| Positions::of(current.raw))
                .as_ref()
                .and_then(|p| p.find(&path[1..]));
            return Some(match found {
                Some((1, c)) => (line, column + c - 1),
                Some((l, c)) => (line + l - 1, c),
                None => (line, column),
            });
        }
        self.whole
            .get_or_init(|| Positions::of(self.text))
            .as_ref()
            .and_then(|p| p.find(path))
    }
}

/// Parse `text` once, handing each event on, and count what its aliases
/// expand to. Returns the number of events.
fn walk(text: &str, each: &mut dyn FnMut(&Event<'_>, Span)) -> Result<usize, Stop> {
    // Nodes under each open collection, and the anchor it carries.
    let mut open: Vec<(usize, usize)> = Vec::new();
    let mut anchors: HashMap<usize, usize> = HashMap::new();
    let mut expanded = 0usize;
    let mut events = 0usize;
    let mut parser = Parser::new_from_str(text);
    let at = |span: Span| (span.start.line(), span.start.col() + 1);
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| {
            // The scanner stops at 255 open flow collections, before it
            // hands on a single event of them; the parser that builds
            // values would take quadratic time to say the same.
            if e.info() == "recursion limit exceeded" {
                Stop::Deep(Unreadable {
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                    message: format!("nested more than {MAX_DEPTH} levels deep"),
                })
            } else {
                Stop::Syntax
            }
        })?;
        events += 1;
        each(&event, span);
        // How many nodes this event stands for, once complete.
        let nodes = match &event {
            Event::Scalar(_, _, anchor, _) => {
                if *anchor > 0 {
                    anchors.insert(*anchor, 1);
                }
                Some(1)
            }
            Event::Alias(anchor) => {
                let n = anchors.get(anchor).copied().unwrap_or(1);
                expanded = expanded.saturating_add(n);
                // Against the events read so far: an early bomb stops early,
                // and the total stays within the whole document's budget.
                if expanded > alias_budget(events) {
                    let (line, column) = at(span);
                    return Err(Stop::Aliases(Unreadable {
                        line,
                        column,
                        message: format!(
                            "aliases expand to more than {} nodes; write the values out, or use fewer aliases",
                            alias_budget(events)
                        ),
                    }));
                }
                Some(n)
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if open.len() == MAX_DEPTH {
                    let (line, column) = at(span);
                    return Err(Stop::Deep(Unreadable {
                        line,
                        column,
                        message: format!("nested more than {MAX_DEPTH} levels deep"),
                    }));
                }
                open.push((0, *anchor));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (inside, anchor) = open.pop().unwrap_or_default();
                let n = inside.saturating_add(1);
                if anchor > 0 {
                    anchors.insert(anchor, n);
                }
                Some(n)
            }
            _ => None,
        };
        if let (Some(n), Some((inside, _))) = (nodes, open.last_mut()) {
            *inside = inside.saturating_add(n);
        }
    }
    Ok(events)
}

/// Builds the position tree from events.
#[derive(Default)]
struct Builder {
    nodes: Vec<Node>,
    /// Open collections: the node, and for a mapping the key whose value
    /// comes next (`Some(None)` while a non-scalar key is being skipped).
    stack: Vec<Frame>,
}

struct Frame {
    node: usize,
    /// For a mapping: the key read, waiting for its value.
    key: Option<Option<String>>,
    /// Depth of a complex key being skipped.
    skipping: usize,
}

impl Builder {
    fn event(&mut self, event: &Event<'_>, span: Span) {
        let (line, column) = (span.start.line(), span.start.col() + 1);
        if let Some(top) = self.stack.last_mut()
            && top.skipping > 0
        {
            match event {
                Event::SequenceStart(..) | Event::MappingStart(..) => top.skipping += 1,
                Event::SequenceEnd | Event::MappingEnd => top.skipping -= 1,
                _ => {}
            }
            return;
        }
        let kids = match event {
            Event::SequenceEnd | Event::MappingEnd => {
                self.stack.pop();
                return;
            }
            Event::Scalar(..) | Event::Alias(_) => Kids::Leaf,
            Event::SequenceStart(..) => Kids::Seq(Vec::new()),
            Event::MappingStart(..) => Kids::Map(Vec::new()),
            _ => return,
        };
        // A mapping waiting for a key takes this node as one.
        if let Some(top) = self.stack.last_mut()
            && matches!(self.nodes[top.node].kids, Kids::Map(_))
            && top.key.is_none()
        {
            match event {
                Event::Scalar(value, ..) => top.key = Some(Some(value.to_string())),
                Event::Alias(_) => top.key = Some(None),
                _ => {
                    top.key = Some(None);
                    top.skipping = 1;
                }
            }
            return;
        }
        let id = self.nodes.len();
        let starts = !matches!(kids, Kids::Leaf);
        self.nodes.push(Node { line, column, kids });
        if let Some(top) = self.stack.last_mut() {
            match &mut self.nodes[top.node].kids {
                Kids::Seq(items) => items.push(id),
                Kids::Map(entries) => {
                    if let Some(Some(key)) = top.key.take() {
                        entries.push((key, id));
                    }
                }
                Kids::Leaf => {}
            }
        }
        if starts {
            self.stack.push(Frame {
                node: id,
                key: None,
                skipping: 0,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_found_by_path_and_missing_nodes_name_their_parent() {
        let text = "servers:\n  - id: a\n    url: http://x\n  - id: b\n    labels: {team: x}\n";
        let p = Positions::of(text).expect("parses");
        let at = |path: &[Seg]| p.find(path);
        assert_eq!(
            at(&[Seg::key("servers"), Seg::Index(1), Seg::key("id")]),
            Some((4, 9))
        );
        assert_eq!(
            at(&[Seg::key("servers"), Seg::Index(0), Seg::key("url")]),
            Some((3, 10))
        );
        assert_eq!(
            at(&[
                Seg::key("servers"),
                Seg::Index(1),
                Seg::key("labels"),
                Seg::key("team")
            ]),
            Some((5, 20))
        );
        // Missing: the nearest parent.
        assert_eq!(
            at(&[Seg::key("servers"), Seg::Index(0), Seg::key("nope")]),
            at(&[Seg::key("servers"), Seg::Index(0)])
        );
        let json = "[{\"id\": \"a\"},\n {\"id\": 5}]";
        let p = Positions::of(json).expect("JSON is YAML");
        assert_eq!(p.find(&[Seg::Index(1), Seg::key("id")]), Some((2, 9)));
    }

    #[test]
    fn complex_keys_are_skipped_without_losing_the_rest() {
        let text = "? [a, b]\n: 1\nc: 2\n";
        let p = Positions::of(text).expect("parses");
        assert_eq!(p.find(&[Seg::key("c")]), Some((3, 4)));
    }

    #[test]
    fn aliases_that_expand_past_the_budget_are_refused_at_their_position() {
        // Each level doubles: 2^30 nodes from a few hundred bytes.
        let mut bomb = String::from("a0: &a0 [x, x]\n");
        for i in 1..30 {
            bomb.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
        }
        let e = check_aliases(&bomb).expect_err("a billion nodes");
        assert!(e.message.contains("aliases expand"), "{e:?}");
        assert!(e.line > 1 && e.line <= 30, "{e:?}");
        // Anchors used for shared settings are fine.
        let fine = "base: &b {ping_interval: 5s}\nservers:\n  - <<: *b\n  - *b\n";
        assert_eq!(check_aliases(fine), Ok(()));
    }

    #[test]
    fn a_large_document_is_indexed_in_one_pass() {
        let mut text = String::from("[");
        for i in 0..200_000 {
            text.push_str(&format!("{{\"id\": \"s{i}\"}},"));
        }
        text.push(']');
        let p = Positions::of(&text).expect("parses");
        assert!(p.find(&[Seg::Index(199_999), Seg::key("id")]).is_some());
    }
}

//! Where things are in the pipeline file: YAML paths mapped to line:col.
//!
//! serde_yaml's `Value` forgets positions, so the text is parsed a second time
//! with yaml-rust2's event parser, whose markers give the line and column of
//! every key and value. Errors name a path (`operators[1].window.size`); the
//! `Locator` turns it into `file:line:col`, falling back to the nearest
//! ancestor, and sends anything set by `--set` to that override instead.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

use super::env::Expanded;
use super::ConfigError;

/// One step of a path into the YAML tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Seg {
    Key(String),
    Idx(usize),
}

pub(crate) type YPath = Vec<Seg>;

/// `base` extended by one mapping key.
pub(crate) fn child(base: &[Seg], key: &str) -> YPath {
    let mut p = base.to_vec();
    p.push(Seg::Key(key.to_string()));
    p
}

/// `base` extended by one list index.
pub(crate) fn item(base: &[Seg], index: usize) -> YPath {
    let mut p = base.to_vec();
    p.push(Seg::Idx(index));
    p
}

/// The path as users read it: `operators[1].window.size`.
pub(crate) fn show(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Idx(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// 1-based line and column in the parsed (expanded) text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub line: usize,
    pub col: usize,
}

impl From<Marker> for Pos {
    fn from(m: Marker) -> Self {
        // yaml-rust2 lines are 1-based, columns 0-based.
        Pos { line: m.line(), col: m.col() + 1 }
    }
}

#[derive(Debug, Clone, Copy)]
struct Spot {
    key: Option<Pos>,
    value: Pos,
}

/// Every path of a YAML document with the position of its key and value.
#[derive(Debug, Default)]
pub(crate) struct PathIndex {
    spots: HashMap<YPath, Spot>,
}

impl PathIndex {
    /// Index the first document of `text`. A syntax error stops indexing
    /// where it occurs (serde_yaml reports it, with its own position).
    pub fn build(text: &str) -> PathIndex {
        let mut builder = Builder::default();
        let _ = Parser::new_from_str(text).load(&mut builder, false);
        builder.index
    }

    fn get(&self, path: &[Seg]) -> Option<Spot> {
        self.spots.get(path).copied()
    }
}

enum Frame {
    Map {
        path: YPath,
        key: Option<(String, Pos)>,
        keys: usize,
    },
    Seq {
        path: YPath,
        next: usize,
    },
    /// Inside a complex (non-scalar) mapping key, which no path can name.
    Skip {
        depth: usize,
    },
}

#[derive(Default)]
struct Builder {
    index: PathIndex,
    stack: Vec<Frame>,
    done: bool,
}

impl Builder {
    /// Where the node that starts now sits: its path and key position, or
    /// None when it is itself a mapping key.
    fn place(&mut self, pos: Pos, complex: bool) -> Option<(YPath, Option<Pos>)> {
        match self.stack.last_mut() {
            None => Some((Vec::new(), None)),
            Some(Frame::Seq { path, next }) => {
                *next += 1;
                Some((item(path, *next - 1), None))
            }
            Some(Frame::Map { path, key, keys }) => match key.take() {
                Some((k, kpos)) => Some((child(path, &k), Some(kpos))),
                None => {
                    // yaml-rust2 marks a block mapping at its first `:`;
                    // users see it start at its first key.
                    *keys += 1;
                    if *keys == 1 {
                        if let Some(spot) = self.index.spots.get_mut(path.as_slice()) {
                            spot.value = spot.value.min(pos);
                        }
                    }
                    // A key: remember it until its value arrives.
                    *key = Some((if complex { "?".to_string() } else { String::new() }, pos));
                    None
                }
            },
            Some(Frame::Skip { .. }) => None,
        }
    }

    fn open(&mut self, frame: impl FnOnce(YPath) -> Frame, pos: Pos) {
        if let Some(Frame::Skip { depth }) = self.stack.last_mut() {
            *depth += 1;
            return;
        }
        match self.place(pos, true) {
            Some((path, key)) => {
                self.index.spots.insert(path.clone(), Spot { key, value: pos });
                self.stack.push(frame(path));
            }
            None => self.stack.push(Frame::Skip { depth: 1 }),
        }
    }

    fn close(&mut self) {
        if let Some(Frame::Skip { depth }) = self.stack.last_mut() {
            *depth -= 1;
            if *depth > 0 {
                return;
            }
        }
        self.stack.pop();
    }

    fn leaf(&mut self, text: Option<&str>, pos: Pos) {
        if matches!(self.stack.last(), Some(Frame::Skip { .. })) {
            return;
        }
        match self.place(pos, false) {
            Some((path, key)) => {
                self.index.spots.insert(path, Spot { key, value: pos });
            }
            None => {
                if let Some(Frame::Map { key: Some((k, _)), .. }) = self.stack.last_mut() {
                    *k = text.unwrap_or("?").to_string();
                }
            }
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.done {
            return;
        }
        let pos = Pos::from(mark);
        match ev {
            Event::MappingStart(..) => self.open(|path| Frame::Map { path, key: None, keys: 0 }, pos),
            Event::SequenceStart(..) => self.open(|path| Frame::Seq { path, next: 0 }, pos),
            Event::MappingEnd | Event::SequenceEnd => self.close(),
            Event::Scalar(s, ..) => self.leaf(Some(&s), pos),
            Event::Alias(_) => self.leaf(None, pos),
            Event::DocumentEnd => self.done = true,
            _ => {}
        }
    }
}

/// Where to blame a YAML error serde_yaml gives no position for: the start
/// of a second document (the one such error seen), else where yaml-rust2's
/// parser stops, else the start of the text.
pub(crate) fn unplaced_error_position(text: &str) -> Pos {
    let mut parser = Parser::new_from_str(text);
    let mut documents = 0;
    loop {
        match parser.next_token() {
            Ok((Event::DocumentStart, mark)) => {
                documents += 1;
                if documents == 2 {
                    return Pos::from(mark);
                }
            }
            Ok((Event::StreamEnd, _)) => return Pos { line: 1, col: 1 },
            Ok(_) => {}
            Err(e) => return Pos::from(*e.marker()),
        }
    }
}

/// Turns paths into located `ConfigError`s.
pub(crate) struct Locator<'a> {
    origin: &'a str,
    index: PathIndex,
    text: &'a Expanded,
    /// Paths replaced by `--set`, with the override's own origin.
    overrides: Vec<(YPath, String)>,
}

impl<'a> Locator<'a> {
    pub fn new(origin: &'a str, text: &'a Expanded, overrides: Vec<(YPath, String)>) -> Self {
        Locator { origin, index: PathIndex::build(&text.text), text, overrides }
    }

    /// An error at the value of `path`.
    pub fn at(&self, path: &[Seg], message: impl Into<String>) -> ConfigError {
        self.locate(path, false, message.into())
    }

    /// An error at the key of `path` (e.g. an unknown field).
    pub fn at_key(&self, path: &[Seg], message: impl Into<String>) -> ConfigError {
        self.locate(path, true, message.into())
    }

    /// The source line of `path` (0 when unknown), to mention in messages.
    pub fn line_of(&self, path: &[Seg]) -> usize {
        match self.position(path, true) {
            Some((line, _)) => line,
            None => 0,
        }
    }

    /// Where `path` is, as `file:line:col` (or the `--set` that set it), to
    /// name a second place in a message.
    pub fn place(&self, path: &[Seg]) -> String {
        let e = self.locate(path, false, String::new());
        if e.line == 0 {
            e.origin
        } else {
            format!("{}:{}:{}", e.origin, e.line, e.col)
        }
    }

    fn locate(&self, path: &[Seg], at_key: bool, message: String) -> ConfigError {
        if let Some((_, origin)) = self.overrides.iter().rev().find(|(p, _)| path.starts_with(p)) {
            return ConfigError { origin: origin.clone(), line: 0, col: 0, message };
        }
        // Nothing indexed, not even the root: an empty document, which
        // starts where the file does.
        let (line, col) = self.position(path, at_key).unwrap_or((1, 1));
        ConfigError { origin: self.origin.to_string(), line, col, message }
    }

    /// The source position of `path`, or of its nearest indexed ancestor.
    fn position(&self, path: &[Seg], at_key: bool) -> Option<(usize, usize)> {
        let (len, spot) = (0..=path.len()).rev().find_map(|n| Some((n, self.index.get(&path[..n])?)))?;
        let pos = match spot.key {
            Some(k) if at_key && len == path.len() => k,
            _ => spot.value,
        };
        Some(self.text.to_source(pos.line, pos.col))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Seg {
        Seg::Key(s.to_string())
    }

    const DOC: &str = "\
name: p
sources:
  - name: a
    type: file
operators:
  - {name: x, window: {type: tumbling, size: 10s}}
  - name: y
    key: [u, v]
";

    #[test]
    fn indexes_keys_and_values() {
        let ix = PathIndex::build(DOC);
        let spot = |p: &[Seg]| ix.get(p).map(|s| (s.key.map(|k| (k.line, k.col)), (s.value.line, s.value.col)));
        assert_eq!(spot(&[k("name")]), Some((Some((1, 1)), (1, 7))));
        assert_eq!(spot(&[k("sources"), Seg::Idx(0), k("type")]), Some((Some((4, 5)), (4, 11))));
        let size = [k("operators"), Seg::Idx(0), k("window"), k("size")];
        assert_eq!(spot(&size), Some((Some((6, 40)), (6, 46))));
        assert_eq!(spot(&[k("operators"), Seg::Idx(1), k("key"), Seg::Idx(1)]), Some((None, (8, 14))));
        // A block mapping starts at its first key.
        assert_eq!(spot(&[k("operators"), Seg::Idx(1)]).map(|s| s.1), Some((7, 5)));
    }

    #[test]
    fn shows_paths() {
        assert_eq!(show(&[k("operators"), Seg::Idx(1), k("window"), k("size")]), "operators[1].window.size");
    }
}

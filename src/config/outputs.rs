//! The places one pipeline writes must not overlap, nor what it reads.
//!
//! Two file sinks in one directory number their part files alike and
//! publish over each other (with checkpoints, half the output disappeared);
//! a dead-letter file inside a sink's directory is read as output; an output
//! inside the state directory is removed with old checkpoints; a source that
//! reads an output reads the pipeline's own records back. Paths are compared
//! after lexical normalisation (made absolute against the working directory,
//! `.` and `..` resolved, no symlinks followed). Several dead letters may
//! share one file: their entries are appended whole. Two pipelines cannot be
//! checked against each other here (see docs/pipeline-reference.md).

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use super::locate::YPath;
use super::specs::Cx;

/// How a place is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A directory the pipeline writes into (a file sink).
    Dir,
    /// The state directory: a `Dir` that may sit inside `Savepoints`.
    State,
    /// `savepoint.dir`: a `Dir` that may hold the state directory, or be
    /// (or be inside) its `savepoints/`.
    Savepoints,
    /// A dead-letter file (appended; may be shared by several dead letters).
    DeadLetter,
    /// A file a source reads.
    Input,
}

/// The state directory's folder of savepoints (`checkpoint::layout`, which
/// config may not import).
const STATE_SAVEPOINTS: &str = "savepoints";

/// One place the pipeline writes or reads, and where the file says so.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub path: PathBuf,
    pub role: Role,
    /// What it is, for messages: "the output directory of sink `out`".
    pub what: String,
    pub at: YPath,
}

/// Report each place that collides with an earlier one (once per place).
pub(crate) fn check(cx: &mut Cx, places: &[Place]) {
    let cwd = std::env::current_dir().unwrap_or_default();
    let norm: Vec<PathBuf> = places.iter().map(|p| normalise(&p.path, &cwd)).collect();
    // A directory source has one place per file: report each pair of
    // settings once.
    let mut reported: HashSet<(&YPath, &YPath)> = HashSet::new();
    for (i, b) in places.iter().enumerate() {
        if b.path.as_os_str().is_empty() {
            continue;
        }
        // The same place is the plainest thing to say: look for it first.
        let norm = &norm;
        let earlier = |same: bool| (0..i).filter(move |&j| (norm[j] == norm[i]) == same);
        for j in earlier(true).chain(earlier(false)) {
            let a = &places[j];
            if a.path.as_os_str().is_empty() {
                continue;
            }
            if let Some(why) = collision((a, &norm[j], &cx.loc.place(&a.at)), (b, &norm[i])) {
                if reported.insert((&a.at, &b.at)) {
                    cx.err(&b.at, format!("{why}{}", same_after_normalising(a, &norm[j], b, &norm[i])));
                }
                break;
            }
        }
    }
}

/// Why `b` may not be used together with the earlier `a` (written at
/// `a_at`), if it may not.
fn collision((a, na, a_at): (&Place, &Path, &str), (b, nb): (&Place, &Path)) -> Option<String> {
    let (pa, pb) = (a.path.display(), b.path.display());
    const NEST: &str = "two outputs of one pipeline must not nest (one's files would be taken for the other's)";
    match (a.role, b.role) {
        (Role::Input, Role::Input) => None,
        (Role::Input, _) | (_, Role::Input) => {
            let (ni, no) = if a.role == Role::Input { (na, nb) } else { (nb, na) };
            let says = match (a.role == Role::Input, ni == no) {
                (true, true) => format!("{} `{pb}` is read by {} (at {a_at})", b.what, a.what),
                (true, false) => format!("{} `{pb}` holds `{pa}`, read by {} (at {a_at})", b.what, a.what),
                (false, true) => format!("{} reads `{pb}`, which is {} (at {a_at})", b.what, a.what),
                (false, false) => format!("{} reads `{pb}`, which is inside {} `{pa}` (at {a_at})", b.what, a.what),
            };
            ni.starts_with(no).then(|| format!("{says}: a pipeline must not read its own output"))
        }
        (Role::State, Role::Savepoints) | (Role::Savepoints, Role::State) => {
            let (ns, nsp) = if a.role == Role::State { (na, nb) } else { (nb, na) };
            // Savepoints are children named apart, never the state's own files.
            let refused = nsp.starts_with(ns) && !nsp.starts_with(ns.join(STATE_SAVEPOINTS));
            let how = if na == nb { "is also" } else if nb.starts_with(na) { "is inside" } else { "contains" };
            refused.then(|| {
                format!(
                    "{} `{pb}` {how} {} `{pa}` (at {a_at}): weir manages what is there; use a directory outside it, or its `{STATE_SAVEPOINTS}/`",
                    b.what, a.what
                )
            })
        }
        (Role::DeadLetter, Role::DeadLetter) if na == nb => None,
        _ if na == nb => Some(format!(
            "{} `{pb}` is also {} `{pa}` (at {a_at}): two outputs of one pipeline would write the same place and overwrite each other's files",
            b.what, a.what
        )),
        _ if nb.starts_with(na) => Some(format!("{} `{pb}` is inside {} `{pa}` (at {a_at}): {NEST}", b.what, a.what)),
        _ if na.starts_with(nb) => Some(format!("{} `{pb}` contains {} `{pa}` (at {a_at}): {NEST}", b.what, a.what)),
        _ => None,
    }
}

fn same_after_normalising(a: &Place, na: &Path, b: &Place, nb: &Path) -> String {
    if a.path == b.path || (na != nb) {
        return String::new();
    }
    format!(", both `{}` once normalised", nb.display())
}

/// `p` made absolute against `cwd`, with `.` and `..` resolved lexically.
pub(crate) fn normalise(p: &Path, cwd: &Path) -> PathBuf {
    let joined = if p.is_absolute() { p.to_path_buf() } else { cwd.join(p) };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_lexically() {
        let cwd = Path::new("/work/p");
        assert_eq!(normalise(Path::new("out/"), cwd), PathBuf::from("/work/p/out"));
        assert_eq!(normalise(Path::new("./out//x/../y"), cwd), PathBuf::from("/work/p/out/y"));
        assert_eq!(normalise(Path::new("../p/out"), cwd), PathBuf::from("/work/p/out"));
        assert_eq!(normalise(Path::new("/a/./b/"), cwd), PathBuf::from("/a/b"));
        assert_eq!(normalise(Path::new("/../a"), cwd), PathBuf::from("/a"));
    }

    fn place(path: &str, role: Role) -> Place {
        Place { path: path.into(), role, what: "x".into(), at: Vec::new() }
    }

    fn collides(a: (&str, Role), b: (&str, Role)) -> bool {
        let cwd = Path::new("/w");
        let (a, b) = (place(a.0, a.1), place(b.0, b.1));
        collision((&a, &normalise(&a.path, cwd), "f:1:1"), (&b, &normalise(&b.path, cwd))).is_some()
    }

    #[test]
    fn the_class_of_collisions() {
        use Role::*;
        assert!(collides(("out", Dir), ("./out/", Dir)), "the same directory");
        assert!(collides(("out", Dir), ("out/late.jsonl", DeadLetter)), "a dead letter inside a sink directory");
        assert!(collides(("out/bad.jsonl", DeadLetter), ("out", Dir)), "a sink directory around a dead letter");
        assert!(collides(("out/a", Dir), ("out/a/b", Dir)), "nested sink directories");
        assert!(collides(("out", Dir), ("out", DeadLetter)), "a dead letter that is a sink directory");
        assert!(collides(("out/p.jsonl", Input), ("out", Dir)), "a source reading a sink's output");
        assert!(collides(("bad.jsonl", DeadLetter), ("bad.jsonl", Input)), "a source reading a dead letter");
        assert!(!collides(("bad.jsonl", DeadLetter), ("x/../bad.jsonl", DeadLetter)), "dead letters may share a file");
        assert!(!collides(("out/a", Dir), ("out/ab", Dir)), "siblings with a common prefix");
        assert!(!collides(("in/a.jsonl", Input), ("in/a.jsonl", Input)), "two sources may read one file");
        assert!(!collides(("out", Dir), ("outs/x.jsonl", Input)));
        assert!(collides(("st", State), ("st", Savepoints)), "savepoints among the state's files");
        assert!(collides(("st", State), ("st/mine", Savepoints)), "savepoints among the state's files");
        assert!(collides(("st", State), ("st/checkpoints/x", Savepoints)), "savepoints in the checkpoints");
        assert!(!collides(("st/p", State), ("st", Savepoints)), "a savepoint directory may hold the state directory");
        assert!(!collides(("st", State), ("st/savepoints", Savepoints)));
        assert!(!collides(("st", State), ("st/savepoints/nightly", Savepoints)));
        assert!(collides(("out", Dir), ("out/sps", Savepoints)), "savepoints in a sink directory");
        assert!(collides(("sps/out", Dir), ("sps", Savepoints)), "a sink directory among savepoints");
        assert!(collides(("sps/sp/_metadata", Input), ("sps", Savepoints)), "a source reading savepoints");
    }
}

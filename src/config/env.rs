//! `${VAR}` expansion of the pipeline text, before it is parsed as YAML.
//!
//! Redpanda Connect style: `${NAME}` is the variable's value, `${NAME:default}`
//! falls back to `default` when the variable is unset or empty, `$${` is a
//! literal `${`. Expansion is textual, so it also applies inside comments.
//! Because values change the text's length, `Expanded` keeps the splices it
//! made so that a position in the expanded text maps back to the file.

/// The expanded text and how to map positions in it back to the source.
#[derive(Debug)]
pub(crate) struct Expanded {
    pub text: String,
    source: String,
    /// (start, end) byte ranges in the source and in `text`, in order.
    splices: Vec<Splice>,
}

#[derive(Debug, Clone, Copy)]
struct Splice {
    src: (usize, usize),
    out: (usize, usize),
}

/// An unresolvable reference, at a byte offset of the source text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct EnvError {
    pub offset: usize,
    pub message: String,
}

/// Expand every `${...}` in `text`, looking variables up with `env`.
pub(crate) fn expand(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Expanded, Vec<EnvError>> {
    let mut out = String::with_capacity(text.len());
    let mut splices = Vec::new();
    let mut errors = Vec::new();
    let (mut i, mut copied) = (0, 0);
    while let Some(rel) = text[i..].find('$') {
        let at = i + rel;
        let rest = &text[at..];
        let (len, value) = if rest.starts_with("$${") {
            (3, Some("${".to_string()))
        } else if rest.starts_with("${") {
            match reference(rest) {
                Ok((len, name, default)) => (len, resolve(name, default, env, at, &mut errors)),
                Err(message) => {
                    errors.push(EnvError { offset: at, message });
                    (2, None)
                }
            }
        } else {
            i = at + 1;
            continue;
        };
        if let Some(value) = value {
            out.push_str(&text[copied..at]);
            let start = out.len();
            out.push_str(&value);
            splices.push(Splice { src: (at, at + len), out: (start, out.len()) });
            copied = at + len;
        }
        i = at + len;
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    out.push_str(&text[copied..]);
    Ok(Expanded { text: out, source: text.to_string(), splices })
}

/// Parse `${NAME}` or `${NAME:default}` at the start of `s`: (length, name, default).
fn reference(s: &str) -> Result<(usize, &str, Option<&str>), String> {
    const EXPECTED: &str = "expected `${NAME}` or `${NAME:default}` (write `$${` for a literal `${`)";
    let body = &s[2..];
    let name_len = body.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(body.len());
    let name = &body[..name_len];
    if name.is_empty() {
        return Err(format!("malformed variable reference: {EXPECTED}"));
    }
    let after = &body[name_len..];
    let line_end = after.find('\n').unwrap_or(after.len());
    match (after.chars().next(), after[..line_end].find('}')) {
        (Some('}'), _) => Ok((2 + name_len + 1, name, None)),
        (Some(':'), Some(close)) => Ok((2 + name_len + close + 1, name, Some(&after[1..close]))),
        (Some(':'), None) => Err(format!("unterminated `${{{name}:`: {EXPECTED}")),
        _ => Err(format!("malformed variable reference `${{{name}`: {EXPECTED}")),
    }
}

fn resolve(
    name: &str,
    default: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
    at: usize,
    errors: &mut Vec<EnvError>,
) -> Option<String> {
    match (env(name), default) {
        (Some(v), _) if !v.is_empty() => Some(v),
        (_, Some(d)) => Some(d.to_string()),
        (Some(v), None) => Some(v),
        (None, None) => {
            errors.push(EnvError {
                offset: at,
                message: format!(
                    "environment variable `{name}` is not set and has no default \
                     (set it, or write `${{{name}:default}}`)"
                ),
            });
            None
        }
    }
}

impl Expanded {
    /// The source (line, col) of a 1-based (line, col) in the expanded text;
    /// anything inside a substituted value maps to its `${`.
    pub fn to_source(&self, line: usize, col: usize) -> (usize, usize) {
        let out = offset_of(&self.text, line, col);
        let mut src = out;
        for s in &self.splices {
            if out < s.out.0 {
                break;
            }
            src = if out < s.out.1 { s.src.0 } else { s.src.1 + (out - s.out.1) };
        }
        position_of(&self.source, src)
    }
}

/// The byte offset of a 1-based (line, col-in-chars) position, clamped.
pub(crate) fn offset_of(text: &str, line: usize, col: usize) -> usize {
    let start: usize = text.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
    let line_text = text[start..].split('\n').next().unwrap_or("");
    let within = line_text.char_indices().nth(col.saturating_sub(1)).map_or(line_text.len(), |(i, _)| i);
    start + within
}

/// The 1-based (line, col-in-chars) of a byte offset.
pub(crate) fn position_of(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "DIR" => Some("/data/in".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn substitutes_set_default_and_literal() {
        let e = expand("a: ${DIR}/x\nb: ${NOPE:5s}\nc: $${DIR}\nd: ${EMPTY:z}\n", &env).unwrap();
        assert_eq!(e.text, "a: /data/in/x\nb: 5s\nc: ${DIR}\nd: z\n");
    }

    #[test]
    fn unset_without_default_is_an_error_at_the_dollar() {
        let errs = expand("a: 1\nb: x ${NOPE}\n", &env).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!(position_of("a: 1\nb: x ${NOPE}\n", errs[0].offset), (2, 6));
        assert!(errs[0].message.contains("`NOPE` is not set"));
    }

    #[test]
    fn malformed_references_are_errors() {
        assert!(expand("a: ${ X}", &env).unwrap_err()[0].message.contains("malformed"));
        assert!(expand("a: ${X:abc\n}", &env).unwrap_err()[0].message.contains("unterminated"));
        assert!(expand("a: ${X", &env).is_err());
    }

    #[test]
    fn positions_map_back_through_substitutions() {
        let src = "p: ${DIR}/x\nq: ${NOPE:1} é bad\n";
        let e = expand(src, &env).unwrap();
        // `bad` is at line 2 col 16 in the source, col 8 after expansion.
        assert_eq!(e.to_source(2, 8), (2, 16));
        // Inside the substituted value: the `${`.
        assert_eq!(e.to_source(1, 8), (1, 4));
        // After it on the same line.
        assert_eq!(e.to_source(1, 12), (1, 10));
    }
}

//! Finding the `#include` directives of a file, as the include model needs them: the name, whether
//! it was quoted or angled, and whether it was `#include_next`.
//!
//! The scan is textual, not a preprocessor: it also finds directives inside `#if 0` blocks and
//! comments. That is safe for the model, which only takes a directive as active when the file it
//! resolves to was read by the compile (it is in the dependency file). A directive whose name is a
//! macro (`#include HEADER`) cannot be resolved textually: the scan says so, and the model falls
//! back to a conservative record for the files such directives reach.

/// One include directive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Directive {
    /// `#include "x"` (true) or `#include <x>` (false).
    pub(crate) quoted: bool,
    /// `#include_next`.
    pub(crate) next: bool,
    /// The name between the delimiters, as bytes.
    pub(crate) name: Vec<u8>,
}

/// What a scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    pub(crate) directives: Vec<Directive>,
    /// Some directive names a macro instead of a header (`#include HEADER`).
    pub(crate) computed: bool,
}

/// Scans a file's text for include directives (`#include`, `#include_next`, `#import`).
pub(crate) fn scan(text: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut rest = text;
    while !rest.is_empty() {
        let (line, next) = logical_line(rest);
        rest = next;
        if let Some(found) = directive(&line) {
            match found {
                Some(d) => out.directives.push(d),
                None => out.computed = true,
            }
        }
    }
    out
}

/// Splits off one logical line (backslash-newline continuations joined).
fn logical_line(text: &[u8]) -> (std::borrow::Cow<'_, [u8]>, &[u8]) {
    let end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
    let line = &text[..end];
    let rest = text.get(end + 1..).unwrap_or(&[]);
    let continued = line.strip_suffix(b"\r").unwrap_or(line).ends_with(b"\\");
    if !continued || rest.is_empty() {
        return (std::borrow::Cow::Borrowed(line), rest);
    }
    let mut joined = line.strip_suffix(b"\r").unwrap_or(line).to_vec();
    joined.pop();
    let (tail, rest) = logical_line(rest);
    joined.extend_from_slice(&tail);
    (std::borrow::Cow::Owned(joined), rest)
}

fn skip_blanks(line: &[u8], mut at: usize) -> usize {
    loop {
        while at < line.len() && (line[at] == b' ' || line[at] == b'\t') {
            at += 1;
        }
        // A comment between `#` and the keyword (`# /* x */ include`) is whitespace.
        if line[at..].starts_with(b"/*") {
            match line[at + 2..].windows(2).position(|w| w == b"*/") {
                Some(end) => at += 2 + end + 2,
                None => return line.len(),
            }
        } else {
            return at;
        }
    }
}

/// `Some(Some(d))` for an include directive, `Some(None)` for one whose name is a macro, `None`
/// for any other line.
fn directive(line: &[u8]) -> Option<Option<Directive>> {
    let mut at = skip_blanks(line, 0);
    if line.get(at) != Some(&b'#') {
        return None;
    }
    at = skip_blanks(line, at + 1);
    let word_end = line[at..]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        .map_or(line.len(), |n| at + n);
    let next = match &line[at..word_end] {
        b"include" | b"import" => false,
        b"include_next" => true,
        _ => return None,
    };
    at = skip_blanks(line, word_end);
    let (quoted, close) = match line.get(at) {
        Some(b'"') => (true, b'"'),
        Some(b'<') => (false, b'>'),
        _ => return Some(None),
    };
    let name_start = at + 1;
    let len = line[name_start..].iter().position(|&b| b == close)?;
    if len == 0 {
        return None;
    }
    Some(Some(Directive {
        quoted,
        next,
        name: line[name_start..name_start + len].to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(quoted: bool, next: bool, name: &[u8]) -> Directive {
        Directive {
            quoted,
            next,
            name: name.to_vec(),
        }
    }

    #[test]
    fn finds_every_spelling_of_an_include() {
        let text = b"#include \"a.cuh\"\n  #  include <b/c.h>\n#include_next <d.h>\r\n\
            # /* why */ include \"e.h\"\n#import \"f.h\"\n#inc\\\nlude \"g.h\"\nint x; // #include \"no\"\n\
            #include \"h\xff.cuh\"\n#define include \"no.h\"\n";
        let scan = scan(text);
        assert_eq!(
            scan.directives,
            vec![
                d(true, false, b"a.cuh"),
                d(false, false, b"b/c.h"),
                d(false, true, b"d.h"),
                d(true, false, b"e.h"),
                d(true, false, b"f.h"),
                d(true, false, b"g.h"),
                d(true, false, b"h\xff.cuh"),
            ]
        );
        assert!(!scan.computed);
    }

    #[test]
    fn a_macro_include_is_reported_as_computed() {
        let scan = scan(b"#define H \"x.h\"\n#include H\n");
        assert!(scan.directives.is_empty());
        assert!(scan.computed, "`#include H` names a macro");
    }
}

//! Finding the `#include` directives of a file, as the include model needs them: the name, whether
//! it was quoted or angled, and whether it was `#include_next`.
//!
//! The scan is textual, not a preprocessor: it also finds directives inside `#if 0` blocks and
//! comments. That is safe for the model, which only takes a directive as active when the file it
//! resolves to was read by the compile (it is in the dependency file). A directive whose name is a
//! macro (`#include HEADER`) cannot be resolved textually and is skipped: the files it reached are
//! in the dependency file but reached by no directive, and the model records them conservatively.

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

/// Scans a file's text for include directives (`#include`, `#include_next`, `#import`) whose
/// name is written out (a macro name is skipped).
pub(crate) fn scan(text: &[u8]) -> Vec<Directive> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (line, next) = logical_line(rest);
        rest = next;
        out.extend(directive(&line));
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

/// The include directive on `line`, if it is one with a written-out name.
fn directive(line: &[u8]) -> Option<Directive> {
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
        // `#include HEADER`: a macro name, resolved only by the preprocessor.
        _ => return None,
    };
    let name_start = at + 1;
    let len = line[name_start..].iter().position(|&b| b == close)?;
    if len == 0 {
        return None;
    }
    Some(Directive {
        quoted,
        next,
        name: line[name_start..name_start + len].to_vec(),
    })
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
        assert_eq!(
            scan(text),
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
    }

    #[test]
    fn a_macro_include_is_skipped() {
        assert!(
            scan(b"#define H \"x.h\"\n#include H\n").is_empty(),
            "`#include H` names a macro, not a header"
        );
    }
}

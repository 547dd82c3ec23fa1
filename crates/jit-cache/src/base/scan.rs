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
#[cfg(test)]
pub(crate) fn scan(text: &[u8]) -> Vec<Directive> {
    scan_all(text).directives
}

/// A file's include directives, its `__has_include` probes, and whether it also looks files up
/// by names its text does not spell (`#include MACRO`, `__has_include(MACRO)`): only the
/// compiler, or a trace of it, knows where those go.
#[derive(Debug, Default)]
pub(crate) struct Scanned {
    pub(crate) directives: Vec<Directive>,
    /// `__has_include(<x>)` and `__has_include_next("x")`, anywhere in the text: each looks `x`
    /// up along the search chain as an include would, and reads nothing.
    pub(crate) probes: Vec<Directive>,
    pub(crate) computed: bool,
}

/// [`scan`], the probes, and whether the text has lookups by unspelled names.
pub(crate) fn scan_all(text: &[u8]) -> Scanned {
    let mut out = Scanned::default();
    probes(text, &mut out);
    let mut rest = text;
    while !rest.is_empty() {
        let (line, next) = logical_line(rest);
        rest = next;
        match directive(&line) {
            Ok(Some(found)) => out.directives.push(found),
            Ok(None) => {}
            Err(Computed) => out.computed = true,
        }
    }
    out
}

/// An include directive whose name is not written out.
struct Computed;

/// `text` after its leading blanks (spaces and tabs).
pub(crate) fn blanks(text: &[u8]) -> &[u8] {
    let n = text
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count();
    &text[n..]
}

/// Finds `__has_include` and `__has_include_next` calls. A mention that is no call
/// (`#ifdef __has_include`, `defined(__has_include)`) probes nothing.
fn probes(text: &[u8], out: &mut Scanned) {
    const WORD: &[u8] = b"__has_include";
    for at in memchr::memmem::find_iter(text, WORD) {
        let mut rest = &text[at + WORD.len()..];
        let next = rest.starts_with(b"_next");
        if next {
            rest = &rest[b"_next".len()..];
        }
        if rest
            .first()
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            continue;
        }
        let Some(rest) = blanks(rest).strip_prefix(b"(") else {
            continue;
        };
        let rest = blanks(rest);
        let (quoted, close) = match rest.first() {
            Some(b'"') => (true, b'"'),
            Some(b'<') => (false, b'>'),
            _ => {
                out.computed = true;
                continue;
            }
        };
        match rest[1..].iter().position(|&b| b == close || b == b'\n') {
            Some(len) if len > 0 && rest[1 + len] == close => out.probes.push(Directive {
                quoted,
                next,
                name: rest[1..1 + len].to_vec(),
            }),
            _ => out.computed = true,
        }
    }
}

/// Splits off one logical line for the include scan: a continued line is joined only when it
/// can be an include directive (a miss scans every header the compile read, megabytes of text,
/// and `#define`s continued over many lines are common there); any other continued logical line
/// comes back empty.
fn logical_line(text: &[u8]) -> (std::borrow::Cow<'_, [u8]>, &[u8]) {
    logical_line_where(text, may_start_include)
}

/// Splits off one logical line (backslash-newline continuations joined), and the text after it.
/// Lines are found with `memchr`; a line that is not continued is borrowed, never copied.
pub(crate) fn whole_logical_line(text: &[u8]) -> (std::borrow::Cow<'_, [u8]>, &[u8]) {
    logical_line_where(text, |_| true)
}

/// A logical line, joined when `join` accepts its first physical line (else empty).
fn logical_line_where(
    text: &[u8],
    join: impl Fn(&[u8]) -> bool,
) -> (std::borrow::Cow<'_, [u8]>, &[u8]) {
    let first_end = physical_end(text, 0);
    let (mut start, mut end) = (0, first_end);
    while continued(&text[start..end]) && end < text.len() {
        start = end + 1;
        end = physical_end(text, start);
    }
    let rest = after(text, end);
    if end == first_end {
        return (std::borrow::Cow::Borrowed(&text[..end]), rest);
    }
    if !join(&text[..first_end]) {
        return (std::borrow::Cow::Borrowed(&[][..]), rest);
    }
    let mut joined = Vec::with_capacity(end);
    let mut piece_start = 0;
    loop {
        let piece_end = physical_end(text, piece_start);
        let piece = &text[piece_start..piece_end];
        if piece_end >= end {
            joined.extend_from_slice(piece);
            break;
        }
        let piece = piece.strip_suffix(b"\r").unwrap_or(piece);
        joined.extend_from_slice(&piece[..piece.len() - 1]);
        piece_start = piece_end + 1;
    }
    (std::borrow::Cow::Owned(joined), rest)
}

/// Whether the first physical line of a continued logical line can begin an include directive
/// once joined: blanks (or comments), or a `#` and blanks, then a word that is, or is cut from,
/// `include`, `include_next` or `import`.
fn may_start_include(first: &[u8]) -> bool {
    let body = first.strip_suffix(b"\r").unwrap_or(first);
    let body = body.strip_suffix(b"\\").unwrap_or(body);
    let at = skip_blanks(body, 0);
    if at == body.len() {
        return true;
    }
    if body[at] != b'#' {
        return false;
    }
    let at = skip_blanks(body, at + 1);
    let word_len = body[at..]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        .unwrap_or(body.len() - at);
    let word = &body[at..at + word_len];
    if at + word_len == body.len() {
        b"include_next".starts_with(word) || b"import".starts_with(word)
    } else {
        matches!(word, b"include" | b"include_next" | b"import")
    }
}

/// The end (exclusive, before its newline) of the physical line starting at `start`.
fn physical_end(text: &[u8], start: usize) -> usize {
    memchr::memchr(b'\n', &text[start..]).map_or(text.len(), |n| start + n)
}

/// The text after the newline that ends at `end`.
fn after(text: &[u8], end: usize) -> &[u8] {
    text.get(end + 1..).unwrap_or(&[])
}

/// Whether a physical line ends with a backslash (before an optional `\r`).
fn continued(line: &[u8]) -> bool {
    line.strip_suffix(b"\r").unwrap_or(line).ends_with(b"\\")
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

/// The include directive on `line`, if it is one with a written-out name; `Computed` if it is
/// one whose name is a macro.
fn directive(line: &[u8]) -> Result<Option<Directive>, Computed> {
    let mut at = skip_blanks(line, 0);
    if line.get(at) != Some(&b'#') {
        return Ok(None);
    }
    at = skip_blanks(line, at + 1);
    let word_end = line[at..]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        .map_or(line.len(), |n| at + n);
    let next = match &line[at..word_end] {
        b"include" | b"import" => false,
        b"include_next" => true,
        _ => return Ok(None),
    };
    at = skip_blanks(line, word_end);
    let (quoted, close) = match line.get(at) {
        Some(b'"') => (true, b'"'),
        Some(b'<') => (false, b'>'),
        // `#include HEADER`: a macro name, resolved only by the preprocessor.
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => return Err(Computed),
        // Prose in a comment (`#include's`), or nothing.
        _ => return Ok(None),
    };
    let name_start = at + 1;
    let Some(len) = line[name_start..].iter().position(|&b| b == close) else {
        return Ok(None);
    };
    if len == 0 {
        return Ok(None);
    }
    Ok(Some(Directive {
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
    fn lookups_no_directive_spells_are_told() {
        assert!(!scan_all(b"#include \"a.h\"\n#define X 1\n").computed);
        assert!(scan_all(b"#define H \"x.h\"\n#include H\n").computed);
        assert!(scan_all(b"#if __has_include(OPT)\n#endif\n").computed);
        assert!(
            !scan_all(b"/* #include's protect themselves */\n").computed,
            "prose in a comment (glibc's limits.h) names no macro"
        );
        let probed = scan_all(
            b"#ifdef __has_include\n#if __has_include(<opt.h>) && __has_include_next ( \"o.h\" )\n\
              #endif\n#endif\n#if defined(__has_include)\n#endif\n",
        );
        assert!(!probed.computed);
        assert_eq!(
            probed.probes,
            vec![d(false, false, b"opt.h"), d(true, true, b"o.h")]
        );
        assert!(probed.directives.is_empty());
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
    fn continued_lines_join_only_into_directives() {
        let text = b"#imp\\\nort \"i.h\"\n  \\\n#include <j.h>\n#define M(x) \\\n  x \\\n#include \"no.h\"\n\
            int y = 1; \\\n#include \"no2.h\"\n#include_ne\\\r\nxt <k.h>\n";
        assert_eq!(
            scan(text),
            vec![
                d(true, false, b"i.h"),
                d(false, false, b"j.h"),
                d(false, true, b"k.h")
            ]
        );
        assert_eq!(scan(text), reference(text));
    }

    #[test]
    fn a_macro_include_is_skipped() {
        assert!(
            scan(b"#define H \"x.h\"\n#include H\n").is_empty(),
            "`#include H` names a macro, not a header"
        );
    }

    /// The scan before lines were found with `memchr` and joined lazily: every continued line
    /// joined, every logical line parsed.
    fn reference(text: &[u8]) -> Vec<Directive> {
        fn logical(text: &[u8]) -> (Vec<u8>, &[u8]) {
            let end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
            let line = &text[..end];
            let rest = text.get(end + 1..).unwrap_or(&[]);
            let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
            if !trimmed.ends_with(b"\\") || rest.is_empty() {
                return (line.to_vec(), rest);
            }
            let mut joined = trimmed[..trimmed.len() - 1].to_vec();
            let (tail, rest) = logical(rest);
            joined.extend_from_slice(&tail);
            (joined, rest)
        }
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (line, next) = logical(rest);
            rest = next;
            out.extend(directive(&line).ok().flatten());
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn the_fast_scan_finds_what_joining_every_line_finds(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    "#", "# ", "include", "inc", "lude", "_next", "import", "imp", "ort", "define", "x",
                    " ", "\t", "\\\n", "\\\r\n", "\n", "\r\n", "\"a.h\"", "<b/c.h>", "/*", "*/",
                    "\"", "<", ">", "\\",
                ]),
                0..40,
            )
        ) {
            let text = pieces.concat().into_bytes();
            proptest::prop_assert_eq!(scan(&text), reference(&text));
        }
    }
}

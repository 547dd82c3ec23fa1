//! Parsing Makefile dependency files as written by `nvcc -MD -MF` and `gcc -MD -MF`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// A dependency file that is not valid Makefile rule syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dependency file line {line}: {message}")]
pub struct DepfileError {
    /// The 1-based physical line where the bad rule starts.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Returns every prerequisite named in a Makefile dependency file, in order of first appearance,
/// without duplicates.
///
/// The file is read as bytes: a header whose name is not UTF-8 (`h\xff.cuh`) is returned with
/// exactly those bytes, since paths on Linux are bytes.
///
/// Handles what compilers write: several rules, several targets per rule (`a.o b.d: x.h`), phony
/// rules with no prerequisites (`-MP`), backslash-newline continuations (also `\r\n`), `\ ` for a
/// space and `\#` for `#` in names, `$$` for `$`, and `#` comments. Targets are not returned. A
/// backslash before any other character is kept literally, as make does.
///
/// # Errors
/// A non-blank logical line with no `:` separating targets from prerequisites.
pub fn parse_depfile(text: impl AsRef<[u8]>) -> Result<Vec<PathBuf>, DepfileError> {
    let mut prerequisites: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (line_no, logical) in logical_lines(text.as_ref()) {
        let words = split_words(&logical);
        let Some(colon) = words.iter().position(|w| matches!(w, Word::Colon)) else {
            if words.is_empty() {
                continue;
            }
            return Err(DepfileError {
                line: line_no,
                message: format!(
                    "no ':' in rule {:?}",
                    String::from_utf8_lossy(&logical).trim()
                ),
            });
        };
        for word in &words[colon + 1..] {
            if let Word::Name(name) = word {
                if seen.insert(name.clone()) {
                    prerequisites.push(PathBuf::from(OsString::from_vec(name.clone())));
                }
            }
        }
    }
    Ok(prerequisites)
}

/// Joins continuation lines and strips comments; yields each logical line with the physical line
/// number it starts on.
fn logical_lines(text: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut start = 1;
    for (index, raw) in text.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if current.is_empty() {
            start = index + 1;
        }
        // A line continues when it ends in an odd number of backslashes: an even number is a run
        // of literal backslashes.
        let trailing = raw.iter().rev().take_while(|&&b| b == b'\\').count();
        if trailing % 2 == 1 {
            current.extend_from_slice(&raw[..raw.len() - 1]);
            current.push(b' ');
        } else {
            current.extend_from_slice(raw);
            out.push((start, std::mem::take(&mut current)));
        }
    }
    if !current.is_empty() {
        out.push((start, current));
    }
    out
}

#[derive(Debug)]
enum Word {
    Name(Vec<u8>),
    Colon,
}

/// Splits one logical line into names and the first target/prerequisite separator.
fn split_words(line: &[u8]) -> Vec<Word> {
    let mut words = Vec::new();
    let mut name = Vec::new();
    let mut seen_colon = false;
    let mut bytes = line.iter().copied().peekable();
    let flush = |name: &mut Vec<u8>, words: &mut Vec<Word>| {
        if !name.is_empty() {
            words.push(Word::Name(std::mem::take(name)));
        }
    };
    while let Some(c) = bytes.next() {
        match c {
            b'\\' => match bytes.peek() {
                Some(&next @ (b' ' | b'\t' | b'#' | b':')) => {
                    name.push(next);
                    bytes.next();
                }
                Some(b'\\') => {
                    // `\\` before an escaped space is an escaped backslash (gcc writes `\\\ ` for a
                    // name ending in a backslash followed by a space); elsewhere both are literal.
                    bytes.next();
                    name.push(b'\\');
                    if matches!(bytes.peek(), Some(b' ' | b'\t' | b'#')) {
                        continue;
                    }
                    name.push(b'\\');
                }
                _ => name.push(b'\\'),
            },
            b'$' if bytes.peek() == Some(&b'$') => {
                bytes.next();
                name.push(b'$');
            }
            b'#' => break,
            b' ' | b'\t' => flush(&mut name, &mut words),
            b':' if !seen_colon && is_separator_colon(bytes.peek().copied()) => {
                flush(&mut name, &mut words);
                words.push(Word::Colon);
                seen_colon = true;
            }
            _ => name.push(c),
        }
    }
    flush(&mut name, &mut words);
    words
}

/// The rule separator is a `:` followed by whitespace or the end of the line; a `:` inside a name
/// (`C:\x`, `a:b`) is part of the name.
fn is_separator_colon(next: Option<u8>) -> bool {
    matches!(next, None | Some(b' ' | b'\t'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn nvcc_style_rule_with_continuations() {
        let text = "k.cubin : k.cu \\\n    /usr/include/stdc-predef.h \\\n    user.h \\\n    inc/incdir.h\n";
        assert_eq!(
            parse_depfile(text).expect("valid depfile"),
            paths(&[
                "k.cu",
                "/usr/include/stdc-predef.h",
                "user.h",
                "inc/incdir.h"
            ]),
            "every prerequisite in order",
        );
    }

    #[test]
    fn escapes_several_targets_phony_rules_and_comments() {
        let text =
            "# generated\r\na.o a.d: a\\ b.h c$$d.h \\\r\n  e\\#f.h a.h\r\n\r\na\\ b.h:\nc$$d.h:\n";
        assert_eq!(
            parse_depfile(text).expect("valid depfile"),
            paths(&["a b.h", "c$d.h", "e#f.h", "a.h"]),
            "escapes decoded, duplicates from phony rules dropped",
        );
    }

    #[test]
    fn escaped_space_in_the_middle_of_a_rule() {
        let text =
            "k.cubin : k.cu \\\n    user.h \\\n    inc\\ dir/through_include.h \\\n    dev90.h\n";
        assert_eq!(
            parse_depfile(text).expect("valid depfile"),
            paths(&["k.cu", "user.h", "inc dir/through_include.h", "dev90.h"]),
            "an escaped space stays inside its name",
        );
    }

    #[test]
    fn names_that_are_not_utf8_keep_their_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let headers = parse_depfile(b"k.o: k.cu h\xff.cuh\n").expect("valid depfile");
        assert_eq!(
            headers[1].as_os_str().as_bytes(),
            b"h\xff.cuh",
            "bytes kept as they are"
        );
    }

    #[test]
    fn a_rule_without_a_colon_is_an_error_naming_the_line() {
        let err = parse_depfile("a.o: x.h\n\njust words\n").expect_err("no colon on line 3");
        assert_eq!(err.line, 3, "the error names the line of the bad rule");
    }
}

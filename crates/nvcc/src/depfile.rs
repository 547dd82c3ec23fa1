//! Parsing Makefile dependency files as written by `nvcc -MD -MF` and `gcc -MD -MF`.

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
/// Handles what compilers write: several rules, several targets per rule (`a.o b.d: x.h`), phony
/// rules with no prerequisites (`-MP`), backslash-newline continuations (also `\r\n`), `\ ` for a
/// space and `\#` for `#` in names, `$$` for `$`, and `#` comments. Targets are not returned. A
/// backslash before any other character is kept literally, as make does.
///
/// # Errors
/// A non-blank logical line with no `:` separating targets from prerequisites.
pub fn parse_depfile(text: &str) -> Result<Vec<PathBuf>, DepfileError> {
    let mut prerequisites: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (line_no, logical) in logical_lines(text) {
        let words = split_words(&logical);
        let Some(colon) = words.iter().position(|w| matches!(w, Word::Colon)) else {
            if words.is_empty() {
                continue;
            }
            return Err(DepfileError {
                line: line_no,
                message: format!("no ':' in rule {:?}", logical.trim()),
            });
        };
        for word in &words[colon + 1..] {
            if let Word::Name(name) = word {
                if seen.insert(name.clone()) {
                    prerequisites.push(PathBuf::from(name));
                }
            }
        }
    }
    Ok(prerequisites)
}

/// Joins continuation lines and strips comments; yields each logical line with the physical line
/// number it starts on.
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (index, raw) in text.split('\n').enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if current.is_empty() {
            start = index + 1;
        }
        // A line continues when it ends in an odd number of backslashes: an even number is a run
        // of literal backslashes.
        let trailing = raw.len() - raw.trim_end_matches('\\').len();
        if trailing % 2 == 1 {
            current.push_str(&raw[..raw.len() - 1]);
            current.push(' ');
        } else {
            current.push_str(raw);
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
    Name(String),
    Colon,
}

/// Splits one logical line into names and the first target/prerequisite separator.
fn split_words(line: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut name = String::new();
    let mut seen_colon = false;
    let mut chars = line.chars().peekable();
    let flush = |name: &mut String, words: &mut Vec<Word>| {
        if !name.is_empty() {
            words.push(Word::Name(std::mem::take(name)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.peek() {
                Some(&next @ (' ' | '\t' | '#' | ':')) => {
                    name.push(next);
                    chars.next();
                }
                Some('\\') => {
                    // `\\` before an escaped space is an escaped backslash (gcc writes `\\\ ` for a
                    // name ending in a backslash followed by a space); elsewhere both are literal.
                    chars.next();
                    name.push('\\');
                    if matches!(chars.peek(), Some(' ' | '\t' | '#')) {
                        continue;
                    }
                    name.push('\\');
                }
                _ => name.push('\\'),
            },
            '$' if chars.peek() == Some(&'$') => {
                chars.next();
                name.push('$');
            }
            '#' => break,
            ' ' | '\t' => flush(&mut name, &mut words),
            ':' if !seen_colon && is_separator_colon(chars.peek().copied()) => {
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
fn is_separator_colon(next: Option<char>) -> bool {
    matches!(next, None | Some(' ' | '\t'))
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
    fn a_rule_without_a_colon_is_an_error_naming_the_line() {
        let err = parse_depfile("a.o: x.h\n\njust words\n").expect_err("no colon on line 3");
        assert_eq!(err.line, 3, "the error names the line of the bad rule");
    }
}

//! Structured diagnostics parsed from the stderr of nvcc, its tools and the host compiler.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Severity {
    /// An error that stops the compile ("catastrophic error", "fatal error", "nvcc fatal").
    Fatal,
    /// An error.
    Error,
    /// A warning.
    Warning,
    /// A note, remark or informational line attached to another diagnostic.
    Note,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Fatal => "fatal error",
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One diagnostic: where it points, how serious it is, and what it says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// The file the diagnostic points at; `None` for tool-level messages (`ptxas fatal : ...`).
    pub file: Option<PathBuf>,
    /// 1-based line, when the tool gave one.
    pub line: Option<u32>,
    /// 1-based column; the host compiler gives one, nvcc's front end does not.
    pub column: Option<u32>,
    /// How serious it is.
    pub severity: Severity,
    /// The message text, without the location and severity prefix.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
                if let Some(column) = self.column {
                    write!(f, ":{column}")?;
                }
            }
            f.write_str(": ")?;
        }
        write!(f, "{}: {}", self.severity, self.message)
    }
}

/// Severity words in the order they must be tried (longest first, so "fatal error" is not read as
/// "error").
const SEVERITY_WORDS: &[(&str, Severity)] = &[
    ("catastrophic error", Severity::Fatal),
    ("fatal error", Severity::Fatal),
    ("error", Severity::Error),
    ("warning", Severity::Warning),
    ("remark", Severity::Note),
    ("note", Severity::Note),
];

/// Programs that print `tool severity : message` lines (nvcc pads the severity with spaces).
const TOOLS: &[&str] = &[
    "nvcc",
    "ptxas",
    "nvlink",
    "fatbinary",
    "cicc",
    "cudafe++",
    "nvdisasm",
];

/// Programs that print `tool: severity: message` lines with no file.
const HOST_TOOLS: &[&str] = &[
    "cc1plus", "cc1", "g++", "gcc", "c++", "collect2", "ld", "as",
];

/// Parses the diagnostics in a compile's stderr.
///
/// Recognised forms, one per line:
/// - nvcc's front end: `file(line): error: message`, `file(line): warning #177-D: message`,
///   `file(line): catastrophic error: message`;
/// - the host compiler: `file:line:col: error: message`, `file:line: warning: message`,
///   `cc1plus: error: message`;
/// - nvcc's tools: `ptxas error   : message`, `nvcc fatal   : message`.
///
/// Lines that start with whitespace are source excerpts and carets, and are skipped, so source text
/// that happens to contain `: error:` is not taken for a diagnostic. Anything else is ignored.
pub fn parse_diagnostics(stderr: &str) -> Vec<Diagnostic> {
    stderr.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Diagnostic> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() || line.starts_with(char::is_whitespace) {
        return None;
    }
    parse_tool_line(line).or_else(|| parse_located_line(line))
}

/// `ptxas error   : message` and friends.
fn parse_tool_line(line: &str) -> Option<Diagnostic> {
    let (tool, rest) = line.split_once(' ')?;
    if !TOOLS.contains(&tool) {
        return None;
    }
    let rest = rest.trim_start();
    let (word, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let word = word.strip_suffix(':').unwrap_or(word);
    let severity = match word {
        "fatal" => Severity::Fatal,
        "error" => Severity::Error,
        "warning" => Severity::Warning,
        "info" => Severity::Note,
        _ => return None,
    };
    let message = rest.trim_start();
    let message = message.strip_prefix(':').unwrap_or(message).trim_start();
    Some(Diagnostic {
        file: None,
        line: None,
        column: None,
        severity,
        message: message.to_owned(),
    })
}

/// `prefix: severity[ #N[-D]]: message`, where the prefix carries the location.
fn parse_located_line(line: &str) -> Option<Diagnostic> {
    for (pos, _) in line.match_indices(": ") {
        let rest = &line[pos + 2..];
        let Some((severity, message)) = match_severity(rest) else {
            continue;
        };
        let prefix = &line[..pos];
        if prefix.is_empty() {
            return None;
        }
        let (file, line_no, column) = split_location(prefix);
        let file = if line_no.is_none() && HOST_TOOLS.contains(&file) {
            None
        } else {
            Some(PathBuf::from(file))
        };
        return Some(Diagnostic {
            file,
            line: line_no,
            column,
            severity,
            message: message.to_owned(),
        });
    }
    None
}

/// Matches `severity[ #digits[-D]]: ` at the start of `rest` and returns the message after it.
fn match_severity(rest: &str) -> Option<(Severity, &str)> {
    for (word, severity) in SEVERITY_WORDS {
        let Some(after) = rest.strip_prefix(word) else {
            continue;
        };
        let after = match after.strip_prefix(" #") {
            Some(number) => {
                let digits = number.len()
                    - number
                        .trim_start_matches(|c: char| c.is_ascii_digit())
                        .len();
                if digits == 0 {
                    continue;
                }
                let number = &number[digits..];
                number.strip_prefix("-D").unwrap_or(number)
            }
            None => after,
        };
        if let Some(message) = after.strip_prefix(": ") {
            return Some((*severity, message));
        }
        if after == ":" {
            return Some((*severity, ""));
        }
    }
    None
}

/// Splits `file(line)`, `file:line:col` or `file:line` from the right; anything else is a bare file.
fn split_location(prefix: &str) -> (&str, Option<u32>, Option<u32>) {
    if let Some(inner) = prefix.strip_suffix(')') {
        if let Some((file, number)) = inner.rsplit_once('(') {
            if let Some(line) = parse_number(number) {
                if !file.is_empty() {
                    return (file, Some(line), None);
                }
            }
        }
    }
    if let Some((head, last)) = prefix.rsplit_once(':') {
        if let Some(last) = parse_number(last) {
            if let Some((file, middle)) = head.rsplit_once(':') {
                if let Some(line) = parse_number(middle) {
                    if !file.is_empty() {
                        return (file, Some(line), Some(last));
                    }
                }
            }
            if !head.is_empty() {
                return (head, Some(last), None);
            }
        }
    }
    (prefix, None, None)
}

fn parse_number(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diag(
        file: Option<&str>,
        line: Option<u32>,
        column: Option<u32>,
        severity: Severity,
        message: &str,
    ) -> Diagnostic {
        Diagnostic {
            file: file.map(PathBuf::from),
            line,
            column,
            severity,
            message: message.to_owned(),
        }
    }

    #[test]
    fn parses_the_real_outputs_seen_from_nvcc_13_5_and_gcc_12() {
        let stderr = "bad.cu(4): error: expected a \";\"\n  }\n  ^\n\n\
bad.cu(5): error: identifier \"undefined_thing\" is undefined\n  int f() { return undefined_thing; }\n\n\
2 errors detected in the compilation of \"bad.cu\".\n\
bad2.cu:1:10: fatal error: nope.h: No such file or directory\n    1 | #include \"nope.h\"\n\
compilation terminated.\n\
w.cu(3): warning #177-D: variable \"unused\" was declared but never referenced\n\
Remark: The warnings can be suppressed with \"-diag-suppress <warning-number>\"\n\
h.cu: In function 'int foo()':\n\
h.cu:1:20: error: no return statement in function returning non-void [-Werror=return-type]\n\
cc1plus: some warnings being treated as errors\n\
ptxas fatal   : Unresolved extern function 'f'\n\
nvcc fatal   : Unsupported gpu architecture 'compute_1'\n\
x.cu(9): catastrophic error: cannot open source file \"y.h\"\n\
cc1plus: error: unrecognized command-line option '-fnope'\n";
        let got = parse_diagnostics(stderr);
        let want = vec![
            diag(
                Some("bad.cu"),
                Some(4),
                None,
                Severity::Error,
                "expected a \";\"",
            ),
            diag(
                Some("bad.cu"),
                Some(5),
                None,
                Severity::Error,
                "identifier \"undefined_thing\" is undefined",
            ),
            diag(
                Some("bad2.cu"),
                Some(1),
                Some(10),
                Severity::Fatal,
                "nope.h: No such file or directory",
            ),
            diag(
                Some("w.cu"),
                Some(3),
                None,
                Severity::Warning,
                "variable \"unused\" was declared but never referenced",
            ),
            diag(
                Some("h.cu"),
                Some(1),
                Some(20),
                Severity::Error,
                "no return statement in function returning non-void [-Werror=return-type]",
            ),
            diag(
                None,
                None,
                None,
                Severity::Fatal,
                "Unresolved extern function 'f'",
            ),
            diag(
                None,
                None,
                None,
                Severity::Fatal,
                "Unsupported gpu architecture 'compute_1'",
            ),
            diag(
                Some("x.cu"),
                Some(9),
                None,
                Severity::Fatal,
                "cannot open source file \"y.h\"",
            ),
            diag(
                None,
                None,
                None,
                Severity::Error,
                "unrecognized command-line option '-fnope'",
            ),
        ];
        assert_eq!(
            got, want,
            "every diagnostic line is parsed and every other line is skipped"
        );
    }

    #[test]
    fn source_excerpts_that_look_like_diagnostics_are_skipped() {
        let stderr = "  printf(\"a.cu:1:2: error: fake\");\n    3 | x.cu(1): error: fake\n";
        assert!(
            parse_diagnostics(stderr).is_empty(),
            "indented excerpt lines are never diagnostics"
        );
    }

    #[test]
    fn file_names_with_colons_and_parentheses_split_from_the_right() {
        assert_eq!(
            parse_diagnostics("dir:a/b(1).cu:3:4: warning: w\nk(2)(7): error: e\n"),
            vec![
                diag(
                    Some("dir:a/b(1).cu"),
                    Some(3),
                    Some(4),
                    Severity::Warning,
                    "w"
                ),
                diag(Some("k(2)"), Some(7), None, Severity::Error, "e"),
            ],
            "the location is the last numeric suffix",
        );
    }
}

//! Property tests: what a compiler writes, the parsers read back.

use nvcc::{parse_depfile, parse_diagnostics, Diagnostic, Severity};
use proptest::prelude::*;
use std::path::PathBuf;

/// Escapes a name the way gcc and nvcc do in dependency files.
fn escape(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        match c {
            ' ' => out.push_str("\\ "),
            '#' => out.push_str("\\#"),
            '$' => out.push_str("$$"),
            _ => out.push(c),
        }
    }
    out
}

fn path_name() -> impl Strategy<Value = String> {
    // Names with spaces, `#`, `$`, colons inside, dots and slashes; no trailing backslash, no
    // newline, not starting with a space.
    "[a-zA-Z0-9_./+-][a-zA-Z0-9_./+# $:()-]{0,30}[a-zA-Z0-9_.h]"
}

proptest! {
    #[test]
    fn depfile_round_trips(
        targets in prop::collection::vec(path_name(), 1..3),
        prereqs in prop::collection::vec(path_name(), 0..12),
        wrap in prop::collection::vec(any::<bool>(), 12),
        crlf in any::<bool>(),
        phony in any::<bool>(),
    ) {
        let newline = if crlf { "\r\n" } else { "\n" };
        let mut text = targets.iter().map(|t| escape(t)).collect::<Vec<_>>().join(" ");
        text.push_str(" :");
        for (i, p) in prereqs.iter().enumerate() {
            if wrap[i] {
                text.push_str(" \\");
                text.push_str(newline);
                text.push_str("   ");
            } else {
                text.push(' ');
            }
            text.push_str(&escape(p));
        }
        text.push_str(newline);
        if phony {
            for p in &prereqs {
                text.push_str(&escape(p));
                text.push(':');
                text.push_str(newline);
                text.push_str(newline);
            }
        }
        let mut want: Vec<PathBuf> = Vec::new();
        for p in &prereqs {
            if !want.contains(&PathBuf::from(p)) {
                want.push(PathBuf::from(p));
            }
        }
        let got = parse_depfile(&text).expect("compiler-shaped depfile parses");
        prop_assert_eq!(got, want, "text: {:?}", text);
    }

    #[test]
    fn depfile_parser_never_panics(text in "[a-z:\\\\ $#\n\r\t.]{0,200}") {
        let _ = parse_depfile(&text);
    }

    #[test]
    fn diagnostics_round_trip_in_both_formats(
        file in "[a-zA-Z0-9_./-][a-zA-Z0-9_./() :-]{0,30}[a-zA-Z0-9_]",
        line in 1u32..100_000,
        column in proptest::option::of(1u32..1000),
        severity in prop::sample::select(vec![Severity::Error, Severity::Warning, Severity::Note, Severity::Fatal]),
        message in "[ -~]{0,60}",
        nvcc_style in any::<bool>(),
        code in proptest::option::of(1u32..3000),
    ) {
        prop_assume!(!file.contains(": "));
        // `a:12` followed by `:5` is genuinely ambiguous with file `a`, line 12, column 5.
        let numeric_tail = file
            .rsplit_once(':')
            .is_some_and(|(_, tail)| !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()));
        prop_assume!(nvcc_style || !numeric_tail);
        let word = match severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
            _ => if nvcc_style { "catastrophic error" } else { "fatal error" },
        };
        let (text, want_column) = if nvcc_style {
            let code = code.map(|c| format!(" #{c}-D")).unwrap_or_default();
            (format!("{file}({line}): {word}{code}: {message}\n  context line: error: no\n"), None)
        } else {
            let col = column.map(|c| format!(":{c}")).unwrap_or_default();
            (format!("{file}:{line}{col}: {word}: {message}\n    1 | x: error: no\n"), column)
        };
        let want = vec![Diagnostic {
            file: Some(PathBuf::from(&file)),
            line: Some(line),
            column: want_column,
            severity,
            message: message.clone(),
        }];
        prop_assert_eq!(parse_diagnostics(&text), want, "text: {:?}", text);
    }

    #[test]
    fn diagnostics_parser_never_panics(text in "[ -~\n(]{0,300}") {
        let _ = parse_diagnostics(&text);
    }
}

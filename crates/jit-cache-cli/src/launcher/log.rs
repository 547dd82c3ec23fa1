//! The launcher log (`launcher.log` under the cache root): one line per command the launcher
//! handed to the real nvcc, which `jit-cache stats` counts. The line's kind is typed here, once,
//! for the writer and the reader alike.

use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// The file under the cache root where uncacheable commands and fallbacks are counted (one
/// line each, appended).
pub(crate) const LOG_FILE: &str = "launcher.log";

/// What a line counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Counted {
    /// Not one cacheable compile (`uncacheable: <reason>`).
    Uncacheable,
    /// The cache could not answer exactly (`fallback: <reason>`).
    Fallback,
}

impl Counted {
    const ALL: [Counted; 2] = [Counted::Uncacheable, Counted::Fallback];

    /// The line's first word.
    const fn word(self) -> &'static str {
        match self {
            Counted::Uncacheable => "uncacheable",
            Counted::Fallback => "fallback",
        }
    }
}

/// One line of the log: what it counts and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LogLine {
    pub(crate) counted: Counted,
    pub(crate) why: String,
}

impl LogLine {
    pub(crate) fn new(counted: Counted, why: impl Into<String>) -> LogLine {
        LogLine {
            counted,
            why: why.into(),
        }
    }

    /// A line as [`std::fmt::Display`] writes it; `None` for anything else (a torn or foreign
    /// line is not counted).
    fn parse(line: &str) -> Option<LogLine> {
        let (word, why) = line.split_once(": ")?;
        let counted = Counted::ALL.into_iter().find(|c| c.word() == word)?;
        Some(LogLine::new(counted, why))
    }
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.counted.word(), self.why)
    }
}

/// Appends one line to the log under `root`. Best effort: counting never fails a build.
pub(crate) fn append(root: &Path, line: &LogLine) {
    // The root as the cache creates it (0700), when no cacheable command has opened it yet.
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root);
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join(LOG_FILE))
    {
        // One write of one line: O_APPEND keeps concurrent launchers' lines whole.
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// The counts in the log under `root`, by line, most frequent first.
pub(crate) fn counts(root: &Path) -> Vec<(LogLine, usize)> {
    let text = std::fs::read_to_string(root.join(LOG_FILE)).unwrap_or_default();
    let mut counts: std::collections::BTreeMap<LogLine, usize> = Default::default();
    for line in text.lines().filter_map(LogLine::parse) {
        *counts.entry(line).or_default() += 1;
    }
    let mut out: Vec<(LogLine, usize)> = counts.into_iter().collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_written_and_a_foreign_one_is_not_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("cache");
        append(&root, &LogLine::new(Counted::Uncacheable, "--dryrun"));
        append(
            &root,
            &LogLine::new(Counted::Fallback, "compiled uncached: x: y"),
        );
        append(&root, &LogLine::new(Counted::Uncacheable, "--dryrun"));
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join(LOG_FILE))
            .expect("open the log");
        file.write_all(b"torn\nhits: 3\n")
            .expect("append foreign lines");
        let counted: Vec<(String, usize)> = counts(&root)
            .into_iter()
            .map(|(line, n)| (line.to_string(), n))
            .collect();
        assert_eq!(
            counted,
            [
                ("uncacheable: --dryrun".to_string(), 2),
                ("fallback: compiled uncached: x: y".to_string(), 1),
            ]
        );
    }
}

//! The dependency file nvcc writes for a command, from a compiler record, spelled as nvcc spells
//! it in this directory.
//!
//! nvcc 13.5 writes (checked against it by the launcher tests):
//! ```text
//! <target> : <source as given> \
//!     <prerequisite> \
//!     <last prerequisite>
//! ```
//! with `-MP` adding, after one blank line, `<prerequisite>:` for each, separated by blank lines.
//! Names are written as they are (nvcc escapes nothing). The target is the last `-MT`, else the
//! `-o` path as given, else `<source stem>.o` (also for `-cubin` and `-ptx`). The file is the
//! `-MF` path, else the `-o` path with its extension replaced by `.d`, else `<source stem>.d`.
//!
//! The names are the compile's own: the cache compiled the source with this command's spellings
//! (and a relative name is relative to this command's working directory, as it was to the
//! compile's), so they are written as the compiler printed them.

use jit_cache::CompilerRecord;
use std::path::{Path, PathBuf};

/// The bytes of nvcc's dependency file.
pub(crate) fn render(target: &str, source: &str, prerequisites: &[String], phony: bool) -> Vec<u8> {
    let mut text = format!("{target} : {source}");
    for p in prerequisites {
        text.push_str(" \\\n    ");
        text.push_str(p);
    }
    text.push('\n');
    if phony && !prerequisites.is_empty() {
        text.push('\n');
        let rules: Vec<String> = prerequisites.iter().map(|p| format!("{p}:")).collect();
        text.push_str(&rules.join("\n\n"));
        text.push('\n');
    }
    text.into_bytes()
}

/// The prerequisites of `record` nvcc writes: every one with `-MD`, those that are not system
/// headers with `-MMD`. None when a name is not UTF-8.
pub(crate) fn prerequisites(record: &CompilerRecord, system_headers: bool) -> Option<Vec<String>> {
    record
        .prerequisites
        .iter()
        .filter(|p| system_headers || !p.system)
        .map(|p| p.path.to_str().map(str::to_string))
        .collect()
}

/// The default file name nvcc derives from the source: its stem with `ext`, in the working
/// directory.
pub(crate) fn beside_stem(source: &str, ext: &str) -> PathBuf {
    let stem = Path::new(source)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    PathBuf::from(format!("{stem}.{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_matches_nvccs_layout() {
        let text = render(
            "out/a.o",
            "src/a.cu",
            &["inc/a.h".into(), "/usr/x.h".into()],
            false,
        );
        assert_eq!(
            String::from_utf8_lossy(&text),
            "out/a.o : src/a.cu \\\n    inc/a.h \\\n    /usr/x.h\n"
        );
        let text = render("a b.o", "s.cu", &["h1.h".into(), "h2.h".into()], true);
        assert_eq!(
            String::from_utf8_lossy(&text),
            "a b.o : s.cu \\\n    h1.h \\\n    h2.h\n\nh1.h:\n\nh2.h:\n",
            "-MP: a blank line, then one phony rule per header separated by blank lines"
        );
    }
}

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
//! A header's spelling is its search directory as the command spelled it, `/`, and its name as
//! the compiler spelled it: what GCC's preprocessor prints. A header found under a directory
//! this command did not name cannot be spelled here; the launcher then leaves the command to
//! nvcc.

use jit_cache::{CompilerRecord, Prerequisite};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The command's directories: each as the request resolved it (absolute) and as spelled.
#[derive(Debug, Default, Clone)]
pub(crate) struct Spellings {
    /// (absolute, as spelled), in the order given: the first spelling of a directory wins, as
    /// GCC drops a repeated directory.
    dirs: Vec<(OsString, String)>,
}

impl Spellings {
    /// Adds a directory spelled `spelled` in a command run in `working_dir`, resolved as the
    /// library resolves it (`working_dir.join(spelled)`, never normalised).
    pub(crate) fn add(&mut self, working_dir: &Path, spelled: &str) {
        let absolute = if spelled.is_empty() {
            working_dir.to_path_buf()
        } else {
            working_dir.join(spelled)
        };
        let absolute = absolute.into_os_string();
        if !self.dirs.iter().any(|(a, _)| *a == absolute) {
            self.dirs.push((absolute, spelled.to_string()));
        }
    }

    /// The name of `p` as this command's preprocessor would print it; None when its directory
    /// is not one of this command's.
    pub(crate) fn spell(&self, p: &Prerequisite) -> Option<String> {
        let Some(dir) = &p.dir else {
            return p.rel.to_str().map(str::to_string);
        };
        let rel = p.rel.to_str()?;
        if rel.is_empty() {
            // A forced include given by absolute path: its own name.
            return dir.to_str().map(str::to_string);
        }
        let (_, spelled) = self
            .dirs
            .iter()
            .find(|(absolute, _)| absolute.as_bytes() == dir.as_os_str().as_bytes())?;
        Some(join(spelled, rel))
    }

    /// Re-spells the record's diagnostics: each directory's absolute name as this command
    /// spelled it (longest first, so a directory inside another is replaced whole).
    pub(crate) fn respell_text(&self, text: &str) -> String {
        let mut pairs: Vec<(String, String)> = self
            .dirs
            .iter()
            .filter_map(|(absolute, spelled)| {
                let absolute = absolute.to_str()?;
                let to = if spelled.is_empty() {
                    String::new()
                } else {
                    format!("{}/", spelled.trim_end_matches('/'))
                };
                Some((format!("{}/", absolute.trim_end_matches('/')), to))
            })
            .collect();
        pairs.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        'outer: while !rest.is_empty() {
            for (from, to) in &pairs {
                if let Some(after) = rest.strip_prefix(from.as_str()) {
                    out.push_str(to);
                    rest = after;
                    continue 'outer;
                }
            }
            let mut chars = rest.chars();
            if let Some(c) = chars.next() {
                out.push(c);
            }
            rest = chars.as_str();
        }
        out
    }
}

/// `dir/rel` as GCC joins a search directory and a name (a trailing `/` of the directory is
/// not doubled).
fn join(dir: &str, rel: &str) -> String {
    if dir.is_empty() {
        return rel.to_string();
    }
    let trimmed = dir.trim_end_matches('/');
    if trimmed.is_empty() {
        return format!("/{rel}");
    }
    format!("{trimmed}/{rel}")
}

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

/// The prerequisites of `record` for this command, spelled; None when one cannot be spelled.
pub(crate) fn prerequisites(
    record: &CompilerRecord,
    spellings: &Spellings,
    system_headers: bool,
) -> Option<Vec<String>> {
    record
        .prerequisites
        .iter()
        .filter(|p| system_headers || !p.system)
        .map(|p| spellings.spell(p))
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

    #[test]
    fn headers_are_spelled_through_the_directory_the_command_named() {
        let wd = Path::new("/w/build");
        let mut s = Spellings::default();
        s.add(wd, "../src");
        s.add(wd, "../inc/");
        s.add(wd, "/abs/inc");
        let p = |dir: &str, rel: &str| Prerequisite {
            dir: Some(PathBuf::from(dir)),
            rel: PathBuf::from(rel),
            system: false,
        };
        assert_eq!(
            s.spell(&p("/w/build/../src", "local.h")).as_deref(),
            Some("../src/local.h")
        );
        assert_eq!(
            s.spell(&p("/w/build/../inc/", "sub/x.h")).as_deref(),
            Some("../inc/sub/x.h")
        );
        assert_eq!(
            s.spell(&p("/abs/inc", "y.h")).as_deref(),
            Some("/abs/inc/y.h")
        );
        assert_eq!(
            s.spell(&p("/elsewhere", "z.h")),
            None,
            "an unknown directory is not guessed"
        );
        assert_eq!(
            s.respell_text("/w/build/../src/a.cu(3): warning"),
            "../src/a.cu(3): warning"
        );
    }
}

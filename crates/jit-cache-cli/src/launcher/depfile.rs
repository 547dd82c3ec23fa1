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
    /// (absolute, the prefix GCC writes before a name found there: `inc/`, nothing for the
    /// working directory), in the order given: the first spelling of a directory wins, as GCC
    /// drops a repeated directory.
    dirs: Vec<(OsString, String)>,
    /// For each of `dirs`, how the library's compile wrote a name there in its diagnostics (the
    /// absolute directory's prefix), to re-spell them.
    text_prefixes: Vec<String>,
    /// How many of `dirs` come first and are not search directories (the source's directory,
    /// the working directory): GCC drops a repeated search directory, never these.
    fixed: usize,
}

impl Spellings {
    /// Adds the source's directory and the working directory, first: `source` as given, and
    /// `compiled` as the library was given it (see `tidy_source`), whose directory the library
    /// resolves as `working_dir.join(compiled).parent()`.
    pub(crate) fn add_source(&mut self, working_dir: &Path, source: &str, compiled: &str) {
        let absolute = working_dir.join(compiled);
        let absolute = absolute.parent().unwrap_or(working_dir);
        // GCC names a file beside the source by the source's name up to its last `/`, as
        // written (`src//a.cu` gives `src//x.h`).
        let prefix = source.rfind('/').map_or("", |i| &source[..=i]);
        self.dirs
            .push((absolute.as_os_str().to_owned(), prefix.to_string()));
        let whole = working_dir.join(compiled).to_string_lossy().into_owned();
        let text = whole.rfind('/').map_or("", |i| &whole[..=i]).to_string();
        self.text_prefixes.push(text);
        if absolute != working_dir || !prefix.is_empty() {
            self.dirs
                .push((working_dir.as_os_str().to_owned(), String::new()));
            self.text_prefixes
                .push(prefix_of(&working_dir.to_string_lossy()));
        }
        self.fixed = self.dirs.len();
    }

    /// Adds a search directory spelled `spelled` in a command run in `working_dir`, resolved as
    /// the library resolves it (`working_dir.join(spelled)`, never normalised).
    pub(crate) fn add(&mut self, working_dir: &Path, spelled: &str) {
        let absolute = if spelled.is_empty() {
            working_dir.to_path_buf()
        } else {
            working_dir.join(spelled)
        };
        let absolute = absolute.into_os_string();
        if !self.dirs.iter().any(|(a, _)| *a == absolute) {
            self.text_prefixes
                .push(prefix_of(&absolute.to_string_lossy()));
            self.dirs.push((absolute, prefix_of(spelled)));
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
        let index = self
            .dirs
            .iter()
            .position(|(absolute, _)| absolute.as_bytes() == dir.as_os_str().as_bytes())?;
        let mut spelled = &self.dirs[index].1;
        if index >= self.fixed {
            // GCC keeps the first of two search directories that are one directory
            // (`-Iinc -I./inc`); the library names the longest spelling that matches.
            let same = |a: &OsString| {
                let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(dir)) else {
                    return false;
                };
                use std::os::unix::fs::MetadataExt;
                (x.dev(), x.ino()) == (y.dev(), y.ino())
            };
            if let Some((_, first)) = self.dirs[self.fixed..index].iter().find(|(a, _)| same(a)) {
                spelled = first;
            }
        }
        Some(format!("{spelled}{rel}"))
    }

    /// Re-spells the record's diagnostics: each directory's absolute name as this command
    /// spelled it (longest first, so a directory inside another is replaced whole).
    pub(crate) fn respell_text(&self, text: &str) -> String {
        let mut pairs: Vec<(String, String)> = self
            .text_prefixes
            .iter()
            .zip(&self.dirs)
            .filter(|(from, _)| !from.is_empty())
            .map(|(from, (_, prefix))| (from.clone(), prefix.clone()))
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

/// What GCC writes before a name found in the search directory spelled `dir`: the directory and
/// a `/` unless it already ends in one (`inc` and `inc/` give `inc/`, `inc//` gives `inc//`).
fn prefix_of(dir: &str) -> String {
    if dir.is_empty() || dir.ends_with('/') {
        dir.to_string()
    } else {
        format!("{dir}/")
    }
}

/// The source path for the library: `.` components and repeated `/` dropped (`..` kept), so the
/// names the compile records under the source's directory carry no `./` that another spelling of
/// the same command would not have.
pub(crate) fn tidy_source(source: &str) -> String {
    let mut out = String::new();
    if source.starts_with('/') {
        out.push('/');
    }
    let parts: Vec<&str> = source
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    out.push_str(&parts.join("/"));
    out
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
    fn sources_lose_dot_components_and_doubled_slashes_only() {
        assert_eq!(tidy_source("./src//a.cu"), "src/a.cu");
        assert_eq!(tidy_source("/w/./x/../a.cu"), "/w/x/../a.cu");
        assert_eq!(tidy_source("a.cu"), "a.cu");
    }

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

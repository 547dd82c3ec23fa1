//! Python wheel identity from `*.dist-info/RECORD`, or from the source tree of an editable install.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Framed};
use crate::error::{Error, ErrorKind};
use crate::tree::{hash_tree, TreeOptions};

/// The identity of an installed Python distribution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WheelIdentity {
    /// The distribution name as spelled in its `.dist-info` directory.
    pub name: String,
    /// The installed version.
    pub version: String,
    /// Framed digest of the version and either the RECORD rows or the editable source tree.
    pub digest: Digest,
    /// Whether this is an editable install (its source tree was hashed).
    pub editable: bool,
}

/// One row of a RECORD file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRow {
    /// Path relative to site-packages, `/`-separated.
    pub path: String,
    /// `algorithm=urlsafe-base64` digest, or empty.
    pub hash: String,
    /// Size in bytes, or empty.
    pub size: String,
}

/// Parses RECORD text (CSV: comma separated, fields optionally in double quotes with `""` for a
/// quote, rows ending in `\n` or `\r\n`). Every row must have three fields. On failure returns
/// the 1-based line where the bad row starts and why.
pub fn parse_record(text: &str) -> Result<Vec<RecordRow>, (usize, String)> {
    let mut rows = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1usize;
    while chars.peek().is_some() {
        let start_line = line;
        let mut fields: Vec<String> = Vec::new();
        let mut field = String::new();
        let mut quoted_field = false;
        loop {
            match chars.next() {
                None => {
                    fields.push(std::mem::take(&mut field));
                    break;
                }
                Some('"') if field.is_empty() && !quoted_field => {
                    quoted_field = true;
                    loop {
                        match chars.next() {
                            None => {
                                return Err((start_line, "unterminated quoted field".to_owned()))
                            }
                            Some('"') if chars.peek() == Some(&'"') => {
                                chars.next();
                                field.push('"');
                            }
                            Some('"') => break,
                            Some(c) => {
                                if c == '\n' {
                                    line += 1;
                                }
                                field.push(c);
                            }
                        }
                    }
                    match chars.peek() {
                        None | Some(',') | Some('\n') | Some('\r') => {}
                        Some(c) => {
                            return Err((
                                start_line,
                                format!("unexpected {c:?} after a closing quote"),
                            ))
                        }
                    }
                }
                Some(',') => {
                    fields.push(std::mem::take(&mut field));
                    quoted_field = false;
                }
                Some('\r') if chars.peek() == Some(&'\n') => {}
                Some('\n') => {
                    line += 1;
                    fields.push(std::mem::take(&mut field));
                    break;
                }
                Some('"') => return Err((start_line, "quote inside an unquoted field".to_owned())),
                Some(c) => field.push(c),
            }
        }
        if fields.len() == 1 && fields[0].is_empty() && !quoted_field {
            continue; // A blank line.
        }
        let n = fields.len();
        let mut it = fields.into_iter();
        match (it.next(), it.next(), it.next(), it.next()) {
            (Some(path), Some(hash), Some(size), None) if !path.is_empty() => {
                rows.push(RecordRow { path, hash, size });
            }
            (Some(p), _, _, _) if p.is_empty() => {
                return Err((start_line, "empty path".to_owned()))
            }
            _ => {
                return Err((
                    start_line,
                    format!("expected 3 fields (path, hash, size), found {n}"),
                ))
            }
        }
    }
    Ok(rows)
}

/// PEP 503 normalisation: lowercase, runs of `-`, `_` and `.` become one `-`.
fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Whether a RECORD row is one of the files the distribution installed into site-packages:
/// not its own `.dist-info` metadata (RECORD, INSTALLER and `direct_url.json` vary between
/// installs of the same bytes), not bytecode, not outside site-packages (scripts carry the
/// interpreter's absolute path in their shebang).
fn counts(row: &RecordRow, dist_info: &str) -> bool {
    let p = row.path.as_str();
    !(p.starts_with("../")
        || p.starts_with('/')
        || p.split('/').next() == Some(dist_info)
        || p.ends_with(".pyc")
        || p.contains("/__pycache__/"))
}

/// The identity of distribution `distribution` installed in `site_packages`.
///
/// Finds `<name>-<version>.dist-info` whose name matches after PEP 503 normalisation (`-`, `_`
/// and `.` are equivalent, case-insensitive). Regular install: hashes the full rows (path, hash,
/// size) of the files it installed under site-packages, sorted by path, so a same-version
/// reinstall with different bytes changes the digest even though no path changed. Editable
/// install (`direct_url.json` says `"editable": true`, or RECORD lists only `.pth` files and
/// editable finders): hashes the source tree named by `direct_url.json`'s `file://` URL, or by the
/// `.pth` file's directory lines, with [`TreeOptions::default`].
pub fn wheel_identity(site_packages: &Path, distribution: &str) -> Result<WheelIdentity, Error> {
    let op = "find distribution";
    let want = normalise(distribution);
    let mut found = Vec::new();
    for entry in std::fs::read_dir(site_packages).map_err(|e| Error::io(op, site_packages, e))? {
        let entry = entry.map_err(|e| Error::io(op, site_packages, e))?;
        let file_name = entry.file_name();
        let Some(stem) = file_name
            .to_str()
            .and_then(|n| n.strip_suffix(".dist-info"))
        else {
            continue;
        };
        if let Some((name, version)) = stem.split_once('-') {
            if normalise(name) == want {
                found.push((name.to_owned(), version.to_owned(), entry.path()));
            }
        }
    }
    found.sort();
    let (name, version, dir) = match found.len() {
        1 => found.remove(0),
        0 => {
            return Err(Error::new(
                op,
                site_packages,
                ErrorKind::Distribution {
                    reason: format!("no *.dist-info for distribution `{distribution}`"),
                },
            ))
        }
        _ => {
            let names: Vec<String> = found.iter().map(|f| f.2.display().to_string()).collect();
            return Err(Error::new(
                op,
                site_packages,
                ErrorKind::Distribution {
                    reason: format!("several installs of `{distribution}`: {}", names.join(", ")),
                },
            ));
        }
    };
    let record_path = dir.join("RECORD");
    let text = std::fs::read_to_string(&record_path)
        .map_err(|e| Error::io("read RECORD", &record_path, e))?;
    let rows = parse_record(&text).map_err(|(line, reason)| {
        Error::new(
            "parse RECORD",
            &record_path,
            ErrorKind::BadRecordLine { line, reason },
        )
    })?;
    let dist_info_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut rows: Vec<&RecordRow> = rows.iter().filter(|r| counts(r, &dist_info_name)).collect();
    rows.sort_by(|a, b| a.path.cmp(&b.path));

    let direct_url = std::fs::read(dir.join("direct_url.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let editable_flag = direct_url
        .as_ref()
        .and_then(|v| v.pointer("/dir_info/editable"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let only_finders = rows.iter().all(|r| {
        let base = r.path.rsplit('/').next().unwrap_or("");
        r.path.ends_with(".pth") || base.starts_with("__editable__")
    });
    let editable = editable_flag || only_finders;

    let mut h = Framed::new("wheel");
    h.bytes(normalise(&name).as_bytes())
        .bytes(version.as_bytes());
    if editable {
        let roots = editable_roots(site_packages, direct_url.as_ref(), &rows);
        if roots.is_empty() {
            return Err(Error::new(
                "find editable source",
                &dir,
                ErrorKind::Distribution {
                    reason: "editable install names no source directory (no file:// URL in direct_url.json, no directory in its .pth)".to_owned(),
                },
            ));
        }
        h.u64(roots.len() as u64);
        for root in roots {
            let tree = hash_tree(&root, &TreeOptions::default(), None)?;
            h.digest(&tree.digest);
        }
    } else {
        h.u64(rows.len() as u64);
        for r in rows {
            h.bytes(r.path.as_bytes())
                .bytes(r.hash.as_bytes())
                .bytes(r.size.as_bytes());
        }
    }
    Ok(WheelIdentity {
        name,
        version,
        digest: h.finish(),
        editable,
    })
}

/// Source directories of an editable install.
fn editable_roots(
    site_packages: &Path,
    direct_url: Option<&serde_json::Value>,
    rows: &[&RecordRow],
) -> Vec<PathBuf> {
    if let Some(url) = direct_url
        .and_then(|v| v.get("url"))
        .and_then(serde_json::Value::as_str)
    {
        if let Some(p) = url.strip_prefix("file://") {
            return vec![PathBuf::from(std::ffi::OsStr::from_bytes(&percent_decode(
                p,
            )))];
        }
    }
    let mut roots = Vec::new();
    for r in rows.iter().filter(|r| r.path.ends_with(".pth")) {
        let Ok(text) = std::fs::read_to_string(site_packages.join(&r.path)) else {
            continue;
        };
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with("import ") {
                continue;
            }
            let p = site_packages.join(line);
            if p.is_dir() {
                roots.push(p);
            }
        }
    }
    roots
}

fn percent_decode(s: &str) -> Vec<u8> {
    let hex = |c: u8| char::from(c).to_digit(16);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_with_quoted_commas_and_quotes() {
        let text = "pkg/a.py,sha256=AAA,10\r\n\"pkg/with,comma.py\",sha256=BBB,20\n\"pkg/q\"\"uote.py\",,\npkg-1.0.dist-info/RECORD,,\n";
        let rows = parse_record(text).expect("valid RECORD parses");
        assert_eq!(rows.len(), 4, "four rows");
        assert_eq!(
            rows[1].path, "pkg/with,comma.py",
            "a quoted comma stays in the path"
        );
        assert_eq!(rows[1].size, "20", "fields after a quoted one are intact");
        assert_eq!(
            rows[2].path, "pkg/q\"uote.py",
            "a doubled quote is one quote"
        );
        assert_eq!(rows[2].hash, "", "empty hash is allowed");
    }

    #[test]
    fn bad_records_name_the_line() {
        assert_eq!(
            parse_record("a,b,c\nx,y\n").map_err(|e| e.0),
            Err(2),
            "a two-field row is reported at its line"
        );
        assert_eq!(
            parse_record("a,b,c\n\"open,b,c\n").map_err(|e| e.0),
            Err(2),
            "an unterminated quote is reported at the line where it starts"
        );
    }

    #[test]
    fn names_normalise() {
        assert_eq!(
            normalise("Flashinfer_Python"),
            "flashinfer-python",
            "case and _ fold"
        );
        assert_eq!(
            normalise("nvidia-cuda-nvcc"),
            normalise("nvidia_cuda.nvcc"),
            "- _ . are equivalent"
        );
        assert_eq!(
            percent_decode("/a%20b/c%2"),
            b"/a b/c%2".to_vec(),
            "percent escapes decode, a stray % stays"
        );
    }
}

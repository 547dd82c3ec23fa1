//! The compact text forms of [`HeaderRecord`] and [`AbsenceGroup`] in `meta.json` and the slot
//! and failure records:
//!
//! ```text
//! header:  <base> <digest-hex> <stamp|-> <rel>
//! absence: <base> <stamp|-> <dir|.> <name>... (a name written `%/<name>`: a directory found;
//!          `%><name>%><target>`: a symlink found, with its target)
//! base:    s (source dir) | w (working dir) | q<N> | i<N> | y<N> | x<N> (-iquote, -I,
//!          -isystem, -idirafter N)
//!          | f<N> (forced include N, by absolute path; rel empty, written `.`)
//!          | a (absolute) | t (toolkit) | o (installed; absolute)
//! stamp:   <dev>.<ino>.<size>.<mtime-ns>.<ctime-ns>
//! ```
//!
//! Paths are bytes: in `rel`, `dir` and names, `%`, space, control bytes and bytes that are not
//! UTF-8 are written `%XX`, so a header named `h\xff.cuh` survives the round trip. One string per
//! record parses several times faster than an object of fields, and a hit parses about 200.

use crate::build::headers::{AbsenceGroup, HeaderRecord, StatStamp};
use crate::build::search::Base;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::ffi::OsStr;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn base_text(base: Base, out: &mut String) {
    let _ = match base {
        Base::SourceDir => write!(out, "s"),
        Base::WorkingDir => write!(out, "w"),
        Base::Quote(i) => write!(out, "q{i}"),
        Base::Include(i) => write!(out, "i{i}"),
        Base::System(i) => write!(out, "y{i}"),
        Base::After(i) => write!(out, "x{i}"),
        Base::Forced(i) => write!(out, "f{i}"),
        Base::Absolute => write!(out, "a"),
        Base::Toolkit => write!(out, "t"),
        Base::Installed => write!(out, "o"),
    };
}

fn parse_base(text: &str) -> Option<Base> {
    // By bytes: a hit parses a base per header it revalidates.
    match text.as_bytes() {
        b"s" => Some(Base::SourceDir),
        b"w" => Some(Base::WorkingDir),
        b"a" => Some(Base::Absolute),
        b"t" => Some(Base::Toolkit),
        b"o" => Some(Base::Installed),
        [kind, digits @ ..] => {
            let n = u32::try_from(parse_decimal(digits)?).ok()?;
            match kind {
                b'q' => Some(Base::Quote(n)),
                b'i' => Some(Base::Include(n)),
                b'y' => Some(Base::System(n)),
                b'x' => Some(Base::After(n)),
                b'f' => Some(Base::Forced(n)),
                _ => None,
            }
        }
        [] => None,
    }
}

/// Digits only (no sign, no `+`), at least one, within a `u64`.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    Some(value)
}

/// An optional `-`, then [`parse_decimal`]'s digits, within an `i64`.
fn parse_signed(text: &[u8]) -> Option<i64> {
    match text.split_first() {
        Some((b'-', digits)) => 0i64.checked_sub_unsigned(parse_decimal(digits)?),
        _ => i64::try_from(parse_decimal(text)?).ok(),
    }
}

fn stamp_text(stamp: Option<StatStamp>, out: &mut String) {
    match stamp {
        Some(StatStamp {
            dev,
            ino,
            size,
            mtime_ns: mtime,
            ctime_ns: ctime,
        }) => {
            let _ = write!(out, "{dev}.{ino}.{size}.{mtime}.{ctime}");
        }
        None => out.push('-'),
    }
}

fn parse_stamp(text: &str) -> Option<Option<StatStamp>> {
    if text == "-" {
        return Some(None);
    }
    let mut n = text.as_bytes().split(|&b| b == b'.');
    let stamp = StatStamp {
        dev: parse_decimal(n.next()?)?,
        ino: parse_decimal(n.next()?)?,
        size: parse_decimal(n.next()?)?,
        mtime_ns: parse_signed(n.next()?)?,
        ctime_ns: parse_signed(n.next()?)?,
    };
    n.next().is_none().then_some(Some(stamp))
}

/// Writes a path's bytes with `%`, space, control and non-UTF-8 bytes escaped as `%XX`, and a
/// path that is `.` itself as `%2E` (a lone `.` stands for the empty path).
fn escape(path: &Path, out: &mut String) {
    if path.as_os_str() == "." {
        out.push_str("%2E");
        return;
    }
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '%' || c == ' ' || c.is_control() {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "%{b:02X}");
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

fn unescape(text: &str) -> Option<PathBuf> {
    // Nearly every name has nothing escaped: a hit parses about 200 of them.
    if !text.contains('%') {
        return Some(PathBuf::from(text));
    }
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    Some(PathBuf::from(OsStr::from_bytes(&bytes)))
}

/// Formats a header record.
pub(crate) fn header_to_text(record: &HeaderRecord) -> String {
    let mut out = String::with_capacity(96 + record.rel.as_os_str().len());
    base_text(record.base, &mut out);
    let _ = write!(out, " {} ", record.digest.to_hex());
    stamp_text(record.stamp, &mut out);
    out.push(' ');
    if record.rel.as_os_str().is_empty() {
        out.push('.');
    } else {
        escape(&record.rel, &mut out);
    }
    out
}

/// Parses a header record; None when the text is not one (a corrupt or foreign file).
pub(crate) fn header_from_text(text: &str) -> Option<HeaderRecord> {
    let (base, rest) = text.split_once(' ')?;
    let (digest, rest) = rest.split_once(' ')?;
    let (stamp, rel) = rest.split_once(' ')?;
    let base = parse_base(base)?;
    let digest = digest.parse().ok()?;
    let stamp = parse_stamp(stamp)?;
    let rel = match rel {
        "" => return None,
        "." => PathBuf::new(),
        rel if rel.contains(' ') => return None,
        rel => unescape(rel)?,
    };
    Some(HeaderRecord {
        base,
        rel,
        digest,
        stamp,
    })
}

/// Formats an absence group.
pub(crate) fn absence_to_text(group: &AbsenceGroup) -> String {
    let mut out = String::with_capacity(64 + 16 * group.names.len());
    base_text(group.base, &mut out);
    out.push(' ');
    stamp_text(group.stamp, &mut out);
    out.push(' ');
    if group.dir.as_os_str().is_empty() {
        out.push('.');
    } else {
        escape(&group.dir, &mut out);
    }
    for name in &group.names {
        out.push(' ');
        escape(name, &mut out);
    }
    // `%/` never starts an escaped name (`%` is always followed by two hex digits there).
    for name in &group.dirs {
        out.push_str(" %/");
        escape(name, &mut out);
    }
    // Nor does `%>`: the separator cannot occur inside an escaped name or target.
    for (name, target) in &group.links {
        out.push_str(" %>");
        escape(name, &mut out);
        out.push_str("%>");
        escape(target, &mut out);
    }
    out
}

/// Parses an absence group; None when the text is not one.
pub(crate) fn absence_from_text(text: &str) -> Option<AbsenceGroup> {
    let mut parts = text.split(' ');
    let base = parse_base(parts.next()?)?;
    let stamp = parse_stamp(parts.next()?)?;
    let dir = match parts.next()? {
        "." => PathBuf::new(),
        dir => unescape(dir)?,
    };
    let (mut names, mut dirs, mut links) = (Vec::new(), Vec::new(), Vec::new());
    for part in parts {
        if let Some(name) = part.strip_prefix("%/") {
            dirs.push(unescape(name)?);
        } else if let Some(link) = part.strip_prefix("%>") {
            let (name, target) = link.split_once("%>")?;
            let target = unescape(target)?;
            if target.as_os_str().is_empty() {
                return None;
            }
            links.push((unescape(name)?, target));
        } else {
            names.push(unescape(part)?);
        }
    }
    let link_names = links.iter().map(|(name, _)| name);
    if (names.is_empty() && dirs.is_empty() && links.is_empty())
        || names
            .iter()
            .chain(&dirs)
            .chain(link_names)
            .any(|n| n.as_os_str().is_empty())
    {
        return None;
    }
    Some(AbsenceGroup {
        base,
        dir,
        names,
        dirs,
        links,
        stamp,
    })
}

/// Serde support for a type stored as one string.
macro_rules! as_text {
    ($ty:ty, $to:ident, $from:ident, $what:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&$to(self))
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl de::Visitor<'_> for Visitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_str<E: de::Error>(self, text: &str) -> Result<$ty, E> {
                        $from(text).ok_or_else(|| E::custom(format!("bad record `{text}`")))
                    }
                }
                deserializer.deserialize_str(Visitor)
            }
        }
    };
}

as_text!(
    HeaderRecord,
    header_to_text,
    header_from_text,
    "a header record `<base> <digest> <stamp> <rel>`"
);
as_text!(
    AbsenceGroup,
    absence_to_text,
    absence_from_text,
    "an absence record `<base> <stamp> <dir> <name>...`"
);

#[cfg(test)]
mod tests {
    use super::*;
    use fingerprint::Digest;

    #[test]
    fn records_round_trip_through_text_including_spaces_and_non_utf8_bytes() {
        let records = [
            HeaderRecord {
                base: Base::Include(3),
                rel: "dir with space/tile%.cuh".into(),
                digest: Digest::of_bytes(b"a"),
                stamp: Some(StatStamp {
                    dev: 1,
                    ino: 2,
                    size: 3,
                    mtime_ns: -4,
                    ctime_ns: 5,
                }),
            },
            HeaderRecord {
                base: Base::SourceDir,
                rel: PathBuf::from(OsStr::from_bytes(b"../h\xff.cuh")),
                digest: Digest::of_bytes(b"b"),
                stamp: None,
            },
            HeaderRecord {
                base: Base::Installed,
                rel: "/usr/include/x.h".into(),
                digest: Digest::of_bytes(b"c"),
                stamp: None,
            },
        ];
        for record in records {
            let text = header_to_text(&record);
            assert_eq!(header_from_text(&text).as_ref(), Some(&record), "{text}");
        }
        let group = AbsenceGroup {
            base: Base::Quote(0),
            dir: PathBuf::new(),
            names: vec!["a b.h".into(), PathBuf::from(OsStr::from_bytes(b"c\x01.h"))],
            dirs: vec!["feature dir".into(), "%2F".into()],
            links: vec![
                ("gcc".into(), "gcc-12".into()),
                ("a %> b".into(), "/opt/x%>y z".into()),
            ],
            stamp: Some(StatStamp {
                dev: 1,
                ino: 2,
                size: 3,
                mtime_ns: 4,
                ctime_ns: 5,
            }),
        };
        let text = absence_to_text(&group);
        assert_eq!(absence_from_text(&text), Some(group), "{text}");
    }

    /// Paths compare by components (`.` and `` differ, `a/./b` is `a/b`), but an entry's variant
    /// hashes their bytes: the text must keep every byte. Seen failing with `.` written as the
    /// empty path (a traced loader's search of `./lib.so` published under a variant no host
    /// could fetch).
    #[test]
    fn paths_keep_their_bytes_through_text() {
        let bytes = |p: &Path| p.as_os_str().as_bytes().to_vec();
        for spelled in [".", "", "./x.h", "a/./b", "a/", "a//b", "%2E"] {
            let path = PathBuf::from(spelled);
            let record = HeaderRecord {
                base: Base::SourceDir,
                rel: path.clone(),
                digest: Digest::of_bytes(b"a"),
                stamp: None,
            };
            let back = header_from_text(&header_to_text(&record)).expect("parses");
            assert_eq!(bytes(&back.rel), bytes(&path), "header {spelled:?}");
            let group = AbsenceGroup {
                base: Base::SourceDir,
                dir: path.clone(),
                names: vec![if spelled.is_empty() {
                    ".".into()
                } else {
                    path.clone()
                }],
                dirs: Vec::new(),
                links: Vec::new(),
                stamp: None,
            };
            let back = absence_from_text(&absence_to_text(&group)).expect("parses");
            assert_eq!(bytes(&back.dir), bytes(&group.dir), "dir {spelled:?}");
            assert_eq!(
                bytes(&back.names[0]),
                bytes(&group.names[0]),
                "name {spelled:?}"
            );
        }
    }

    #[test]
    fn malformed_records_are_refused() {
        for bad in [
            "",
            "q 00 - x",
            "s nothex - x",
            "s 0000 1.2 x",
            &format!("s {} - ", "0".repeat(64)),
            &format!("z1 {} - x", "0".repeat(64)),
            &format!("s {} - x%G1", "0".repeat(64)),
        ] {
            assert!(header_from_text(bad).is_none(), "`{bad}` must not parse");
        }
        for bad in [
            "",
            "s - .",
            "s - . ",
            "k - . x",
            "s - . %>gcc",
            "s - . %>gcc%>",
            "s - . %>%>t",
        ] {
            assert!(absence_from_text(bad).is_none(), "`{bad}` must not parse");
        }
    }
}

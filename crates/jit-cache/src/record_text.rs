//! The compact text form of a [`HeaderRecord`] in `meta.json` and the slot and failure records:
//!
//! ```text
//! <base> <digest-hex> <stamp|-> <absent|-> <rel>
//! base:   s (source dir) | i<N> (-I directory N) | t (toolkit) | y (system, rel is absolute)
//! stamp:  <dev>.<ino>.<size>.<mtime-ns>.<ctime-ns>
//! absent: comma-separated bases
//! ```
//!
//! `rel` comes last and may contain spaces. One string per header parses several times faster than
//! an object of five fields, and a hit parses about 200 of them.

use crate::headers::{Base, HeaderRecord, StatStamp};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt::Write;

fn base_text(base: Base, out: &mut String) {
    match base {
        Base::SourceDir => out.push('s'),
        Base::Include(i) => {
            let _ = write!(out, "i{i}");
        }
        Base::Toolkit => out.push('t'),
        Base::System => out.push('y'),
    }
}

fn parse_base(text: &str) -> Option<Base> {
    match text {
        "s" => Some(Base::SourceDir),
        "t" => Some(Base::Toolkit),
        "y" => Some(Base::System),
        _ => text.strip_prefix('i')?.parse().ok().map(Base::Include),
    }
}

/// Formats a record.
pub(crate) fn to_text(record: &HeaderRecord) -> String {
    let mut out = String::with_capacity(96 + record.rel.len());
    base_text(record.base, &mut out);
    let _ = write!(out, " {} ", record.digest.to_hex());
    match record.stamp {
        Some(StatStamp(dev, ino, size, mtime, ctime)) => {
            let _ = write!(out, "{dev}.{ino}.{size}.{mtime}.{ctime}");
        }
        None => out.push('-'),
    }
    out.push(' ');
    if record.absent_in.is_empty() {
        out.push('-');
    }
    for (n, base) in record.absent_in.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        base_text(*base, &mut out);
    }
    out.push(' ');
    out.push_str(&record.rel);
    out
}

/// Parses a record; None when the text is not one (a corrupt or foreign file).
pub(crate) fn from_text(text: &str) -> Option<HeaderRecord> {
    let mut parts = text.splitn(5, ' ');
    let base = parse_base(parts.next()?)?;
    let digest = parts.next()?.parse().ok()?;
    let stamp = match parts.next()? {
        "-" => None,
        stamp => {
            let mut n = stamp.split('.');
            let s = StatStamp(
                n.next()?.parse().ok()?,
                n.next()?.parse().ok()?,
                n.next()?.parse().ok()?,
                n.next()?.parse().ok()?,
                n.next()?.parse().ok()?,
            );
            if n.next().is_some() {
                return None;
            }
            Some(s)
        }
    };
    let absent_in = match parts.next()? {
        "-" => Vec::new(),
        list => list
            .split(',')
            .map(parse_base)
            .collect::<Option<Vec<_>>>()?,
    };
    let rel = parts.next()?.to_string();
    if rel.is_empty() {
        return None;
    }
    Some(HeaderRecord {
        base,
        rel,
        digest,
        absent_in,
        stamp,
    })
}

impl Serialize for HeaderRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&to_text(self))
    }
}

impl<'de> Deserialize<'de> for HeaderRecord {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = HeaderRecord;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a header record `<base> <digest> <stamp> <absent> <rel>`")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<HeaderRecord, E> {
                from_text(text).ok_or_else(|| E::custom(format!("bad header record `{text}`")))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fingerprint::Digest;

    #[test]
    fn records_round_trip_through_text_including_spaces_in_names() {
        let records = [
            HeaderRecord {
                base: Base::Include(3),
                rel: "dir with space/tile.cuh".into(),
                digest: Digest::of_bytes(b"a"),
                absent_in: vec![Base::SourceDir, Base::Include(0)],
                stamp: Some(StatStamp(1, 2, 3, -4, 5)),
            },
            HeaderRecord {
                base: Base::System,
                rel: "/usr/include/x.h".into(),
                digest: Digest::of_bytes(b"b"),
                absent_in: vec![],
                stamp: None,
            },
        ];
        for record in records {
            assert_eq!(
                from_text(&to_text(&record)).as_ref(),
                Some(&record),
                "{}",
                to_text(&record)
            );
        }
    }

    #[test]
    fn malformed_records_are_refused() {
        for bad in [
            "",
            "q 00 - - x",
            "s nothex - - x",
            "s 0000 1.2 - x",
            &format!("s {} - - ", "0".repeat(64)),
        ] {
            assert!(from_text(bad).is_none(), "`{bad}` must not parse");
        }
    }
}

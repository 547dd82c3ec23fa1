//! The root's event log (`state/events.log`): one line per publication, typed, with the caller's
//! name escaped, so that no name (a stored entry's key is the caller's text) can add, split or
//! forge a line, and `stats` counts what was written rather than what a line happens to contain.
//!
//! A line is `<unix ms> <event> <name> <compile ms>`: four fields separated by one space each;
//! the name has every byte outside `!`..=`~`, and `%`, written `%XX`.

crate::base::words::words! {
    /// What was published.
    pub(crate) enum Event {
        /// A kernel compiled here.
        Build = "build",
        /// A kernel fetched from the fleet's tier.
        Fetch = "fetch",
        /// A kernel imported from a pack.
        Import = "import",
        /// A stored entry a producer committed.
        Store = "store",
        /// A stored entry fetched from the fleet's tier.
        StoreFetch = "store-fetch",
        /// A stored entry imported from a pack.
        StoreImport = "store-import",
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) at_ms: u64,
    pub(crate) event: Event,
    /// The kernel's name, or `<namespace>/<key>` for a stored entry, as the caller gave it.
    pub(crate) name: String,
    pub(crate) compile_ms: u64,
}

impl Record {
    /// The record as one line, without its newline.
    pub(crate) fn line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.at_ms,
            self.event,
            escape(&self.name),
            self.compile_ms
        )
    }

    /// Reads a line written by [`Record::line`]; None for anything else.
    pub(crate) fn parse(line: &str) -> Option<Record> {
        let mut fields = line.split(' ');
        let record = Record {
            at_ms: fields.next()?.parse().ok()?,
            event: fields.next()?.parse().ok()?,
            name: unescape(fields.next()?)?,
            compile_ms: fields.next()?.parse().ok()?,
        };
        fields.next().is_none().then_some(record)
    }
}

fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_graphic() => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

/// How many builds a log's text records.
pub(crate) fn builds(log: &str) -> usize {
    log.lines()
        .filter_map(Record::parse)
        .filter(|r| r.event == Event::Build)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_spaces_newlines_or_escapes_stays_one_field_of_one_line() {
        for name in [
            "gemm",
            "triton/9f3c build 1 2",
            "k\n17 build forged 0",
            "50%",
            "ünï\u{7}",
        ] {
            let record = Record {
                at_ms: 17,
                event: Event::Store,
                name: name.to_string(),
                compile_ms: 0,
            };
            let line = record.line();
            assert!(!line.contains('\n'), "{line:?} is one line");
            assert_eq!(line.split(' ').count(), 4, "{line:?} has four fields");
            assert_eq!(Record::parse(&line), Some(record), "{line:?} reads back");
        }
    }

    #[test]
    fn only_build_records_count_as_builds() {
        let forged = Record {
            at_ms: 1,
            event: Event::Store,
            name: "ns/x build y\n2 build z 3".into(),
            compile_ms: 0,
        };
        let built = Record {
            at_ms: 2,
            event: Event::Build,
            name: "gemm".into(),
            compile_ms: 40,
        };
        let log = format!("{}\n{}\n", forged.line(), built.line());
        assert_eq!(builds(&log), 1, "the forged name adds no build: {log}");
        for event in Event::ALL {
            assert_eq!(event.to_string().parse::<Event>(), Ok(*event));
        }
    }
}

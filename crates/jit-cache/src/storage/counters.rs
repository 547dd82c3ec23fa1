//! How requests were answered, counted for `stats`: hits, builds, fetches, and every reason an
//! answer was not cached.
//!
//! A hit must stay a read-only operation on its entry, and cost next to nothing: the handle counts
//! in memory (one atomic add) and adds its counts to the root when it saves its state (a
//! launcher process, once at its end; a long-lived handle, when dropped or saved). Each count is
//! a per-host file in `state/` (`count.<what>.<host>`) that grows by one byte per event, appended
//! with `O_APPEND` in one `write`: concurrent processes of a host never lose each other's counts,
//! and no host writes another's file, which keeps it exact on NFS too. A million hits are a
//! megabyte; `jit-cache clear` removes the files.

use crate::base::unproven::NotCached;
use crate::base::words::UnknownWord;
use crate::storage::layout::{Layout, Subdir};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Event {
    /// Answered from the cache (or this process's memory).
    Hit,
    /// Compiled and published.
    Built,
    /// Fetched from the remote tier, verified and published.
    Fetched,
    /// Answered, but not cached, for this reason.
    NotCached(NotCached),
}

/// The prefix of a not-cached reason's count.
const NOT_CACHED: &str = "not-cached.";

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Hit => f.write_str("hit"),
            Event::Built => f.write_str("built"),
            Event::Fetched => f.write_str("fetched"),
            Event::NotCached(why) => write!(f, "{NOT_CACHED}{why}"),
        }
    }
}

impl std::str::FromStr for Event {
    type Err = UnknownWord;
    fn from_str(word: &str) -> Result<Event, UnknownWord> {
        match word {
            "hit" => Ok(Event::Hit),
            "built" => Ok(Event::Built),
            "fetched" => Ok(Event::Fetched),
            _ => match word.strip_prefix(NOT_CACHED) {
                Some(why) => why.parse().map(Event::NotCached),
                None => Err(UnknownWord(word.to_string())),
            },
        }
    }
}

/// A handle's counts since it last saved them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    hits: AtomicU64,
    other: Mutex<BTreeMap<Event, u64>>,
}

impl Counters {
    /// Counts one event.
    pub(crate) fn count(&self, event: Event) {
        if event == Event::Hit {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *self
            .other
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(event)
            .or_default() += 1;
    }

    /// Adds the counts to the root's files and starts again from zero. Best effort: counting
    /// never fails a request (a count that cannot be written is lost).
    pub(crate) fn save(&self, layout: &Layout) {
        let mut pending: Vec<(Event, u64)> =
            vec![(Event::Hit, self.hits.swap(0, Ordering::Relaxed))];
        pending.extend(std::mem::take(
            &mut *self.other.lock().unwrap_or_else(|p| p.into_inner()),
        ));
        let host = crate::base::host::name();
        for (event, n) in pending.into_iter().filter(|(_, n)| *n > 0) {
            let name = format!("count.{event}.{host}");
            if let Ok(mut file) = layout.open_append(Subdir::State, &name) {
                let _ = file.write_all(&vec![b'.'; n as usize]);
            }
        }
    }
}

/// The root's counts, summed over hosts. A count this version cannot name (another version's
/// reason) is left out.
pub(crate) fn totals(layout: &Layout) -> BTreeMap<Event, u64> {
    let mut totals = BTreeMap::new();
    let Ok(listing) = std::fs::read_dir(layout.dir(crate::storage::layout::Subdir::State)) else {
        return totals;
    };
    for entry in listing.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("count.") else {
            continue;
        };
        // `<what>.<host>`: the host has no dot (`host::name` keeps only letters, digits, `-`, `_`).
        let Some((what, _host)) = rest.rsplit_once('.') else {
            continue;
        };
        let Ok(event) = what.parse::<Event>() else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        *totals.entry(event).or_default() += meta.len();
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_is_read_back_as_what_was_written() {
        let mut events = vec![Event::Hit, Event::Built, Event::Fetched];
        events.extend(NotCached::ALL.iter().map(|why| Event::NotCached(*why)));
        for event in events {
            let word = event.to_string();
            assert_eq!(word.parse::<Event>(), Ok(event), "{word} reads back");
        }
        assert!(
            "not-cached.from-a-newer-version".parse::<Event>().is_err(),
            "an unknown reason is not taken for another"
        );
    }
}

//! Publication notes: what another host's negative lookup cache may hide from a waiter.
//!
//! Under the shared protocol a builder, still holding its key's lock after publishing, leaves a
//! note in the key's lock file: `jit-cache published v2 <key> <variant> <unix ms>`. A waiter that
//! gets the lock next may still have a negative lookup cached for the new entry (NFS's
//! `lookupcache=all`, up to `actimeo`), but it reads the lock file's bytes afresh
//! (close-to-open) and so learns that the entry exists, and waits for it instead of compiling
//! again. Eviction, under the same lock, replaces its key's note with `evicted`, so that no
//! waiter waits for an entry that is gone.
//!
//! A lock file serves every key of its bucket (`layout.rs`), so it holds [`NOTE_SLOTS`] notes of
//! [`NOTE_LEN`] bytes each: a key's note goes in the slot that already holds that key's, else in
//! an empty one, else in place of the oldest, and a reader goes by its key's newest note. One note per file (the earlier layout, still read
//! as slot 0) lost a key's note whenever another key of its bucket was published before the
//! waiter read it, and the waiter compiled again (the multi-host crash run caught it in CI).
//! Now that takes [`NOTE_SLOTS`] other keys of one bucket published within one waiter's wait.
//!
//! Notes are written and read under the key's lock, so a note is never read while it is being
//! written where locks are shared; where they are not (`local_lock`), a torn or lost note costs
//! one more compile or one bounded wait, never an answer: the waiter serves only what its own
//! lookup opens and checks. Best effort throughout: a note that cannot be written only costs a
//! compile. Lock files are never deleted or replaced; only these bytes change.

use crate::base::grace::pin_grace;
use crate::storage::layout::{variant_dir_name, Layout};
use fingerprint::Digest;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use rustix::fs::{Mode, OFlags};

/// The length of one note, padded with spaces and ended by a newline.
const NOTE_LEN: usize = 192;

/// How many notes one lock file holds: the keys of one bucket published within one waiter's wait
/// that the notes survive.
const NOTE_SLOTS: usize = 8;

/// Notes that `key`'s entry of `variant` was published, for waiters on other hosts.
pub(crate) fn note_published(layout: &Layout, key: &Digest, variant: &Digest) {
    write_note(&layout.lock_file(key), key, Note::Published(variant));
}

/// Eviction (under the key's lock) replaces a publication note of the key it evicted, so that
/// no waiter waits for an entry that is gone. Other keys' notes stay.
pub(crate) fn note_evicted(layout: &Layout, key: &Digest) {
    write_note(&layout.lock_file(key), key, Note::Evicted);
}

/// When the key's lock file notes that `key` was published recently (within the bound below),
/// polls `lookup` until it finds the entry, for at most a little longer than NFS's longest
/// attribute cache (65 s, or the grace period if shorter). `None`: no recent note for this key,
/// the noted variant was opened and does not serve (`judged` says so: an input changed since
/// it was built, and waiting cannot change that; a variant a listing shows but a lookup cannot
/// open is still hidden by the negative lookup cache, and waited for), or it never became
/// visible (the caller compiles).
pub(crate) fn await_noted_entry<T>(
    layout: &Layout,
    key: &Digest,
    mut lookup: impl FnMut() -> Option<T>,
    mut judged: impl FnMut(&str) -> bool,
) -> Option<T> {
    let variant = recent_publication(&layout.lock_file(key), key)?;
    let deadline = std::time::Instant::now() + hidden_entry_bound();
    loop {
        if let Some(found) = lookup() {
            return Some(found);
        }
        if judged(&variant) || std::time::Instant::now() >= deadline {
            return None;
        }
        // A bounded poll for a condition: this host's cached miss expires within `actimeo`.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The entry a no-replace rename found at its target: the server says it is there, but this
/// host's negative lookup cache may hide it (published since this host's last miss by a builder
/// whose lock is invisible here, or that died before its note). Polls `open` while `hidden` says
/// its answer may be that cached miss, for at most [`hidden_entry_bound`]; then its last answer.
pub(crate) fn await_taken_target<T, E>(
    mut open: impl FnMut() -> std::result::Result<T, E>,
    hidden: impl Fn(&E) -> bool,
) -> std::result::Result<T, E> {
    let deadline = std::time::Instant::now() + hidden_entry_bound();
    loop {
        match open() {
            Err(why) if hidden(&why) && std::time::Instant::now() < deadline => {
                // A bounded poll for a condition: this host's cached miss expires within
                // `actimeo`.
                std::thread::sleep(Duration::from_millis(20));
            }
            answer => return answer,
        }
    }
}

/// How long an entry another host published may stay hidden here by a cached miss: a little
/// longer than NFS's longest attribute cache (65 s), or the grace period if shorter.
fn hidden_entry_bound() -> Duration {
    Duration::from_secs(65).min(pin_grace())
}

/// What a key's note says.
enum Note<'a> {
    /// This variant of the key was published.
    Published(&'a Digest),
    /// The key's entry was evicted.
    Evicted,
}

crate::base::words::words! {
    /// A note's word, as [`write_note`] writes it and [`read_notes`] reads it back.
    enum NoteWord {
        Published = "published",
        Evicted = "evicted",
    }
}

/// One note as read back.
#[derive(Debug, PartialEq, Eq)]
struct Noted {
    word: NoteWord,
    /// The key's hex digest.
    key: String,
    /// The variant directory's name (`-` for an eviction).
    variant: String,
    /// When it was written, in Unix milliseconds.
    ms: u64,
}

impl Noted {
    /// One slot's bytes; `None` for an empty, torn or foreign slot.
    fn parse(slot: &[u8]) -> Option<Noted> {
        let text = std::str::from_utf8(slot).ok()?;
        let mut fields = text.split_whitespace();
        if fields.next()? != "jit-cache" {
            return None;
        }
        let word = fields.next()?.parse().ok()?;
        if fields.next()? != "v2" {
            return None;
        }
        Some(Noted {
            word,
            key: fields.next()?.to_string(),
            variant: fields.next()?.to_string(),
            ms: fields.next()?.parse().ok()?,
        })
    }
}

/// The variant `key`'s note in the lock file at `path` says was published within
/// [`hidden_entry_bound`]; `None` when it notes no such publication.
fn recent_publication(path: &Path, key: &Digest) -> Option<String> {
    let file = open_lock_file(path, OFlags::RDONLY)?;
    let mut slots = read_notes(&file);
    let own = newest(&slots, &key.to_hex())?;
    let noted = slots.swap_remove(own)?;
    let age = Duration::from_millis(crate::base::host::now_ms().abs_diff(noted.ms));
    (noted.word == NoteWord::Published && age <= hidden_entry_bound()).then_some(noted.variant)
}

/// The slot of `hex`'s newest note: the one a reader goes by (a key has one slot, but a note an
/// earlier version wrote at the start of the file may stand beside it).
fn newest(slots: &[Option<Noted>], hex: &str) -> Option<usize> {
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, slot)| {
            slot.as_ref()
                .filter(|noted| noted.key == hex)
                .map(|n| (i, n.ms))
        })
        .max_by_key(|&(_, ms)| ms)
        .map(|(i, _)| i)
}

/// The lock file at `path`, opened for `access` (never through a symlink).
fn open_lock_file(path: &Path, access: OFlags) -> Option<std::fs::File> {
    rustix::fs::open(
        path,
        access | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .map(std::fs::File::from)
}

/// Every slot of the lock file, parsed (a file shorter than the table, as lock files start, has
/// fewer slots; an empty, torn or foreign slot is `None`).
fn read_notes(file: &std::fs::File) -> Vec<Option<Noted>> {
    let mut table = vec![0u8; NOTE_LEN * NOTE_SLOTS];
    let mut read = 0;
    // A short read (FUSE, a signal) reads on to the table's end or the file's.
    while read < table.len() {
        match file.read_at(&mut table[read..], read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    table[..read].chunks(NOTE_LEN).map(Noted::parse).collect()
}

/// Writes `note` for `key` into its slot of the lock file at `path`: the slot of the key's
/// newest note, else an empty slot, else the oldest. An eviction of a key with no note writes
/// nothing (there is no publication to call off, and another key's note stays).
fn write_note(path: &Path, key: &Digest, note: Note<'_>) {
    let Some(file) = open_lock_file(path, OFlags::RDWR) else {
        return;
    };
    let hex = key.to_hex();
    let slots = read_notes(&file);
    let slot = match (&note, newest(&slots, &hex)) {
        (_, Some(own)) => own,
        (Note::Evicted, None) => return,
        (Note::Published(_), None) => slots
            .iter()
            .position(Option::is_none)
            .or_else(|| (slots.len() < NOTE_SLOTS).then_some(slots.len()))
            .or_else(|| {
                slots
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, slot)| slot.as_ref().map_or(0, |noted| noted.ms))
                    .map(|(i, _)| i)
            })
            .unwrap_or(0),
    };
    let (word, variant) = match note {
        Note::Published(variant) => (NoteWord::Published, variant_dir_name(variant)),
        Note::Evicted => (NoteWord::Evicted, "-".to_string()),
    };
    let mut record = format!(
        "jit-cache {word} v2 {hex} {variant} {}",
        crate::base::host::now_ms()
    )
    .into_bytes();
    record.resize(NOTE_LEN - 1, b' ');
    record.push(b'\n');
    let _ = file.write_at(&record, (slot * NOTE_LEN) as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> Digest {
        Digest::of_bytes(&[n])
    }

    fn lock_file() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("dfs-lock-00000000.lock");
        std::fs::write(&path, b"").expect("an empty lock file, as durable-fs makes it");
        (dir, path)
    }

    fn published(path: &Path, n: u8) {
        write_note(path, &key(n), Note::Published(&key(100 + n)));
    }

    fn noted_variant(path: &Path, n: u8) -> Option<String> {
        recent_publication(path, &key(n))
    }

    #[test]
    fn a_keys_note_survives_other_keys_of_its_lock_file_up_to_the_table() {
        let (_dir, path) = lock_file();
        assert_eq!(
            noted_variant(&path, 0),
            None,
            "an empty lock file notes nothing"
        );
        // Key 0 is published, then two other keys of its bucket (the crash run's case: the
        // same builder went on to publish two stored entries that shared the lock file), before
        // a waiter on another host, whose cached miss hides key 0's entry, reads the notes.
        for n in 0..3 {
            published(&path, n);
        }
        assert_eq!(
            noted_variant(&path, 0),
            Some(variant_dir_name(&key(100))),
            "key 0's note outlives two other keys' publications"
        );
        for n in 3..NOTE_SLOTS as u8 {
            published(&path, n);
        }
        for n in 0..NOTE_SLOTS as u8 {
            assert_eq!(
                noted_variant(&path, n),
                Some(variant_dir_name(&key(100 + n))),
                "key {n}'s note is still there"
            );
        }
        // One more key takes the oldest slot, key 0's.
        published(&path, 50);
        assert_eq!(noted_variant(&path, 0), None, "the oldest note gave way");
        assert_eq!(noted_variant(&path, 50), Some(variant_dir_name(&key(150))));
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            (NOTE_LEN * NOTE_SLOTS) as u64,
            "the table never grows past its slots"
        );
    }

    #[test]
    fn a_key_published_again_keeps_one_slot_and_an_eviction_calls_off_only_its_own_note() {
        let (_dir, path) = lock_file();
        published(&path, 1);
        published(&path, 2);
        write_note(&path, &key(1), Note::Published(&key(7)));
        let notes = read_notes(&open_lock_file(&path, OFlags::RDONLY).expect("open"));
        let keyed = |n: u8| {
            notes
                .iter()
                .flatten()
                .filter(|noted| noted.key == key(n).to_hex())
                .count()
        };
        assert_eq!((keyed(1), keyed(2)), (1, 1), "one slot per key: {notes:?}");
        assert_eq!(noted_variant(&path, 1), Some(variant_dir_name(&key(7))));
        write_note(&path, &key(1), Note::Evicted);
        assert_eq!(
            noted_variant(&path, 1),
            None,
            "the evicted entry is not waited for"
        );
        assert_eq!(
            noted_variant(&path, 2),
            Some(variant_dir_name(&key(102))),
            "another key's note stays"
        );
        // An eviction of a key with no note leaves the table as it was.
        let before = std::fs::read(&path).expect("read");
        write_note(&path, &key(9), Note::Evicted);
        assert_eq!(std::fs::read(&path).expect("read"), before);
    }

    /// A note an earlier version wrote at the start of the file, beside the key's own slot: the
    /// newer of the two is the one read, and the one written over.
    #[test]
    fn of_two_notes_of_one_key_the_newer_is_read_and_written_over() {
        let (_dir, path) = lock_file();
        let record = |word: &str, variant: &str, ms: u64| {
            format!(
                "{:<191}\n",
                format!("jit-cache {word} v2 {} {variant} {ms}", key(1).to_hex())
            )
        };
        let now = crate::base::host::now_ms();
        let published = variant_dir_name(&key(101));
        // Slot 0: the earlier version's publication; slot 1: its eviction, a second later.
        let table =
            record("published", &published, now - 2000) + &record("evicted", "-", now - 1000);
        std::fs::write(&path, table).expect("write");
        assert_eq!(
            noted_variant(&path, 1),
            None,
            "the eviction is the newer note"
        );
        write_note(&path, &key(1), Note::Published(&key(102)));
        let bytes = std::fs::read(&path).expect("read");
        assert!(
            bytes[..NOTE_LEN].starts_with(b"jit-cache published")
                && bytes[NOTE_LEN..].starts_with(b"jit-cache published"),
            "the newer slot was written over, the older left: {}",
            String::from_utf8_lossy(&bytes)
        );
        assert_eq!(noted_variant(&path, 1), Some(variant_dir_name(&key(102))));
    }

    #[test]
    fn old_notes_torn_slots_and_the_earlier_single_note_are_read_as_they_should_be() {
        let (_dir, path) = lock_file();
        // A note an earlier version wrote: one record at the start of the file.
        let old = format!(
            "jit-cache published v2 {} {} {}",
            key(3).to_hex(),
            variant_dir_name(&key(103)),
            crate::base::host::now_ms()
        );
        std::fs::write(&path, format!("{old:<191}\n")).expect("write");
        assert_eq!(noted_variant(&path, 3), Some(variant_dir_name(&key(103))));
        // A publication older than any cached miss is not waited for.
        let stale = format!(
            "jit-cache published v2 {} {} {}",
            key(4).to_hex(),
            variant_dir_name(&key(104)),
            crate::base::host::now_ms() - 3_600_000
        );
        std::fs::write(&path, format!("{stale:<191}\n")).expect("write");
        assert_eq!(noted_variant(&path, 4), None);
        // Garbage in a slot is an empty slot, and is written over first.
        std::fs::write(&path, vec![b'x'; NOTE_LEN]).expect("write");
        published(&path, 5);
        assert_eq!(noted_variant(&path, 5), Some(variant_dir_name(&key(105))));
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            NOTE_LEN as u64
        );
    }
}

//! Named failpoints for the crash-test harness (feature `failpoints`, never in a normal build).
//!
//! `JIT_CACHE_FAILPOINT=<name>:<action>[,<name>:<action>...]` arms points in this process; an
//! action is `abort` (the process dies at once with SIGKILL, as `kill -9` would) or `pause` (it
//! writes its pid to stderr with the point's name and stops itself with SIGSTOP, so a harness
//! can kill it there).
//!
//! Three more switches serve `cargo xtask crash-test`:
//! - `JIT_CACHE_LOCK_LOG=<path>`: every key-lock acquire (written after the lock is granted) and
//!   release (written before it is given up), every failpoint passed, every entry moved to the
//!   trash (written before the rename), every corrupt entry a builder found, and every self-kill
//!   is appended to `<path>` with
//!   `O_APPEND`, one `write` per line: `<monotonic ns> <realtime ns> <pid> <event> <key hex|-> [detail]`.
//!   Because an acquire is logged after the grant and a release before the unlock, the logged
//!   holding intervals of a correct protocol never overlap.
//! - `JIT_CACHE_PHASE_FILE=<path>`: the name of the last point passed is written at offset 0 of
//!   `<path>` (32 bytes, space padded), so a harness that kills this process knows where it was.
//! - `JIT_CACHE_INJECT_BUG=<name>`: breaks the protocol on purpose, so the harness can show it
//!   catches the break: `in-place` (compile straight into the final entry directory),
//!   `meta-first` (publish the entry with `meta.json` before its artifact is written),
//!   `skip-lock` (build without the key lock, still logging the acquire and release),
//!   `delete-lock-file` (unlink the lock file when releasing it), and for the multi-host and
//!   remote tests `sweep-2s`, `pin-flock-only`, `loser-asserts`, `evict-one-look` and
//!   `remote-corrupt-upload` (each described at its hook in `hooks.rs`).

use crate::error::Result;
use durable_fs::{LockGuard, LockMode, Wait};
use fingerprint::Digest;
use std::cell::RefCell;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Width of the phase record in the phase file.
const PHASE_WIDTH: usize = 32;

thread_local! {
    /// The key whose lock this thread holds, for the log lines of the points it passes.
    static CURRENT_KEY: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Runs the armed action if `name` is the armed point; logs the point and records the phase.
pub(crate) fn hit(name: &str) {
    record_phase(name);
    let key = CURRENT_KEY.with(|k| k.borrow().clone());
    trace("point", if key.is_empty() { "-" } else { &key }, name);
    let Ok(armed) = std::env::var("JIT_CACHE_FAILPOINT") else {
        return;
    };
    let Some(action) = armed
        .split(',')
        .filter_map(|one| one.split_once(':'))
        .find_map(|(point, action)| (point == name).then_some(action))
    else {
        return;
    };
    match action {
        "abort" => {
            trace("abort", "-", name);
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
        "pause" => {
            eprintln!("failpoint {name} pid {}", std::process::id());
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::STOP,
            );
        }
        _ => {}
    }
}

/// Whether the injected bug `name` is switched on in this process.
pub(crate) fn bug(name: &str) -> bool {
    std::env::var("JIT_CACHE_INJECT_BUG").is_ok_and(|armed| armed == name)
}

/// Logs an entry about to be moved to the trash or marked for eviction (`event` `trash`, before
/// the mark or the rename: a kill between the line and the rename leaves the entry in place,
/// which makes a harness more lenient, never stricter), or in place again after an eviction
/// called off (`untrash`, after the mark is gone).
pub(crate) fn trashing(path: &Path, event: &str) {
    let key = path
        .parent()
        .and_then(Path::file_name)
        .and_then(|k| k.to_str())
        .unwrap_or("-");
    let key = if key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()) {
        key
    } else {
        "-"
    };
    trace(event, key, &path.display().to_string());
}

/// Logs a corrupt entry a builder found under its lock (before it moves it aside).
pub(crate) fn corrupt_found(dir: &Path, why: &str) {
    let key = CURRENT_KEY.with(|k| k.borrow().clone());
    let why = why.replace('\n', " ");
    trace(
        "corrupt",
        if key.is_empty() { "-" } else { &key },
        &format!("{}: {why}", dir.display()),
    );
}

/// With the `in-place` bug, creates the final entry directory the artifact will be compiled
/// into (the variant of a kernel that reads no headers) and returns it.
pub(crate) fn in_place_dir(dir: PathBuf, mode: u32) -> Result<Option<PathBuf>> {
    if !bug("in-place") {
        return Ok(None);
    }
    durable_fs::create_dir_all_durable(&dir, durable_fs::DirMode::from_mode(mode))?;
    Ok(Some(dir))
}

/// The key lock as the harness sees it: logged on acquire and release, and breakable by the
/// `skip-lock` and `delete-lock-file` bugs.
#[must_use = "the key lock is released when this is dropped"]
pub(crate) struct KeyLock {
    guard: Option<LockGuard>,
    path: PathBuf,
    shown: PathBuf,
    key: String,
}

impl KeyLock {
    /// Takes the key's lock (unless `skip-lock`), then logs the acquire.
    /// `shown` is the lock file's path as logged: the same in every process (the path used to
    /// lock may go through this process's descriptor of the locks directory).
    pub(crate) fn acquire(path: &Path, shown: &Path, key: &Digest, wait: Wait) -> Result<KeyLock> {
        let guard = if bug("skip-lock") {
            None
        } else {
            let guard = durable_fs::lock(path, LockMode::Exclusive, wait)?;
            Some(guard)
        };
        let key = key.to_hex();
        trace("acquire", &key, &shown.display().to_string());
        CURRENT_KEY.with(|k| k.borrow_mut().clone_from(&key));
        Ok(KeyLock {
            guard,
            path: path.to_path_buf(),
            shown: shown.to_path_buf(),
            key,
        })
    }
}

impl Drop for KeyLock {
    fn drop(&mut self) {
        trace("release", &self.key, &self.shown.display().to_string());
        CURRENT_KEY.with(|k| k.borrow_mut().clear());
        if bug("delete-lock-file") {
            let _ = std::fs::remove_file(&self.path);
        }
        drop(self.guard.take());
    }
}

fn lock_log() -> Option<&'static File> {
    static LOG: OnceLock<Option<File>> = OnceLock::new();
    LOG.get_or_init(|| {
        let path = std::env::var_os("JIT_CACHE_LOCK_LOG")?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    })
    .as_ref()
}

fn phase_file() -> Option<&'static File> {
    static PHASE: OnceLock<Option<File>> = OnceLock::new();
    PHASE
        .get_or_init(|| {
            let path = std::env::var_os("JIT_CACHE_PHASE_FILE")?;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .ok()
        })
        .as_ref()
}

fn record_phase(name: &str) {
    let Some(file) = phase_file() else { return };
    let mut record = [b' '; PHASE_WIDTH];
    let len = name.len().min(PHASE_WIDTH - 1);
    record[..len].copy_from_slice(&name.as_bytes()[..len]);
    record[PHASE_WIDTH - 1] = b'\n';
    let _ = file.write_at(&record, 0);
}

/// Nanoseconds on `clock`.
fn clock_ns(clock: libc::clockid_t) -> u128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock ids used are always supported.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128
}

/// Appends one line to the lock log, with one `write` so lines of processes never interleave.
fn trace(event: &str, key: &str, detail: &str) {
    let Some(mut file) = lock_log() else { return };
    let line = format!(
        "{} {} {} {event} {key} {detail}\n",
        clock_ns(libc::CLOCK_MONOTONIC),
        clock_ns(libc::CLOCK_REALTIME),
        std::process::id()
    );
    let _ = file.write_all(line.as_bytes());
}

//! A builder's staging directory: durable-fs's, plus, under the shared protocol, a heartbeat
//! that keeps its mtime fresh so that no other host's sweep takes it for a dead builder's
//! (`liveness.rs`). A forked child beats for its own staging directories with a thread of its
//! own (`fork.rs`).

use crate::base::fstype::Protocol;
use crate::base::grace::heartbeat_interval;
use rustix::fs::AtFlags;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};

#[derive(Default)]
struct Beats {
    next: u64,
    paths: HashMap<u64, PathBuf>,
    started: bool,
}

fn beats() -> &'static (Mutex<Beats>, Condvar) {
    static BEATS: OnceLock<(Mutex<Beats>, Condvar)> = OnceLock::new();
    BEATS.get_or_init(|| {
        #[cfg(not(loom))]
        crate::base::fork::rule(|| {
            let state = beats().0.lock().unwrap_or_else(|p| p.into_inner());
            Box::new(BeatsForFork(state))
        });
        (Mutex::new(Beats::default()), Condvar::new())
    })
}

/// The heartbeat's table held across a `fork`, so that no thread is inside it then
/// (`fork.rs`).
#[cfg(not(loom))]
struct BeatsForFork(std::sync::MutexGuard<'static, Beats>);

#[cfg(not(loom))]
impl crate::base::fork::Held for BeatsForFork {
    /// In the child: the beating thread was the parent's, and so are the directories it beat
    /// (the parent goes on beating them); the child's first staging directory starts its own.
    fn in_child(mut self: Box<Self>) {
        self.0.paths.clear();
        self.0.started = false;
    }
}

/// Keeps a staging directory's mtime fresh while it lives, so that no other host's sweep takes it
/// for a dead builder's. Dropping it stops the refresh.
#[derive(Debug)]
#[must_use = "the heartbeat stops when this is dropped"]
pub(crate) struct Heartbeat {
    id: u64,
}

impl Heartbeat {
    pub(crate) fn start(path: &Path) -> Heartbeat {
        let (lock, wake) = beats();
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        let id = state.next;
        state.next += 1;
        state.paths.insert(id, path.to_path_buf());
        if !state.started {
            // One thread per process beats for every build; if it cannot be started the build
            // goes on and a foreign sweep still waits FOREIGN_GRACE after the last change.
            state.started = std::thread::Builder::new()
                .name("jit-cache-heartbeat".into())
                .spawn(beat_forever)
                .is_ok();
        }
        wake.notify_all();
        Heartbeat { id }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        let (lock, _) = beats();
        lock.lock()
            .unwrap_or_else(|p| p.into_inner())
            .paths
            .remove(&self.id);
    }
}

fn beat_forever() {
    let (lock, wake) = beats();
    let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let paths: Vec<PathBuf> = state.paths.values().cloned().collect();
        drop(state);
        for path in &paths {
            touch_now(path);
        }
        state = lock.lock().unwrap_or_else(|p| p.into_inner());
        // A timed wait, not a sleep used as synchronisation: the beat is periodic by nature.
        state = wake
            .wait_timeout(state, heartbeat_interval())
            .map(|(s, _)| s)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Sets a path's mtime to now (the server's clock on NFS: `UTIME_NOW`). Best effort: a path
/// already committed or removed is simply gone.
fn touch_now(path: &Path) {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rustix::fs::UTIME_NOW,
    };
    let stamps = rustix::fs::Timestamps {
        last_access: now,
        last_modification: now,
    };
    let _ = rustix::fs::utimensat(rustix::fs::CWD, path, &stamps, AtFlags::SYMLINK_NOFOLLOW);
}

/// A staging directory of this process: durable-fs's, plus a heartbeat under the shared
/// protocol.
#[derive(Debug)]
pub(crate) struct Staging {
    inner: durable_fs::StagingDir,
    beat: Option<Heartbeat>,
    /// In a team root, the directory's own descriptor as a path every process of this user can
    /// follow (`/proc/<pid>/fd/N`): where this process and the compiler it runs write.
    anchored: Option<PathBuf>,
    /// The directory as messages name it (under the root, never `/proc`).
    shown: PathBuf,
}

impl Staging {
    pub(crate) fn new(inner: durable_fs::StagingDir, protocol: Protocol) -> Staging {
        let shown = inner.path().to_path_buf();
        Staging::with(inner, protocol, None, shown)
    }

    /// A staging directory in a team root, written through its own descriptor
    /// (`Layout::new_staging_dir` says why), named `shown` in messages.
    pub(crate) fn anchored(
        inner: durable_fs::StagingDir,
        protocol: Protocol,
        shown: PathBuf,
    ) -> Staging {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let anchored = PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            inner.dir_fd().as_raw_fd()
        ));
        // Only where `/proc` is this process's own (a container may show another pid
        // namespace's): else the path, as in a private root.
        let ours = rustix::fs::fstat(inner.dir_fd()).ok().is_some_and(|own| {
            std::fs::metadata(&anchored)
                .is_ok_and(|seen| (seen.dev(), seen.ino()) == (own.st_dev, own.st_ino))
        });
        Staging::with(inner, protocol, ours.then_some(anchored), shown)
    }

    fn with(
        inner: durable_fs::StagingDir,
        protocol: Protocol,
        anchored: Option<PathBuf>,
        shown: PathBuf,
    ) -> Staging {
        // Its lock descriptor is closed in a forked child by the fork rule.
        #[cfg(not(loom))]
        crate::base::fork::register();
        let beat = protocol
            .builders_beat()
            .then(|| Heartbeat::start(inner.path()));
        Staging {
            inner,
            beat,
            anchored,
            shown,
        }
    }

    /// Where to build: this process, and the compiler it runs (through its descriptor in a team
    /// root).
    pub(crate) fn path(&self) -> &Path {
        self.anchored.as_deref().unwrap_or(self.inner.path())
    }

    /// The directory as messages name it.
    pub(crate) fn shown(&self) -> &Path {
        &self.shown
    }

    /// The directory itself, opened when it was made (see [`durable_fs::StagingDir::dir_fd`]).
    pub(crate) fn dir_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inner.dir_fd()
    }

    /// The durable-fs staging directory, for a batch to commit, and its heartbeat, to keep
    /// until that commit returns.
    pub(crate) fn into_parts(mut self) -> (durable_fs::StagingDir, Option<Heartbeat>) {
        let beat = self.beat.take();
        (self.inner, beat)
    }

    /// See [`durable_fs::StagingDir::commit_noreplace`].
    pub(crate) fn commit_noreplace(
        mut self,
        target: impl AsRef<Path>,
    ) -> durable_fs::Result<durable_fs::PublishOutcome> {
        let _beat = self.beat.take();
        self.inner.commit_noreplace(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_heartbeat_refreshes_the_staging_mtime() {
        let dir = tempfile::tempdir().expect("temp dir");
        let staging = Staging::new(
            durable_fs::StagingDir::new_in(dir.path()).expect("staging"),
            Protocol::Shared,
        );
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::open(staging.path())
            .and_then(|f| f.set_modified(old))
            .expect("age the staging directory");
        // The beat thread wakes on every new heartbeat; wait (bounded) for its touch.
        let _second = Heartbeat::start(staging.path());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mtime = std::fs::metadata(staging.path())
                .expect("stat")
                .modified()
                .expect("mtime");
            if SystemTime::now()
                .duration_since(mtime)
                .unwrap_or(Duration::ZERO)
                < Duration::from_secs(60)
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no heartbeat within 10 s"
            );
            std::thread::yield_now();
        }
    }
}

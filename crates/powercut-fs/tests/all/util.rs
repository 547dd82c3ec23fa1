//! Hand-written durable writes (correct and deliberately broken) with raw std/rustix calls, and
//! the short workload the sweeps cut at every operation.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use powercut_fs::{Content, CutMode, Ledger, PowercutMount, Verdict};
use rustix::fs::{AtFlags, Mode, OFlags, CWD};

/// Which step of the agreed put sequence is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// The full sequence: temp (O_EXCL), write, fsync, rename, fsync directory.
    None,
    /// No fsync of the file before the rename.
    NoFileFsync,
    /// No fsync of the directory after the rename.
    NoDirFsync,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Writes `bytes` to `dir/name` by the sequence `flaw` allows.
pub fn put(dir: &Path, name: &str, bytes: &[u8], flaw: Flaw) -> io::Result<()> {
    let dirfd = open_dir(dir)?;
    let tmp = format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let fd = rustix::fs::openat(
        &dirfd,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    let mut file = File::from(fd);
    let written = (|| {
        file.write_all(bytes)?;
        if flaw != Flaw::NoFileFsync {
            file.sync_all()?;
        }
        Ok::<(), io::Error>(())
    })();
    drop(file);
    if let Err(e) = written {
        // On a failed write or fsync: fail, never retry, never publish; remove the temp.
        let _ = rustix::fs::unlinkat(&dirfd, tmp.as_str(), AtFlags::empty());
        return Err(e);
    }
    rustix::fs::renameat(&dirfd, tmp.as_str(), &dirfd, name)?;
    if flaw != Flaw::NoDirFsync {
        rustix::fs::fsync(&dirfd)?;
    }
    Ok(())
}

/// A put recorded in the ledger: attempted before, succeeded only if it returned Ok.
pub fn ledgered_put(
    ledger: &mut Ledger,
    dir: &Path,
    name: &str,
    bytes: &[u8],
    flaw: Flaw,
) -> io::Result<()> {
    ledger.attempt(name, Content::File(bytes.to_vec()));
    put(dir, name, bytes, flaw)?;
    ledger.succeeded(name);
    Ok(())
}

/// Bytes that differ per version and span several 512-byte sectors, so tearing shows.
pub fn payload(version: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(version) | 1)
        .collect()
}

/// The short workload the sweeps cut: replace an existing file twice, create a new one.
/// Stops at the first error, as a process would after the power went.
pub fn short_workload(ledger: &mut Ledger, root: &Path, flaw: Flaw) -> io::Result<()> {
    ledgered_put(ledger, root, "a", &payload(2, 1500), flaw)?;
    ledgered_put(ledger, root, "b", &payload(3, 700), flaw)?;
    ledgered_put(ledger, root, "a", &payload(4, 2100), flaw)?;
    Ok(())
}

/// The state the short workload starts from: `a` exists, durably, with version 1.
pub fn short_workload_baseline(ledger: &mut Ledger, root: &Path) -> io::Result<()> {
    ledgered_put(ledger, root, "a", &payload(1, 1000), Flaw::None)
}

/// Writes `name` in place with `open(O_CREAT|O_TRUNC)` and no rename, optionally fsynced.
pub fn write_in_place(dir: &Path, name: &str, bytes: &[u8], fsync: bool) -> io::Result<()> {
    let mut file = File::create(dir.join(name))?;
    file.write_all(bytes)?;
    if fsync {
        file.sync_all()?;
    }
    Ok(())
}

/// The jit-cache publish order, right or wrong: the artifact is written in place, the meta file
/// that names it is published with a correct put; `meta_first` publishes the meta before the
/// artifact's fsync (the bug), otherwise after the artifact's fsync and its directory's fsync.
pub fn publish_artifact(
    ledger: &mut Ledger,
    root: &Path,
    artifact: &[u8],
    meta_first: bool,
) -> io::Result<()> {
    ledger.guarded_by("artifact", "meta");
    ledger.attempt("artifact", Content::File(artifact.to_vec()));
    let meta = format!("artifact len {}", artifact.len()).into_bytes();
    write_in_place(root, "artifact", artifact, false)?;
    if meta_first {
        ledgered_put(ledger, root, "meta", &meta, Flaw::None)?;
        fsync_path(&root.join("artifact"))?;
        ledger.succeeded("artifact");
    } else {
        // The artifact's data and its name must both be durable before the meta names it: a
        // filesystem may persist the meta's rename without the artifact's earlier create.
        fsync_path(&root.join("artifact"))?;
        rustix::fs::fsync(open_dir(root)?)?;
        ledger.succeeded("artifact");
        ledgered_put(ledger, root, "meta", &meta, Flaw::None)?;
    }
    Ok(())
}

pub fn fsync_path(path: &Path) -> io::Result<()> {
    let fd = rustix::fs::openat(CWD, path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    Ok(rustix::fs::fsync(&fd)?)
}

/// One crash point of a sweep and what the checker found there.
#[derive(Debug)]
pub struct Outcome {
    pub k: u64,
    pub mode: CutMode,
    pub verdict: Verdict,
    /// What each checked path held after the cut (for "both states were reached" assertions).
    pub a: Option<Vec<u8>>,
}

/// Removes everything under `root` and syncs it, so each crash point starts from the same state.
pub fn wipe(root: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    rustix::fs::fsync(open_dir(root)?)?;
    Ok(())
}

/// Cuts `workload` after each of its operations in turn (every k from 1 to its length), under
/// each of `modes`, and checks the ledger after every cut. `setup` runs before each crash point
/// on a wiped filesystem and is made durable by a cut of its own.
pub fn sweep(
    mount: &mut PowercutMount,
    modes: &[CutMode],
    mut setup: impl FnMut(&mut Ledger, &Path) -> io::Result<()>,
    mut workload: impl FnMut(&mut Ledger, &Path) -> io::Result<()>,
) -> Vec<Outcome> {
    let root = mount.root().to_path_buf();
    let mut start = |mount: &mut PowercutMount| -> Ledger {
        mount.set_cut_mode(CutMode::DropUnsynced);
        wipe(&root).expect("wipe the mount between crash points");
        let mut ledger = Ledger::new();
        setup(&mut ledger, &root).expect("set up the starting state");
        mount.power_cut().expect("cut after the setup");
        let verdict = ledger.check(&root).expect("check the setup");
        assert!(verdict.is_clean(), "the setup itself survives: {verdict:?}");
        ledger
    };
    // A dry run counts the workload's operations; it must not fail without a cut.
    let mut ledger = start(mount);
    workload(&mut ledger, &root).expect("the workload succeeds without a cut");
    let length = mount.operations_since_cut();
    assert!(length > 0, "the workload reached the daemon");
    let mut outcomes = Vec::new();
    for mode in modes {
        for k in 1..=length {
            let mut ledger = start(mount);
            mount.set_cut_mode(*mode);
            mount.arm_cut_after(k);
            // The workload fails with EIO once the power is out; that failure is expected.
            let _ = workload(&mut ledger, &root);
            let report = mount.power_cut().expect("cut and remount");
            assert!(
                report.armed_cut_fired && report.after_operation == k,
                "the armed cut fired after operation {k}: {report:?}"
            );
            let verdict = ledger.check(&root).expect("check after the cut");
            let a = std::fs::read(root.join("a")).ok();
            outcomes.push(Outcome {
                k,
                mode: *mode,
                verdict,
                a,
            });
        }
    }
    outcomes
}

/// The modes every sweep runs: drop everything, and three seeds each of subsets and tearing.
pub fn all_modes() -> Vec<CutMode> {
    let mut modes = vec![CutMode::DropUnsynced];
    for seed in 1..=3 {
        modes.push(CutMode::RandomSubset { seed });
        modes.push(CutMode::TornWrites { seed });
    }
    modes
}

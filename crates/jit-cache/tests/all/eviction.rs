//! Eviction while readers hold entries (by handle and by path) and while builds run.

use crate::support::*;
use jit_cache::{GcPolicy, KernelSpec};

#[test]
fn gc_never_evicts_an_entry_a_reader_holds_and_its_path_stays_valid() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    let held = cache
        .get_or_build(&KernelSpec::from_text("held", "held.cu", kernel_text(1)))
        .expect("build held");
    let loose = cache
        .get_or_build(&KernelSpec::from_text("loose", "loose.cu", kernel_text(2)))
        .expect("build loose");
    let loose_path = loose.artifact.path().to_path_buf();
    drop(loose);
    // Evict everything: the held entry must survive, the other must go.
    let other = open_cache(dir.path());
    let report = other
        .gc(GcPolicy {
            max_bytes: Some(0),
            max_age: None,
        })
        .expect("gc");
    assert_eq!(report.evicted, 1, "{report:?}");
    assert_eq!(
        report.skipped_busy, 1,
        "the pinned entry was skipped: {report:?}"
    );
    let by_path =
        std::fs::read(held.artifact.path()).expect("the held artifact's path still works");
    assert_eq!(by_path, held.artifact.bytes(), "and names the same bytes");
    assert!(!loose_path.exists(), "the unpinned entry was evicted");
    drop(held);
    let report = other
        .gc(GcPolicy {
            max_bytes: Some(0),
            max_age: None,
        })
        .expect("gc again");
    assert_eq!(report.evicted, 1, "released, it can go: {report:?}");
    assert_eq!(other.stats().expect("stats").entries, 0);
    assert_eq!(
        other.stats().expect("stats").trash,
        0,
        "trash emptied by the sweep"
    );
}

#[test]
fn gc_skips_a_key_being_built_and_the_builder_keeps_its_entry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = open_cache(dir.path());
    let spec = KernelSpec::from_text("busy", "busy.cu", kernel_text(3));
    let first = cache.get_or_build(&spec).expect("build");
    drop(first);
    std::thread::scope(|s| {
        let gc = s.spawn(|| {
            let other = open_cache(dir.path());
            for _ in 0..20 {
                let policy = GcPolicy {
                    max_bytes: Some(0),
                    max_age: None,
                };
                other.gc(policy).expect("gc runs beside the builds");
            }
        });
        for _ in 0..20 {
            let fresh = open_cache(dir.path());
            let built = fresh
                .get_or_build(&spec)
                .expect("build or hit while gc runs");
            assert!(
                built.warning.is_none(),
                "a cached build, not a fallback: {:?}",
                built.warning
            );
            let on_disk = std::fs::read(built.artifact.path())
                .expect("the returned path is valid while held");
            assert_eq!(on_disk, built.artifact.bytes());
        }
        gc.join().expect("gc thread");
    });
}

/// Remounts a test filesystem `noatime`, so that only the cache's own refresh moves a stamp.
fn remount_noatime(mount: &std::path::Path) {
    let remounted = std::process::Command::new("mount")
        .args(["-o", "remount,noatime"])
        .arg(mount)
        .status()
        .expect("run mount");
    assert!(remounted.success(), "remount noatime");
}

/// Sets a file's last-use stamp (its access time).
fn set_last_use(path: &std::path::Path, at: std::time::SystemTime) {
    std::fs::File::open(path)
        .and_then(|f| f.set_times(std::fs::FileTimes::new().set_accessed(at)))
        .expect("set the last-use stamp");
}

/// A cache on `mount` under the protocol `sharing` chooses.
fn cache_on(mount: &std::path::Path, sharing: jit_cache::Sharing) -> jit_cache::Cache {
    jit_cache::Cache::open_with(
        mount.join("cache"),
        jit_cache::CacheOptions::default()
            .nvcc(nvcc::Nvcc::at(real_nvcc()).expect("nvcc"))
            .sharing(sharing),
    )
    .expect("open cache")
}

/// The protocol is chosen once per root handle: a handle opened with the local protocol keeps
/// the local rules for last-use stamps (refreshed hourly) even when another handle of this
/// process opened the same root with the shared protocol (refreshed every minute there). On a
/// tmpfs remounted `noatime`, so that only the cache's own refresh moves the stamp.
#[test]
fn a_local_handle_keeps_the_local_stamp_rule_beside_a_shared_handle_on_one_root() {
    use jit_cache::Sharing;
    use std::time::{Duration, SystemTime};
    fs_testbed::run_or_skip(fs_testbed::FsKind::Tmpfs, |mount| {
        remount_noatime(mount);
        let open = |sharing| cache_on(mount, sharing);
        let spec = KernelSpec::from_text("stamped", "stamped.cu", kernel_text(31));
        let local = open(Sharing::Local);
        let path = local
            .get_or_build(&spec)
            .expect("build")
            .artifact
            .path()
            .to_path_buf();
        // Last used five minutes ago: past the shared refresh, well inside the local one.
        let used = SystemTime::now() - Duration::from_secs(300);
        set_last_use(&path, used);
        let _shared = open(Sharing::Shared);
        let again = open(Sharing::Local);
        assert_eq!(
            again.get_or_build(&spec).expect("hit").outcome,
            jit_cache::Outcome::Hit
        );
        let atime = std::fs::metadata(&path)
            .expect("stat")
            .accessed()
            .expect("atime");
        assert!(
            atime <= used + Duration::from_secs(1),
            "a local handle refreshed a five-minute-old stamp, as only the shared protocol does"
        );
    });
}

/// `verify` looks at entries without using them: under the shared protocol a refreshed stamp
/// pins an entry on every host, so a verify that refreshed them (cron, every few minutes) would
/// leave `gc` nothing it may evict. On a tmpfs remounted `noatime`, as above.
#[test]
fn verify_leaves_last_use_stamps_as_they_are() {
    use jit_cache::store::Namespace;
    use jit_cache::Sharing;
    use std::time::{Duration, SystemTime};
    fs_testbed::run_or_skip(fs_testbed::FsKind::Tmpfs, |mount| {
        remount_noatime(mount);
        let cache = cache_on(mount, Sharing::Shared);
        let spec = KernelSpec::from_text("looked_at", "looked_at.cu", kernel_text(32));
        let kernel = cache
            .get_or_build(&spec)
            .expect("build")
            .artifact
            .path()
            .to_path_buf();
        let stored = cache
            .store()
            .expect("store")
            .get_or_insert_with(
                &Namespace::new("triton").expect("namespace"),
                "k",
                Duration::from_secs(10),
                |dir| std::fs::write(dir.join("a.cubin"), b"cubin"),
            )
            .expect("stored entry")
            .dir()
            .join("meta.json");
        let used = SystemTime::now() - Duration::from_secs(300);
        for stamp in [&kernel, &stored] {
            set_last_use(stamp, used);
        }
        let report = cache.verify().expect("verify");
        assert_eq!((report.checked, report.corrupt.len()), (2, 0), "{report:?}");
        for stamp in [&kernel, &stored] {
            let atime = std::fs::metadata(stamp)
                .expect("stat")
                .accessed()
                .expect("atime");
            assert!(
                atime <= used + Duration::from_secs(1),
                "verify refreshed {}",
                stamp.display()
            );
        }
    });
}

/// A stored entry's use refreshes its last-use stamp (`meta.json`'s access time) by the local
/// rule, judged by the stat taken as `meta.json` is read: an hour-old stamp is refreshed, a
/// five-minute-old one is left. On a tmpfs remounted `noatime`, as above.
#[test]
fn a_stored_entry_use_refreshes_an_hour_old_stamp_and_leaves_a_recent_one() {
    use jit_cache::store::Namespace;
    use jit_cache::Sharing;
    use std::time::{Duration, SystemTime};
    fs_testbed::run_or_skip(fs_testbed::FsKind::Tmpfs, |mount| {
        remount_noatime(mount);
        let cache = cache_on(mount, Sharing::Local);
        let store = cache.store().expect("store");
        let namespace = Namespace::new("triton").expect("namespace");
        let meta = store
            .get_or_insert_with(&namespace, "k", Duration::from_secs(10), |dir| {
                std::fs::write(dir.join("a.cubin"), b"cubin")
            })
            .expect("stored entry")
            .dir()
            .join("meta.json");
        let atime = || {
            std::fs::metadata(&meta)
                .expect("stat")
                .accessed()
                .expect("atime")
        };
        let recent = SystemTime::now() - Duration::from_secs(300);
        set_last_use(&meta, recent);
        assert!(store.get(&namespace, "k").expect("get").is_some(), "a hit");
        assert!(
            atime() <= recent + Duration::from_secs(1),
            "a five-minute-old stamp was refreshed"
        );
        let old = SystemTime::now() - Duration::from_secs(7200);
        set_last_use(&meta, old);
        let before = SystemTime::now() - Duration::from_secs(1);
        assert!(store.get(&namespace, "k").expect("get").is_some(), "a hit");
        assert!(
            atime() >= before,
            "a two-hour-old stamp was not refreshed by a use"
        );
    });
}

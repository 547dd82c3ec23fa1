//! The keyed store on its own: groups published whole, one producer per key across threads and
//! processes, abandoned and killed producers, pins against `gc`, `verify` of stored entries,
//! hostile names, team roots.

use jit_cache::store::{Claim, Lookup, Namespace, Producer, Store, StoredEntry};
use jit_cache::{Cache, Error};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

fn ns(name: &str) -> Namespace {
    Namespace::new(name).expect("namespace")
}

fn produce(claim: Claim) -> Producer {
    match claim {
        Claim::Produce(producer) => producer,
        Claim::Ready(entry) => panic!("expected to produce {}, found it published", entry.key()),
    }
}

fn ready(claim: Claim) -> StoredEntry {
    match claim {
        Claim::Ready(entry) => entry,
        Claim::Produce(producer) => panic!("expected {} published", producer.key()),
    }
}

/// Triton's group: several files, published together.
fn write_group(producer: &Producer, tag: &str) {
    for (name, bytes) in [
        ("add.ttir", format!("ttir {tag}")),
        ("add.ptx", format!("ptx {tag}")),
        ("add.cubin", format!("\x7fELF cubin {tag}")),
        ("add.json", format!("{{\"tag\": \"{tag}\"}}")),
    ] {
        producer.write(name, bytes.as_bytes()).expect("write file");
    }
}

fn staging_count(root: &Path) -> usize {
    std::fs::read_dir(root.join(jit_cache::FORMAT_DIR).join("staging"))
        .expect("list staging")
        .count()
}

#[test]
fn a_group_is_published_whole_and_read_back_checked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let triton = ns("triton");
    assert!(store.get(&triton, "k1").expect("get").is_none());
    let producer = produce(store.begin(&triton, "k1", WAIT).expect("begin"));
    write_group(&producer, "one");
    // Nothing is visible before the commit.
    assert!(store.get(&triton, "k1").expect("get").is_none());
    let entry = producer.commit().expect("commit");
    assert_eq!(
        entry.files().collect::<Vec<_>>(),
        ["add.cubin", "add.json", "add.ptx", "add.ttir"]
    );
    let again = ready(store.begin(&triton, "k1", WAIT).expect("begin again"));
    assert_eq!(again.read("add.json").expect("read"), b"{\"tag\": \"one\"}");
    let path = again.path("add.ptx").expect("path");
    assert_eq!(std::fs::read(&path).expect("read path"), b"ptx one");
    assert_eq!(
        again.size("add.cubin"),
        Some("\x7fELF cubin one".len() as u64)
    );
    assert!(again.path("missing").is_none());
    assert_eq!(staging_count(&dir.path().join("cache")), 0);
}

#[test]
fn namespaces_keep_equal_keys_apart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let a = store
        .get_or_insert_with(&ns("triton"), "same", WAIT, |dir| {
            std::fs::write(dir.join("x"), b"triton")
        })
        .expect("triton entry");
    let b = store
        .get_or_insert_with(&ns("inductor"), "same", WAIT, |dir| {
            std::fs::write(dir.join("x"), b"inductor")
        })
        .expect("inductor entry");
    assert_eq!(a.read("x").expect("read"), b"triton");
    assert_eq!(b.read("x").expect("read"), b"inductor");
    assert_ne!(a.dir(), b.dir());
}

#[test]
fn threads_asking_for_one_key_produce_it_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let produced = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (store, produced, barrier) = (store.clone(), produced.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let entry = store
                    .get_or_insert_with(&ns("triton"), "hot", WAIT, |dir| {
                        produced.fetch_add(1, Ordering::SeqCst);
                        std::fs::write(dir.join("big.cubin"), vec![7u8; 4 << 20])
                    })
                    .expect("entry");
                entry.read("big.cubin").expect("read").len()
            })
        })
        .collect();
    for handle in handles {
        assert_eq!(handle.join().expect("thread"), 4 << 20);
    }
    assert_eq!(
        produced.load(Ordering::SeqCst),
        1,
        "one producer for the key"
    );
}

#[test]
fn an_abandoned_producer_publishes_nothing_and_the_waiter_produces() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let store = Store::open(&root).expect("open store");
    let first = produce(store.begin(&ns("triton"), "k", WAIT).expect("begin"));
    write_group(&first, "abandoned");
    let waiter = {
        let store = store.clone();
        std::thread::spawn(move || {
            let producer = produce(
                store
                    .begin(&ns("triton"), "k", WAIT)
                    .expect("waiter begins"),
            );
            producer.write("only", b"second").expect("write");
            producer.commit().expect("commit")
        })
    };
    // The waiter is blocked on the key's lock until the first producer goes away.
    drop(first);
    let entry = waiter.join().expect("waiter");
    assert_eq!(entry.files().collect::<Vec<_>>(), ["only"]);
    assert_eq!(staging_count(&root), 0, "the abandoned staging is gone");
}

#[test]
fn a_producer_that_holds_the_key_too_long_is_reported_busy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let _holder = produce(store.begin(&ns("triton"), "k", WAIT).expect("begin"));
    let other = store.clone();
    let result = std::thread::spawn(move || {
        other
            .begin(&ns("triton"), "k", Duration::from_millis(100))
            .map(|_| ())
    })
    .join()
    .expect("thread");
    match result {
        Err(Error::Busy { namespace, key, .. }) => {
            assert_eq!((namespace.as_str(), key.as_str()), ("triton", "k"));
        }
        other => panic!("expected Busy, got {other:?}"),
    }
}

#[test]
fn a_failed_producer_publishes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let failed = store.get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
        std::fs::write(dir.join("half"), b"half")?;
        Err(std::io::Error::other("compiler crashed"))
    });
    match failed {
        Err(Error::Produce { source, .. }) => assert!(source.to_string().contains("crashed")),
        other => panic!("expected Produce, got {other:?}"),
    }
    assert!(store.get(&ns("triton"), "k").expect("get").is_none());
}

#[test]
fn hostile_names_are_refused_and_nothing_is_published() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    for bad in ["", "../x", "Triton", ".hidden", "a/b"] {
        assert!(
            matches!(Namespace::new(bad), Err(Error::InvalidStoreKey { .. })),
            "{bad:?}"
        );
    }
    assert!(matches!(
        store.begin(&ns("triton"), "", WAIT),
        Err(Error::InvalidStoreKey { .. })
    ));
    let producer = produce(store.begin(&ns("triton"), "k", WAIT).expect("begin"));
    for bad in ["../escape", "a/b", ".x", "meta.json", ""] {
        assert!(
            matches!(
                producer.write(bad, b"x"),
                Err(Error::InvalidStoreKey { .. })
            ),
            "{bad:?}"
        );
    }
    // A subdirectory (or a symlink) written into the staging directory is refused at commit.
    std::fs::create_dir(producer.dir().join("sub")).expect("mkdir");
    assert!(matches!(
        producer.commit(),
        Err(Error::InvalidStoreKey { .. })
    ));
    assert!(store.get(&ns("triton"), "k").expect("get").is_none());
    assert!(!dir.path().join("escape").exists());
}

#[test]
fn gc_skips_a_held_stored_entry_and_evicts_it_once_released() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = Cache::open(dir.path().join("cache")).expect("open cache");
    let store = cache.store().expect("store");
    let held = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("a.cubin"), b"cubin")
        })
        .expect("entry");
    let listed = cache.entries().expect("entries");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].name.as_str(),
            listed[0].kind.as_str(),
            listed[0].bytes
        ),
        ("triton/k", "stored", 5)
    );
    assert_eq!(cache.stats().expect("stats").entries, 1);

    let report = cache.clear().expect("clear");
    assert_eq!((report.evicted, report.skipped_busy), (0, 1));
    let path = held.path("a.cubin").expect("path");
    assert_eq!(std::fs::read(&path).expect("still readable"), b"cubin");
    drop(held);
    let report = cache.clear().expect("clear");
    assert_eq!(report.evicted, 1);
    assert!(store.get(&ns("triton"), "k").expect("get").is_none());
}

#[test]
fn a_corrupt_stored_file_is_a_miss_and_verify_moves_it_aside() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = Cache::open(dir.path().join("cache")).expect("open cache");
    let store = cache.store().expect("store");
    let entry = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("a.cubin"), b"good bytes")
        })
        .expect("entry");
    let path = entry.path("a.cubin").expect("path");
    drop(entry);
    // The same length, another content: only the digest tells.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(&path, b"evil bytes").expect("corrupt");
    assert!(store.get(&ns("triton"), "k").expect("get").is_none());
    // `lookup` tells the damage from an absence, naming the entry and the file.
    match store.lookup(&ns("triton"), "k").expect("lookup") {
        Lookup::Damaged(damage) => {
            assert_eq!(Some(damage.path()), path.parent(), "{damage}");
            assert!(damage.reason().contains("a.cubin"), "{damage}");
        }
        other => panic!("a damaged entry, not {other:?}"),
    }
    assert!(matches!(
        store.lookup(&ns("triton"), "other").expect("lookup"),
        Lookup::Absent
    ));
    let report = cache.verify().expect("verify");
    assert_eq!(report.checked, 1);
    assert_eq!(report.corrupt.len(), 1, "{report:?}");
    assert!(report.corrupt[0].1.contains("a.cubin"), "{report:?}");
    // The next producer publishes afresh.
    let again = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("a.cubin"), b"good bytes")
        })
        .expect("rebuilt");
    assert_eq!(again.read("a.cubin").expect("read"), b"good bytes");
    assert!(cache.verify().expect("verify").corrupt.is_empty());
}

#[test]
fn a_corrupt_entry_found_under_the_lock_is_replaced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let entry = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("a"), b"one")
        })
        .expect("entry");
    let meta = entry.dir().join("meta.json");
    drop(entry);
    std::fs::write(&meta, b"{ not json").expect("corrupt meta");
    let producer = produce(store.begin(&ns("triton"), "k", WAIT).expect("begin"));
    producer.write("a", b"two").expect("write");
    let entry = producer.commit().expect("commit over the corrupt entry");
    assert_eq!(entry.read("a").expect("read"), b"two");
}

#[test]
fn a_team_root_gives_every_stored_file_to_the_group() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("team");
    std::fs::create_dir(&root).expect("mkdir");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770)).expect("chmod");
    let store = Store::open_with(
        &root,
        jit_cache::store::StoreOptions::default().mode(jit_cache::RootMode::Team),
    )
    .expect("open team store");
    let entry = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("a.cubin"), b"cubin")
        })
        .expect("entry");
    for file in ["a.cubin", "meta.json"] {
        let mode = std::fs::metadata(entry.dir().join(file))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o660, "{file}");
    }
    // The files were made the group's after their digests were taken (a new ctime): no stamp
    // is recorded, and every open reads and hashes them.
    assert!(
        meta_of(&entry).get("stamps").is_none(),
        "{}",
        meta_of(&entry)
    );
}

/// An entry's `meta.json`, parsed.
fn meta_of(entry: &StoredEntry) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(entry.dir().join("meta.json")).expect("read meta"))
        .expect("meta.json is JSON")
}

/// Produces `k` with one file, `a.cubin`, and returns its path and `meta.json`'s, checking that
/// the commit recorded the file's settled stamp (the commit waits for the clock's next tick, so
/// a file written just before it is settled too).
fn produce_stamped(store: &Store) -> (std::path::PathBuf, std::path::PathBuf) {
    let entry = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("a.cubin"), b"good bytes")
        })
        .expect("entry");
    let meta = meta_of(&entry);
    assert_eq!(
        meta["stamps"][0]["name"], "a.cubin",
        "a stamp recorded: {meta}"
    );
    let paths = (
        entry.path("a.cubin").expect("path"),
        entry.dir().join("meta.json"),
    );
    drop(entry);
    paths
}

/// Writes `bytes` over `path` in place, then sets its mtime back as it was: only the ctime tells.
fn rewrite_keeping_mtime(path: &Path, bytes: &[u8]) {
    let mtime = std::fs::metadata(path)
        .expect("stat")
        .modified()
        .expect("mtime");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(path, bytes).expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_times(std::fs::FileTimes::new().set_modified(mtime))
        .expect("set mtime");
    assert_eq!(
        std::fs::metadata(path)
            .expect("stat")
            .modified()
            .expect("mtime"),
        mtime
    );
}

#[test]
fn a_stored_file_rewritten_with_its_size_and_mtime_kept_is_read_again_not_trusted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let (path, _) = produce_stamped(&store);
    assert!(
        store.get(&ns("triton"), "k").expect("get").is_some(),
        "whole"
    );
    rewrite_keeping_mtime(&path, b"evil bytes");
    assert!(
        matches!(
            store.lookup(&ns("triton"), "k").expect("lookup"),
            Lookup::Damaged(_)
        ),
        "the file's new ctime sends it to be read and hashed again"
    );
}

#[test]
fn verify_and_read_hash_a_stored_file_whose_stamp_still_matches() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let store = Store::open(&root).expect("open store");
    let (path, meta_path) = produce_stamped(&store);
    // A change the stamp cannot see (a write in the same clock tick as the stamp, which the
    // settled rule rules out at the commit), made here by recording the changed file's stamp.
    rewrite_keeping_mtime(&path, b"evil bytes");
    let st = std::fs::metadata(&path).expect("stat");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).expect("read meta")).expect("json");
    meta["stamps"][0]["ctime_ns"] = (st.ctime() * 1_000_000_000 + st.ctime_nsec()).into();
    std::fs::write(&meta_path, serde_json::to_vec(&meta).expect("json")).expect("write meta");
    let trusted = store
        .get(&ns("triton"), "k")
        .expect("get")
        .expect("an open trusts a matching stamp");
    assert!(
        trusted.read("a.cubin").is_err(),
        "reading through the entry checks the digest again"
    );
    drop(trusted);
    let report = Cache::open(&root)
        .expect("open cache")
        .verify()
        .expect("verify");
    assert_eq!(
        report.corrupt.len(),
        1,
        "verify reads and hashes every file: {report:?}"
    );
}

#[test]
fn a_root_other_hosts_share_records_no_stamps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open_with(
        dir.path().join("cache"),
        jit_cache::store::StoreOptions::default().sharing(jit_cache::Sharing::Shared),
    )
    .expect("open store");
    let entry = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("a.cubin"), b"cubin")
        })
        .expect("entry");
    assert!(
        meta_of(&entry).get("stamps").is_none(),
        "{}",
        meta_of(&entry)
    );
}

/// The role a re-executed test binary plays, and its arguments.
const CHILD_ENV: &str = "JIT_CACHE_STORE_TEST_CHILD";

/// Runs this test binary again as a child that runs only `test` with `role` in its environment.
fn child(test: &str, role: &str, root: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, role)
        .env("JIT_CACHE_STORE_TEST_ROOT", root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    cmd
}

/// In a child: its role, when this process is one.
fn child_role() -> Option<(String, std::path::PathBuf)> {
    let role = std::env::var(CHILD_ENV).ok()?;
    let root = std::env::var_os("JIT_CACHE_STORE_TEST_ROOT")?;
    Some((role, root.into()))
}

#[test]
fn a_producer_killed_mid_write_leaves_nothing_and_releases_the_key() {
    const NAME: &str = "store::a_producer_killed_mid_write_leaves_nothing_and_releases_the_key";
    if let Some((_, root)) = child_role() {
        // The child: become the producer, write half the group, say so, then wait to be killed.
        let store = Store::open(&root).expect("child opens");
        let producer = produce(store.begin(&ns("triton"), "k", WAIT).expect("child begins"));
        producer.write("add.ttir", b"half").expect("write");
        println!("holding {}", producer.dir().display());
        std::io::stdout().flush().expect("flush");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        unreachable!("killed before");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let cache = Cache::open(&root).expect("open cache");
    let store = cache.store().expect("store");
    let mut producer = child(NAME, "producer", &root).spawn().expect("spawn child");
    let mut out = BufReader::new(producer.stdout.take().expect("stdout"));
    let mut line = String::new();
    // libtest prints its own words first, on the same line.
    let staging = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).expect("read child") > 0,
            "child ended early"
        );
        if let Some((_, path)) = line.trim_end().split_once("holding ") {
            break std::path::PathBuf::from(path);
        }
    };
    assert!(staging.exists());
    // While it lives, the key is taken.
    assert!(matches!(
        store.begin(&ns("triton"), "k", Duration::from_millis(50)),
        Err(Error::Busy { .. })
    ));
    producer.kill().expect("kill -9");
    producer.wait().expect("reap");
    // The kernel released its lock with it: this process produces at once.
    let ours = produce(
        store
            .begin(&ns("triton"), "k", WAIT)
            .expect("begin after the kill"),
    );
    assert!(store.get(&ns("triton"), "k").expect("get").is_none());
    ours.write("add.ttir", b"whole").expect("write");
    let entry = ours.commit().expect("commit");
    assert_eq!(entry.files().collect::<Vec<_>>(), ["add.ttir"]);
    // The dead producer's staging is the sweep's, once old enough.
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(&staging)
        .and_then(|f| f.set_modified(old))
        .expect("age the leftover");
    cache.sweep().expect("sweep");
    assert!(!staging.exists(), "the dead producer's staging was swept");
}

#[test]
fn processes_asking_for_one_key_produce_it_once() {
    const NAME: &str = "store::processes_asking_for_one_key_produce_it_once";
    if let Some((_, root)) = child_role() {
        let store = Store::open(&root).expect("child opens");
        // Every child starts when the parent says so, on one line of its stdin.
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).expect("wait for go");
        let entry = store
            .get_or_insert_with(&ns("triton"), "hot", WAIT, |dir| {
                let mut log = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(root.with_extension("log"))?;
                writeln!(log, "{}", std::process::id())?;
                std::fs::write(dir.join("big.cubin"), vec![3u8; 8 << 20])
            })
            .expect("entry");
        let bytes = entry.read("big.cubin").expect("read");
        println!("result {}", fingerprint::Digest::of_bytes(&bytes).to_hex());
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    Store::open(&root).expect("open store");
    let mut children: Vec<_> = (0..4)
        .map(|_| child(NAME, "asker", &root).spawn().expect("spawn"))
        .collect();
    for c in &mut children {
        writeln!(c.stdin.as_mut().expect("stdin"), "go").expect("go");
    }
    let mut results = Vec::new();
    for c in children {
        let out = c.wait_with_output().expect("child");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let result = text
            .lines()
            .find_map(|l| l.split_once("result ").map(|(_, r)| r))
            .expect("a result")
            .to_string();
        results.push(result);
    }
    results.dedup();
    assert_eq!(results.len(), 1, "every process read the same bytes");
    let log = std::fs::read_to_string(root.with_extension("log")).expect("log");
    assert_eq!(log.lines().count(), 1, "one producer: {log}");
}

/// Issue 31, item 11: `begin` with a wait too long to add to the clock (Python's
/// `wait=sys.maxsize`) panicked in `Instant + Duration`; it now waits without end.
#[test]
fn a_wait_beyond_the_clock_is_a_wait_without_end_not_a_panic() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("cache")).expect("open store");
    let producer = produce(
        store
            .begin(&ns("triton"), "k", Duration::MAX)
            .expect("begin with the longest wait"),
    );
    producer.write("f", b"x").expect("write");
    producer.commit().expect("commit");
    let entry = ready(
        store
            .begin(&ns("triton"), "k", Duration::from_secs(u64::MAX))
            .expect("begin again"),
    );
    assert_eq!(entry.read("f").expect("read"), b"x");
}

/// Issue 31, item 6: a `meta.json` recording a huge size made every reader reserve that much
/// memory before reading (an abort); the allocation is now bounded by what the file holds, and
/// the entry is a miss that `verify` moves aside.
#[test]
fn a_meta_json_recording_a_huge_size_is_a_miss_not_an_abort() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let store = Store::open(&root).expect("open store");
    let entry = store
        .get_or_insert_with(&ns("triton"), "huge", WAIT, |dir| {
            std::fs::write(dir.join("f"), b"small")
        })
        .expect("produce");
    let meta_path = entry.dir().join("meta.json");
    drop(entry);
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).expect("read meta")).expect("json");
    meta["files"][0]["size"] = serde_json::Value::from(1u64 << 46);
    std::fs::write(&meta_path, serde_json::to_vec(&meta).expect("json")).expect("write meta");
    assert!(
        store.get(&ns("triton"), "huge").expect("get").is_none(),
        "a size its file does not hold is a miss"
    );
    let cache = Cache::open(&root).expect("open cache");
    let verified = cache.verify().expect("verify");
    assert_eq!(verified.corrupt.len(), 1, "verify moves it aside");
}

/// Issue 31, item 11: `Error::Busy`'s lock (Python's `BusyError.path`) was
/// `/proc/self/fd/N/...`, meaningless to anyone else; it is the lock file's path under the root.
#[test]
fn a_busy_error_names_the_lock_file_under_the_root() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let store = Store::open(&root).expect("open store");
    let _holder = produce(store.begin(&ns("triton"), "k", WAIT).expect("begin"));
    let other = store.clone();
    let result = std::thread::spawn(move || {
        other
            .begin(&ns("triton"), "k", Duration::from_millis(50))
            .map(|_| ())
    })
    .join()
    .expect("thread");
    match result {
        Err(Error::Busy { lock, .. }) => assert!(
            lock.starts_with(&root) && lock.parent().is_some_and(|d| d.ends_with("locks")),
            "the lock file's own path: {}",
            lock.display()
        ),
        other => panic!("expected Busy, got {other:?}"),
    }
}

#[test]
fn a_key_that_spells_log_lines_forges_no_build_and_stays_one_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let store = Store::open(&root).expect("open store");
    let forged = "k build 1 2\n1700000000000 build forged 0";
    store
        .get_or_insert_with(&ns("triton"), forged, WAIT, |dir| {
            std::fs::write(dir.join("x"), b"bytes")
        })
        .expect("stored entry");
    let cache = Cache::open(&root).expect("open cache");
    let stats = cache.stats().expect("stats");
    assert_eq!(
        stats.builds_recorded, 0,
        "a stored entry is no build, whatever its key spells"
    );
    let log = std::fs::read_to_string(root.join("v2/state/events.log")).expect("read the log");
    assert_eq!(log.lines().count(), 1, "one publication, one line: {log:?}");
}

/// Issue 31, item 11, a sibling of the busy error: a key lock that cannot be taken (its lock
/// file is a directory, planted or left by a broken tool) was reported as
/// `lock /proc/self/fd/N/dfs-lock-....lock: ...`; the error names the lock file under the root.
#[test]
fn a_lock_that_cannot_be_taken_names_the_lock_file_under_the_root() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("cache");
    let store = Store::open(&root).expect("open store");
    let locks = root.join(jit_cache::FORMAT_DIR).join("locks");
    for bucket in 0..256u32 {
        let lock = locks.join(format!("dfs-lock-{bucket:08x}.lock"));
        let _ = std::fs::remove_file(&lock);
        std::fs::create_dir(&lock).expect("plant a directory at the lock file");
    }
    let error = store
        .get_or_insert_with(&ns("triton"), "k", WAIT, |dir| {
            std::fs::write(dir.join("x"), b"bytes")
        })
        .expect_err("no lock can be taken");
    let text = error.to_string();
    assert!(!text.contains("/proc/self/fd"), "{text}");
    assert!(
        text.contains(&locks.display().to_string()),
        "the lock file under the root: {text}"
    );
}

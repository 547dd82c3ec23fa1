//! Remote faults are never the user's problem: each gives a local build (or a local hit), no
//! failed build, no unverified byte used, at most one warning, and one timeout per process.

use crate::support::{builds, host, kernel, remote, remote_with, Server};
use jit_cache::{Outcome, RemoteMode};
use jit_cache_redis::RedisOptions;
use rustix::process::Signal;
use std::time::{Duration, Instant};

/// Builds kernels `ns` on `cache` and checks each one compiled locally without a warning.
fn all_built_locally(cache: &jit_cache::Cache, ns: &[usize]) {
    for &n in ns {
        let answer = cache
            .get_or_build(&kernel(n))
            .expect("a remote fault never fails a build");
        assert_eq!(answer.outcome, Outcome::Built, "k{n} compiled locally");
        assert!(answer.warning.is_none(), "{:?}", answer.warning);
    }
}

#[test]
fn a_refused_connection_costs_one_attempt_per_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "redis+unix://{}",
        dir.path().join("no-server.sock").display()
    );
    let dead = remote_with(&url, RemoteMode::ReadWrite, RedisOptions::default());
    let cache = host(&dir.path().join("a"), Some(dead.clone()));
    all_built_locally(&cache, &[1, 2, 3]);
    assert_eq!(
        dead.stats().errors,
        1,
        "the first failure turns the remote off: later kernels never try it"
    );
    assert!(dead.disabled_reason().is_some(), "the reason is kept");
}

#[test]
fn a_stopped_server_costs_one_timeout_then_nothing() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // The default timeouts: connect (handshake included) 100 ms.
    let stopped = remote_with(
        &server.url(),
        RemoteMode::ReadWrite,
        RedisOptions::default(),
    );
    let cache = host(&dir.path().join("a"), Some(stopped.clone()));
    server.signal(Signal::STOP);
    let started = Instant::now();
    all_built_locally(&cache, &[1]);
    let first = started.elapsed();
    all_built_locally(&cache, &[2, 3]);
    server.signal(Signal::CONT);
    assert_eq!(stopped.stats().errors, 1, "one timeout, then skipped");
    assert!(
        first < Duration::from_secs(10),
        "the connect timeout bounds the wait on a stopped server ({first:?})"
    );
}

#[test]
fn a_server_killed_between_operations_is_a_miss_and_then_skipped() {
    let mut server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    a.get_or_build(&kernel(1)).expect("a builds and uploads");
    let b_remote = remote(&server.url(), RemoteMode::ReadWrite);
    b_remote.health().expect("b holds a live connection");
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));
    server.kill();
    all_built_locally(&b, &[1, 2]);
    assert_eq!(b_remote.stats().errors, 1, "one failure, then skipped");
    assert_eq!(b_remote.stats().hits, 0);
}

#[test]
fn a_read_only_acl_user_reads_and_never_fails_for_lack_of_write_permission() {
    let server = Server::start();
    let mut admin = server.admin().expect("admin");
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("reader")
        .arg("on")
        .arg(">secret")
        .arg("~*")
        .arg("+getrange")
        .arg("+ping")
        .query::<()>(&mut admin)
        .expect("create a read-only user");
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = host(
        &dir.path().join("w"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    let built = writer.get_or_build(&kernel(1)).expect("the writer builds");
    let reader_url = format!("{}?user=reader&pass=secret", server.url());
    let reader_remote = remote(&reader_url, RemoteMode::ReadWrite);
    let reader = host(&dir.path().join("r"), Some(reader_remote.clone()));

    let fetched = reader.get_or_build(&kernel(1)).expect("the reader fetches");
    assert_eq!(fetched.outcome, Outcome::Fetched);
    assert!(
        fetched.artifact.bytes() == built.artifact.bytes(),
        "the bytes must be equal"
    );
    all_built_locally(&reader, &[2]);
    assert!(
        server.keys("jit-cache:b:*").len() == 1,
        "the reader uploaded nothing"
    );
    // Writes stopped, reads go on: a kernel the writer builds now is still fetched.
    writer.get_or_build(&kernel(3)).expect("the writer builds");
    let later = reader.get_or_build(&kernel(3)).expect("the reader fetches");
    assert_eq!(
        later.outcome,
        Outcome::Fetched,
        "reads survive a refused write"
    );
    assert_eq!(reader_remote.stats().hits, 2);

    // Mode read-only never writes at all, not even a lease.
    let ro_remote = remote(&server.url(), RemoteMode::ReadOnly);
    let ro = host(&dir.path().join("ro"), Some(ro_remote.clone()));
    all_built_locally(&ro, &[4]);
    assert_eq!(ro_remote.stats().errors, 0, "nothing was attempted");
    assert_eq!(server.keys("jit-cache:b:*").len(), 2, "nothing uploaded");
}

#[test]
fn a_full_server_refuses_uploads_and_builds_go_on() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = host(
        &dir.path().join("w"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    writer
        .get_or_build(&kernel(1))
        .expect("uploaded before the server filled");
    let mut admin = server.admin().expect("admin");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query::<()>(&mut admin)
        .expect("maxmemory 1 byte: every write is refused with OOM");
    let full_remote = remote(&server.url(), RemoteMode::ReadWrite);
    let cache = host(&dir.path().join("a"), Some(full_remote.clone()));
    all_built_locally(&cache, &[2, 3]);
    let fetched = cache.get_or_build(&kernel(1)).expect("reads still work");
    assert_eq!(fetched.outcome, Outcome::Fetched);
    assert_eq!(
        full_remote.stats().errors,
        1,
        "one refused write, then none tried"
    );
}

#[test]
fn an_evicted_blob_under_a_surviving_manifest_is_a_miss_not_an_error() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    let built = a.get_or_build(&kernel(1)).expect("a builds");
    let blobs = server.keys("jit-cache:b:*");
    assert_eq!(blobs.len(), 1);
    server.del(&blobs[0]);
    let b_remote = remote(&server.url(), RemoteMode::ReadWrite);
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));
    all_built_locally(&b, &[1]);
    let stats = b_remote.stats();
    assert_eq!(
        (stats.errors, stats.hits, stats.misses),
        (0, 0, 1),
        "{stats:?}"
    );
    assert!(
        server.get(&blobs[0]) == built.artifact.bytes(),
        "b's upload restored the blob"
    );
}

#[test]
fn corrupt_truncated_oversized_or_mismatched_remote_values_are_never_used() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    let good = a
        .get_or_build(&kernel(1))
        .expect("a builds")
        .artifact
        .bytes()
        .to_vec();
    let blob = server.keys("jit-cache:b:*").remove(0);
    let manifest = server.keys("jit-cache:m:*").remove(0);
    let good_manifest = server.get(&manifest);

    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0xff;
    let mut longer = good.clone();
    longer.extend_from_slice(b"trailing bytes");
    let text = String::from_utf8(good_manifest.clone()).expect("the manifest is JSON");
    let size = format!("\"artifact_size\":{}", good.len());
    assert!(text.contains(&size), "{text}");
    let wrong_size = text.replace(&size, &format!("\"artifact_size\":{}", good.len() - 8));
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("a flipped byte", "blob", flipped),
        ("a truncated blob", "blob", good[..good.len() / 2].to_vec()),
        ("an oversized blob", "blob", longer),
        (
            "a manifest that is not JSON",
            "manifest",
            b"{not json".to_vec(),
        ),
        ("an oversized manifest", "manifest", vec![b' '; 5 << 20]),
        (
            "a manifest with the wrong size",
            "manifest",
            wrong_size.into_bytes(),
        ),
    ];
    for (i, (what, target, value)) in cases.into_iter().enumerate() {
        server.set(&blob, &good);
        server.set(&manifest, &good_manifest);
        server.set(if target == "blob" { &blob } else { &manifest }, &value);
        let b_remote = remote(&server.url(), RemoteMode::ReadWrite);
        let b = host(&dir.path().join(format!("b{i}")), Some(b_remote.clone()));
        let answer = b.get_or_build(&kernel(1)).expect("never a failed build");
        assert_eq!(answer.outcome, Outcome::Built, "{what}: compiled locally");
        assert!(
            answer.artifact.bytes() == good,
            "{what}: the bad bytes were not used"
        );
        let stats = b_remote.stats();
        // Rejected at the first look and again after taking the lease.
        assert!(
            stats.rejected >= 1,
            "{what}: refused as unverifiable: {stats:?}"
        );
        assert_eq!(
            (stats.errors, stats.hits),
            (0, 0),
            "{what}: a miss, no fault: {stats:?}"
        );
        assert!(
            server.get(&blob) == good,
            "{what}: b's upload left a good blob"
        );
    }
    // After a repair, the next host fetches.
    let c = host(
        &dir.path().join("c"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    assert_eq!(
        c.get_or_build(&kernel(1)).expect("c").outcome,
        Outcome::Fetched
    );
}

#[test]
fn heavy_a_lease_whose_holder_died_expires_and_a_waiter_compiles() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // Learn the key: a throwaway host builds, then the remote forgets everything.
    let probe = host(
        &dir.path().join("probe"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    probe.get_or_build(&kernel(7)).expect("probe");
    let manifest = server.keys("jit-cache:m:*").remove(0);
    let key = manifest.trim_start_matches("jit-cache:m:").to_string();
    let mut admin = server.admin().expect("admin");
    redis::cmd("FLUSHALL")
        .query::<()>(&mut admin)
        .expect("flush");
    // A holder that died mid-compile: its lease is there and never renewed or released.
    redis::cmd("SET")
        .arg(format!("jit-cache:l:{key}"))
        .arg("dead-holder")
        .arg("PX")
        .arg(1500)
        .query::<()>(&mut admin)
        .expect("plant the lease");
    let waiter_remote = remote_with(
        &server.url(),
        RemoteMode::ReadWrite,
        RedisOptions::default(),
    );
    let waiter = host(&dir.path().join("w"), Some(waiter_remote.clone()));
    let started = Instant::now();
    all_built_locally(&waiter, &[7]);
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "the waiter waited for the holder's lease ({:?})",
        started.elapsed()
    );
    assert_eq!(waiter_remote.stats().leases_waited, 1);
    assert_eq!(builds(&waiter), 1);
    assert_eq!(server.keys("jit-cache:m:*").len(), 1, "the waiter uploaded");
}

#[test]
fn an_oversized_manifest_is_replaced_by_the_next_upload() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    a.get_or_build(&kernel(1)).expect("a builds");
    let manifest = server.keys("jit-cache:m:*").remove(0);
    // Garbage past what any reader accepts (4 MiB): it can never be read, only replaced.
    server.set(&manifest, &vec![b' '; 5 << 20]);
    let b_remote = remote(&server.url(), RemoteMode::ReadWrite);
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));
    all_built_locally(&b, &[1]);
    let after = server.get(&manifest);
    assert!(
        after.len() < 1 << 20 && jit_cache::manifest_artifacts(&after).is_some(),
        "b's upload replaced the oversized manifest ({} bytes there)",
        after.len()
    );
    assert_eq!(b_remote.stats().uploads, 1, "b's upload counted");
    let c = host(
        &dir.path().join("c"),
        Some(remote(&server.url(), RemoteMode::ReadWrite)),
    );
    assert_eq!(
        c.get_or_build(&kernel(1)).expect("c").outcome,
        Outcome::Fetched,
        "the next host fetches through the replaced manifest"
    );
}

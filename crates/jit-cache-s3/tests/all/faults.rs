//! Remote faults are never the user's problem: each gives a local build (or a local hit), no
//! failed build, no unverified byte used, at most one warning, and one bounded timeout per
//! process: a killed server, a stopped one, a wrong secret, a missing bucket, a read-only
//! identity, a server that ignores conditional writes, and every kind of corrupt object.

use crate::support::{
    builds, host, kernel, remote, remote_with, wrong_secret, ConditionDroppingProxy, Server,
};
use jit_cache::{Outcome, RemoteMode};
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

/// The one fault a process had: one error, a reason kept, and builds done.
fn one_fault(remote: &jit_cache::Remote, says: &str) {
    assert_eq!(
        remote.stats().errors,
        1,
        "the first failure turns the remote off: later kernels never try it"
    );
    let reason = remote.disabled_reason().expect("the reason is kept");
    assert!(reason.contains(says), "{reason}");
}

#[test]
fn a_killed_server_costs_one_refused_connection_per_process() {
    let mut server = Server::start();
    let config = server.weed.config(server.weed.admin());
    server.weed.kill();
    let dir = tempfile::tempdir().expect("temp dir");
    let dead = remote_with(config, RemoteMode::ReadWrite);
    let cache = host(&dir.path().join("a"), Some(dead.clone()));
    let started = Instant::now();
    all_built_locally(&cache, &[1, 2, 3]);
    one_fault(&dead, "get manifest");
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_stopped_server_costs_one_connect_timeout_then_nothing() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // The default timeouts: the first request of a process must finish within 100 ms.
    let stopped = remote_with(
        server.weed.config(server.weed.admin()),
        RemoteMode::ReadWrite,
    );
    let cache = host(&dir.path().join("a"), Some(stopped.clone()));
    server.weed.signal(Signal::STOP);
    let started = Instant::now();
    all_built_locally(&cache, &[1]);
    let first = started.elapsed();
    all_built_locally(&cache, &[2, 3]);
    server.weed.signal(Signal::CONT);
    one_fault(&stopped, "no answer");
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
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    a.get_or_build(&kernel(1)).expect("a builds and uploads");
    let b_remote = remote(&server, RemoteMode::ReadWrite);
    b_remote.health().expect("b has spoken to the server");
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));
    server.weed.kill();
    all_built_locally(&b, &[1, 2]);
    assert_eq!(b_remote.stats().errors, 1, "one failure, then skipped");
    assert_eq!(b_remote.stats().hits, 0);
}

#[test]
fn a_wrong_secret_or_a_missing_bucket_is_one_error_with_its_reason_and_no_failed_build() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = host(
        &dir.path().join("w"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    writer.get_or_build(&kernel(1)).expect("uploaded");
    for (i, (config, says)) in [
        (
            server.weed.config(&wrong_secret(server.weed.admin())),
            "AWS_SECRET_ACCESS_KEY",
        ),
        (
            server
                .weed
                .config_for("s3://no-such-bucket/jit-cache", server.weed.admin()),
            "does not exist",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let broken = remote_with(config, RemoteMode::ReadWrite);
        let cache = host(&dir.path().join(format!("h{i}")), Some(broken.clone()));
        // Kernel 1 is in the store: a quiet miss would look the same as this, but counted none.
        all_built_locally(&cache, &[1, 2]);
        one_fault(&broken, says);
        assert_eq!(broken.stats().hits, 0);
    }
    assert_eq!(server.keys("b").len(), 1, "nothing else was written");
}

#[test]
fn a_read_only_identity_reads_and_never_writes() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = host(
        &dir.path().join("w"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let built = writer.get_or_build(&kernel(1)).expect("the writer builds");
    let reader_config = server
        .weed
        .config(server.weed.reader())
        .timeouts(Duration::from_secs(2), Duration::from_secs(10));
    let reader_remote = remote_with(reader_config.clone(), RemoteMode::ReadWrite);
    let reader = host(&dir.path().join("r"), Some(reader_remote.clone()));

    let fetched = reader.get_or_build(&kernel(1)).expect("the reader fetches");
    assert_eq!(fetched.outcome, Outcome::Fetched);
    assert!(
        fetched.artifact.bytes() == built.artifact.bytes(),
        "the bytes must be equal"
    );
    all_built_locally(&reader, &[2]);
    assert_eq!(server.keys("b").len(), 1, "the reader uploaded nothing");
    assert!(server.keys("l").is_empty(), "and took no lease");
    // Writes stopped, reads go on: a kernel the writer builds now is still fetched.
    writer.get_or_build(&kernel(3)).expect("the writer builds");
    let later = reader.get_or_build(&kernel(3)).expect("the reader fetches");
    assert_eq!(
        later.outcome,
        Outcome::Fetched,
        "reads survive a refused write"
    );
    assert_eq!(reader_remote.stats().hits, 2);
    assert_eq!(
        reader_remote.stats().errors,
        1,
        "one refusal, then no write tried"
    );

    // Mode read-only never writes at all, not even a probe or a lease.
    let ro_remote = remote_with(reader_config, RemoteMode::ReadOnly);
    let ro = host(&dir.path().join("ro"), Some(ro_remote.clone()));
    all_built_locally(&ro, &[4]);
    assert_eq!(ro_remote.stats().errors, 0, "nothing was attempted");
    assert_eq!(server.keys("b").len(), 2, "nothing uploaded");
}

#[test]
fn a_server_that_ignores_conditional_writes_is_used_for_reads_only_with_one_warning() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let direct = host(
        &dir.path().join("d"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    direct.get_or_build(&kernel(1)).expect("uploaded directly");
    let proxy = ConditionDroppingProxy::start(&server.weed.endpoint());
    let config = server
        .weed
        .config(server.weed.admin())
        .endpoint(proxy.endpoint())
        .timeouts(Duration::from_secs(2), Duration::from_secs(10));
    let lax = remote_with(config, RemoteMode::ReadWrite);
    let cache = host(&dir.path().join("a"), Some(lax.clone()));
    assert_eq!(
        cache.get_or_build(&kernel(1)).expect("fetch").outcome,
        Outcome::Fetched,
        "reads work"
    );
    all_built_locally(&cache, &[2, 3]);
    one_fault(&lax, "does not honour conditional writes");
    assert_eq!(server.keys("b").len(), 1, "no upload without coordination");
    assert_eq!(server.keys("m").len(), 1);
    assert!(server.keys("l").is_empty());
}

#[test]
fn a_deleted_blob_under_a_surviving_manifest_is_a_miss_not_an_error() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let built = a.get_or_build(&kernel(1)).expect("a builds");
    let blobs = server.keys("b");
    assert_eq!(blobs.len(), 1);
    server.weed.delete(&blobs[0]);
    let b_remote = remote(&server, RemoteMode::ReadWrite);
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));
    all_built_locally(&b, &[1]);
    let stats = b_remote.stats();
    assert_eq!(
        (stats.errors, stats.hits, stats.misses),
        (0, 0, 1),
        "{stats:?}"
    );
    assert!(
        server.weed.get(&blobs[0]).as_deref() == Some(built.artifact.bytes()),
        "b's upload restored the blob"
    );
}

#[test]
fn every_corrupt_truncated_oversized_or_mismatched_object_is_refused() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let good = a
        .get_or_build(&kernel(1))
        .expect("a builds")
        .artifact
        .bytes()
        .to_vec();
    let blob = server.keys("b").remove(0);
    let manifest = server.keys("m").remove(0);
    let good_manifest = server.weed.get(&manifest).expect("the manifest");

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
            "another artifact's bytes",
            "blob",
            b"\x7fELF not this one".to_vec(),
        ),
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
        server.weed.put(&blob, &good);
        server.weed.put(&manifest, &good_manifest);
        server
            .weed
            .put(if target == "blob" { &blob } else { &manifest }, &value);
        let b_remote = remote(&server, RemoteMode::ReadWrite);
        let b = host(&dir.path().join(format!("b{i}")), Some(b_remote.clone()));
        let answer = b.get_or_build(&kernel(1)).expect("never a failed build");
        assert_eq!(answer.outcome, Outcome::Built, "{what}: compiled locally");
        assert!(
            answer.artifact.bytes() == good,
            "{what}: the bad bytes were not used"
        );
        let stats = b_remote.stats();
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
            server.weed.get(&blob).as_deref() == Some(good.as_slice()),
            "{what}: b's upload left (or repaired) a good blob"
        );
        let now = server.weed.get(&manifest).expect("a manifest");
        assert!(
            jit_cache::manifest_artifacts(&now).is_some(),
            "{what}: b's upload left a readable manifest"
        );
    }
    // After the repairs, the next host fetches.
    let c = host(
        &dir.path().join("c"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    assert_eq!(
        c.get_or_build(&kernel(1)).expect("c").outcome,
        Outcome::Fetched
    );
}

#[test]
fn heavy_a_lease_whose_holder_died_expires_and_a_waiter_compiles() {
    use jit_cache::RemoteTier;
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let waiter_remote = remote_with(
        server.weed.config(server.weed.admin()),
        RemoteMode::ReadWrite,
    );
    let waiter = host(&dir.path().join("w"), Some(waiter_remote.clone()));
    // A holder that died mid-compile: its lease is there and never renewed or released.
    let key = waiter.explain(&kernel(7)).expect("explain").key;
    assert!(server
        .tier()
        .acquire_lease(&key, "dead-holder", Duration::from_millis(1500))
        .expect("plant the lease"));
    let started = Instant::now();
    all_built_locally(&waiter, &[7]);
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "the waiter waited for the holder's lease ({:?})",
        started.elapsed()
    );
    assert_eq!(waiter_remote.stats().leases_waited, 1);
    assert_eq!(builds(&waiter), 1);
    assert_eq!(server.keys("m").len(), 1, "the waiter uploaded");
    assert!(server.keys("l").is_empty(), "and released its own lease");
}

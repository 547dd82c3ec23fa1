//! Remote faults are never the user's problem: each gives a local build (or a local hit), no
//! failed build, no unverified byte used, at most one warning, and one bounded timeout per
//! process: a killed server, a stopped one, a read-only identity, an evicted blob, and every
//! kind of corrupt value.

use crate::conformance::hosts::{
    all_built_locally, builds, host, kernel, one_fault, remote, remote_on,
};
use crate::conformance::server::{Space, TestServer, Timeouts};
use crate::test_server::Signal;
use jit_cache::{Outcome, RemoteMode, RemoteTier};
use std::time::{Duration, Instant};

/// A server that is gone refuses the connection: one attempt per process, then the tier is
/// skipped, with the failed operation kept as the reason.
pub fn a_refused_connection_costs_one_attempt_per_process<S: TestServer>() {
    let mut server = S::start();
    let dead = remote_on(server.tier(Timeouts::Default), RemoteMode::ReadWrite);
    server.kill();
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = host(&dir.path().join("a"), Some(dead.clone()));
    let started = Instant::now();
    all_built_locally(&cache, &[1, 2, 3]);
    one_fault(&dead, "get manifest");
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// A stopped server (it accepts and never answers) costs one connect timeout, then nothing.
pub fn a_stopped_server_costs_one_timeout_then_nothing<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // The default timeouts: connect (the first request of a process) 100 ms.
    let stopped = remote_on(server.tier(Timeouts::Default), RemoteMode::ReadWrite);
    let cache = host(&dir.path().join("a"), Some(stopped.clone()));
    server.signal(Signal::STOP);
    let started = Instant::now();
    all_built_locally(&cache, &[1]);
    let first = started.elapsed();
    all_built_locally(&cache, &[2, 3]);
    server.signal(Signal::CONT);
    one_fault(&stopped, S::NO_ANSWER);
    assert!(
        first < Duration::from_secs(10),
        "the connect timeout bounds the wait on a stopped server ({first:?})"
    );
}

/// A server killed after a host has spoken to it: a miss, one error, then skipped.
pub fn a_server_killed_between_operations_is_a_miss_and_then_skipped<S: TestServer>() {
    let mut server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    a.get_or_build(&kernel(1)).expect("a builds and uploads");
    let b_remote = remote(&server, RemoteMode::ReadWrite);
    b_remote.health().expect("b has spoken to the server");
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));
    server.kill();
    all_built_locally(&b, &[1, 2]);
    assert_eq!(b_remote.stats().errors, 1, "one failure, then skipped");
    assert_eq!(b_remote.stats().hits, 0);
}

/// An identity that may only read fetches, never fails a build for lack of write permission,
/// and after one refused write tries none; mode read-only never writes at all.
pub fn a_read_only_identity_reads_and_never_writes<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = host(
        &dir.path().join("w"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let built = writer.get_or_build(&kernel(1)).expect("the writer builds");
    let reader_remote = remote_on(server.reader_tier(), RemoteMode::ReadWrite);
    let reader = host(&dir.path().join("r"), Some(reader_remote.clone()));

    let fetched = reader.get_or_build(&kernel(1)).expect("the reader fetches");
    assert_eq!(fetched.outcome, Outcome::Fetched);
    assert!(
        fetched.artifact.bytes() == built.artifact.bytes(),
        "the bytes must be equal"
    );
    all_built_locally(&reader, &[2]);
    assert_eq!(
        server.names(Space::Blob).len(),
        1,
        "the reader uploaded nothing"
    );
    assert!(server.names(Space::Lease).is_empty(), "and took no lease");
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
    let ro_remote = remote_on(server.reader_tier(), RemoteMode::ReadOnly);
    let ro = host(&dir.path().join("ro"), Some(ro_remote.clone()));
    all_built_locally(&ro, &[4]);
    assert_eq!(ro_remote.stats().errors, 0, "nothing was attempted");
    assert_eq!(server.names(Space::Blob).len(), 2, "nothing uploaded");
}

/// A blob evicted or deleted under a manifest that survived is a miss, not an error, and the
/// host's upload restores it.
pub fn an_evicted_or_deleted_blob_under_a_surviving_manifest_is_a_miss_not_an_error<
    S: TestServer,
>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    let built = a.get_or_build(&kernel(1)).expect("a builds");
    let blobs = server.names(Space::Blob);
    assert_eq!(blobs.len(), 1);
    server.delete(&blobs[0]);
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
        server.get(&blobs[0]).as_deref() == Some(built.artifact.bytes()),
        "b's upload restored the blob"
    );
}

/// A flipped, truncated, oversized or foreign blob, and a manifest that is not JSON, too large
/// or of the wrong size, are each refused: a local build, never the bad bytes, and the host's
/// upload leaves (or repairs) a good store.
pub fn every_corrupt_truncated_oversized_or_mismatched_object_is_refused<S: TestServer>() {
    let server = S::start();
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
    let blob = server.names(Space::Blob).remove(0);
    let manifest = server.names(Space::Manifest).remove(0);
    let good_manifest = server.get(&manifest).expect("the manifest");

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
        server.put(&blob, &good);
        server.put(&manifest, &good_manifest);
        server.put(if target == "blob" { &blob } else { &manifest }, &value);
        let b_remote = remote(&server, RemoteMode::ReadWrite);
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
            server.get(&blob).as_deref() == Some(good.as_slice()),
            "{what}: b's upload left (or repaired) a good blob"
        );
        let now = server.get(&manifest).expect("a manifest");
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

/// A lease whose holder died mid-compile (never renewed nor released) holds its whole expiry,
/// then a waiter takes it, compiles, uploads and releases it.
pub fn heavy_a_lease_whose_holder_died_expires_and_a_waiter_compiles<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let waiter_remote = remote_on(server.tier(Timeouts::Default), RemoteMode::ReadWrite);
    let waiter = host(&dir.path().join("w"), Some(waiter_remote.clone()));
    // A holder that died mid-compile: its lease is there and never renewed or released.
    let key = waiter.explain(&kernel(7)).expect("explain").key;
    let expiry = Duration::from_millis(1500);
    let planted = Instant::now();
    assert!(server
        .tier(Timeouts::Generous)
        .acquire_lease(&key, "dead-holder", expiry)
        .expect("plant the lease"));
    all_built_locally(&waiter, &[7]);
    assert!(
        planted.elapsed() >= expiry,
        "the waiter waited for the holder's lease ({:?})",
        planted.elapsed()
    );
    assert_eq!(waiter_remote.stats().leases_waited, 1);
    assert_eq!(builds(&waiter), 1);
    assert_eq!(
        server.names(Space::Manifest).len(),
        1,
        "the waiter uploaded"
    );
    assert!(
        server.names(Space::Lease).is_empty(),
        "and released its own lease"
    );
}

/// A manifest too large for any reader (garbage) is replaced by the next host's upload, and the
/// host after it fetches through the new one.
pub fn an_oversized_manifest_is_replaced_by_the_next_upload<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = host(
        &dir.path().join("a"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    a.get_or_build(&kernel(1)).expect("a builds");
    let manifest = server.names(Space::Manifest).remove(0);
    // Garbage past what any reader accepts (4 MiB): it can never be read, only replaced.
    server.put(&manifest, &vec![b' '; 5 << 20]);
    let b_remote = remote(&server, RemoteMode::ReadWrite);
    let b = host(&dir.path().join("b"), Some(b_remote.clone()));
    all_built_locally(&b, &[1]);
    let after = server.get(&manifest).expect("a manifest");
    assert!(
        after.len() < 1 << 20 && jit_cache::manifest_artifacts(&after).is_some(),
        "b's upload replaced the oversized manifest ({} bytes there)",
        after.len()
    );
    assert_eq!(b_remote.stats().uploads, 1, "b's upload counted");
    let c = host(
        &dir.path().join("c"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    assert_eq!(
        c.get_or_build(&kernel(1)).expect("c").outcome,
        Outcome::Fetched,
        "the next host fetches through the replaced manifest"
    );
}

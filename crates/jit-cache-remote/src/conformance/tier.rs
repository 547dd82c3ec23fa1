//! The tier's operations themselves, against the real server: what must be refused (a second
//! create, a stale version, a write by a read-only identity) is refused; reads are bounded;
//! leases are exclusive and expire; the first request of a process is bounded by the connect
//! timeout; the audit finds what is wrong.

use crate::conformance::server::{Space, TestServer, Timeouts};
use crate::test_server::Signal;
use jit_cache::{Expected, RemoteTier, TierErrorKind};
use std::time::{Duration, Instant};

fn digest(bytes: &[u8]) -> String {
    fingerprint::Digest::of_bytes(bytes).to_hex()
}

/// Blobs are create-only; a manifest is replaced only by a writer that read the version there,
/// compared on content; oversized garbage is refused unread and replaced while that long.
pub fn blobs_are_create_only_and_manifests_replaced_only_from_the_version_read<S: TestServer>() {
    let server = S::start();
    let tier = server.tier(Timeouts::Generous);
    let good = b"the artifact".to_vec();
    let name = digest(&good);
    tier.put_blob(&name, &good).expect("first upload");
    tier.put_blob(&name, b"other bytes under the same name")
        .expect("a second upload is no error");
    assert_eq!(
        tier.get_blob(&name, 100).expect("read"),
        Some(good.clone()),
        "the first upload stays: create-only"
    );

    let key = "ab".repeat(32);
    assert!(tier
        .replace_manifest(&key, Expected::Absent, b"v1")
        .expect("create"));
    assert!(
        !tier
            .replace_manifest(&key, Expected::Absent, b"v1 again")
            .expect("second create"),
        "a second create-only write loses"
    );
    // Another process's tier, which read v1 too.
    let other = server.tier(Timeouts::Generous);
    assert_eq!(
        other.get_manifest(&key, 100).expect("read"),
        Some(b"v1".to_vec())
    );
    assert!(tier
        .replace_manifest(&key, Expected::Value(b"v1"), b"v2")
        .expect("replace"));
    assert!(
        !other
            .replace_manifest(&key, Expected::Value(b"v1"), b"v2 from a stale read")
            .expect("stale replace"),
        "a writer whose version is gone loses"
    );
    assert_eq!(
        tier.get_manifest(&key, 100).expect("read"),
        Some(b"v2".to_vec())
    );
    assert!(
        !tier
            .replace_manifest(&key, Expected::Value(b"v9"), b"v3")
            .expect("replace of a value never read"),
        "the compare is on content, not on whichever version is there"
    );

    // Oversized garbage is refused unread, and replaced while it is still that long.
    tier.replace_manifest(&key, Expected::Value(b"v2"), &vec![b' '; 2048])
        .expect("plant garbage");
    let read = tier.get_manifest(&key, 1024);
    assert_eq!(read.map_err(|e| e.kind()), Err(TierErrorKind::TooLarge));
    assert!(other
        .replace_manifest(&key, Expected::LongerThan(1024), b"v4")
        .expect("replace the garbage"));
    assert_eq!(
        tier.get_manifest(&key, 1024).expect("read"),
        Some(b"v4".to_vec())
    );
}

/// One byte over a read's limit is too large; exactly the limit is read; absent is None.
pub fn every_read_is_bounded<S: TestServer>() {
    let server = S::start();
    let tier = server.tier(Timeouts::Generous);
    let big = vec![7u8; 100_000];
    let name = digest(&big);
    tier.put_blob(&name, &big).expect("upload");
    let short = tier.get_blob(&name, 99_999);
    assert_eq!(
        short.map_err(|e| e.kind()),
        Err(TierErrorKind::TooLarge),
        "one byte over the limit is too large"
    );
    assert_eq!(tier.get_blob(&name, 100_000).expect("exact"), Some(big));
    assert_eq!(
        tier.get_blob(&digest(b"nothing"), 10).expect("absent"),
        None
    );
}

/// One holder at a time; only the holder renews or releases; a released lease leaves nothing.
pub fn leases_are_exclusive_renewed_and_released_only_by_their_holder<S: TestServer>() {
    let server = S::start();
    let a = server.tier(Timeouts::Generous);
    let b = server.tier(Timeouts::Generous);
    let key = "cd".repeat(32);
    let ttl = Duration::from_secs(30);
    assert!(a.acquire_lease(&key, "host-a", ttl).expect("a takes"));
    assert!(
        !b.acquire_lease(&key, "host-b", ttl).expect("b asks"),
        "one holder"
    );
    assert!(b.lease_held(&key).expect("look"), "b sees a's lease");
    assert!(
        !b.renew_lease(&key, "host-b", ttl).expect("b renews"),
        "not b's to renew"
    );
    b.release_lease(&key, "host-b").expect("b releases");
    assert!(
        b.lease_held(&key).expect("look"),
        "b cannot release a's lease"
    );
    assert!(a.renew_lease(&key, "host-a", ttl).expect("a renews"));
    a.release_lease(&key, "host-a").expect("a releases");
    assert!(!b.lease_held(&key).expect("look"), "released");
    assert!(
        server.names(Space::Lease).is_empty(),
        "a released lease leaves no object"
    );
    assert!(
        b.acquire_lease(&key, "host-b", ttl).expect("b takes"),
        "free again"
    );
}

/// A dead holder's lease is taken over only once its expiry has passed on the server's clock,
/// and soon after (S3's `Date` rounds to the second); the old holder cannot renew it.
pub fn a_dead_holders_lease_is_taken_over_only_after_its_expiry_on_the_server_clock<
    S: TestServer,
>() {
    let server = S::start();
    let dead = server.tier(Timeouts::Generous);
    let waiter = server.tier(Timeouts::Generous);
    let key = "ef".repeat(32);
    let ttl = Duration::from_millis(1500);
    // Timed from before the take: the lease must hold `ttl` from the moment it was asked for.
    let taken = Instant::now();
    assert!(dead.acquire_lease(&key, "dead-holder", ttl).expect("take"));
    let mut looks = 0;
    // A bounded poll of the lease's real expiry, as a waiting host does.
    while !waiter.acquire_lease(&key, "waiter", ttl).expect("ask") {
        looks += 1;
        assert!(
            taken.elapsed() < Duration::from_secs(10),
            "the lease never expired"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let waited = taken.elapsed();
    assert!(looks > 0, "the holder's lease held at first");
    assert!(
        waited >= ttl,
        "never taken before its expiry ({waited:?} < {ttl:?})"
    );
    assert!(
        waited <= ttl + Duration::from_millis(3500),
        "taken within the expiry and the Date header's two seconds of rounding ({waited:?})"
    );
    assert!(
        !dead.renew_lease(&key, "dead-holder", ttl).expect("renew"),
        "the old holder has lost it"
    );
}

/// An identity that may only read is healthy and reads; each write it tries (a blob, a lease)
/// is refused as denied, and nothing is stored.
pub fn a_read_only_identity_reads_and_every_write_it_tries_is_refused<S: TestServer>() {
    let server = S::start();
    let admin = server.tier(Timeouts::Generous);
    let bytes = b"artifact".to_vec();
    admin.put_blob(&digest(&bytes), &bytes).expect("upload");
    let reader = server.reader_tier();
    reader.health().expect("a reader is healthy");
    assert_eq!(
        reader.get_blob(&digest(&bytes), 100).expect("read"),
        Some(bytes)
    );
    let other = b"other".to_vec();
    let put = reader.put_blob(&digest(&other), &other);
    assert_eq!(put.map_err(|e| e.kind()), Err(TierErrorKind::Denied));
    let lease = reader.acquire_lease(&"56".repeat(32), "t", Duration::from_secs(5));
    assert_eq!(lease.map_err(|e| e.kind()), Err(TierErrorKind::Denied));
    assert_eq!(
        server.names(Space::Blob).len(),
        1,
        "the reader stored nothing"
    );
    assert!(server.names(Space::Lease).is_empty());
}

/// The audit of a clean store finds nothing; a tampered blob is corrupt, a manifest that is not
/// JSON unreadable.
pub fn an_audit_finds_corrupt_blobs_and_unreadable_manifests<S: TestServer>() {
    let server = S::start();
    let tier = server.tier(Timeouts::Generous);
    let clean = server.audit();
    assert_eq!((clean.manifests, clean.blobs), (0, 0));
    let bytes = b"artifact".to_vec();
    tier.put_blob(&digest(&bytes), &bytes).expect("upload");
    let blob = server.names(Space::Blob).remove(0);
    server.put(&blob, b"tampered");
    assert!(tier
        .replace_manifest(&"ab".repeat(32), Expected::Absent, b"{not json")
        .expect("plant a manifest that does not parse"));
    let audit = server.audit();
    assert_eq!(audit.corrupt_blobs, [blob]);
    assert_eq!(audit.unreadable_manifests.len(), 1);
}

/// A process's first request to a stopped server (it accepts and never answers) waits the
/// connect timeout; once the server has answered, a request gets the I/O timeout.
pub fn a_stopped_server_costs_a_process_the_connect_timeout_not_the_io_timeout<S: TestServer>() {
    let server = S::start();
    let timeouts = Timeouts::Exactly {
        connect: Duration::from_millis(100),
        io: Duration::from_secs(3),
    };
    let fresh = server.tier(timeouts);
    let talking = server.tier(timeouts);
    talking.health().expect("this one has had an answer");
    server.signal(Signal::STOP);
    let started = Instant::now();
    let error = fresh
        .get_manifest(&"78".repeat(32), 100)
        .expect_err("no answer");
    let first = started.elapsed();
    let started = Instant::now();
    let later = talking.get_manifest(&"78".repeat(32), 100);
    let after_an_answer = started.elapsed();
    server.signal(Signal::CONT);
    assert_eq!(error.kind(), TierErrorKind::Unavailable, "{error}");
    assert!(
        first >= Duration::from_millis(100) && first < Duration::from_millis(1500),
        "a process's first request waits the connect timeout (100 ms), not the I/O timeout \
         (3 s): {first:?}"
    );
    assert!(
        later.is_err(),
        "the stopped server does not answer the other tier either"
    );
    assert!(
        after_an_answer >= Duration::from_secs(3),
        "once the server has answered, a request gets the I/O timeout: {after_an_answer:?}"
    );
}

/// More objects than one page of a listing holds (1,000): the audit finds every one.
pub fn a_listing_past_one_page_finds_every_object<S: TestServer>() {
    let server = S::start();
    let tier = server.tier(Timeouts::Generous);
    let blobs: Vec<Vec<u8>> = (0..1001)
        .map(|i| format!("blob {i}").into_bytes())
        .collect();
    for bytes in &blobs {
        tier.put_blob(&digest(bytes), bytes).expect("upload");
    }
    assert_eq!(server.names(Space::Blob).len(), 1001, "every blob listed");
    let audit = server.audit();
    assert_eq!(
        (audit.blobs, audit.corrupt_blobs.len()),
        (1001, 0),
        "{audit:?}"
    );
}

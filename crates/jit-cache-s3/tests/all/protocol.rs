//! The tier's mapping of the cache's operations onto S3, against the real server: what the
//! server must refuse (a second create, a stale version, a corrupted upload, a write by a
//! read-only identity) it refuses; reads are bounded; leases expire on the server's clock; a
//! server that ignores conditions is found out before any coordination; health names what is
//! wrong.

use crate::support::{wrong_secret, ConditionDroppingProxy, Server};
use jit_cache::{Expected, RemoteTier, TierErrorKind};
use jit_cache_s3::S3Tier;
use std::time::{Duration, Instant};

fn digest(bytes: &[u8]) -> String {
    fingerprint::Digest::of_bytes(bytes).to_hex()
}

#[test]
fn blobs_are_create_only_and_manifests_replaced_only_from_the_version_read() {
    let server = Server::start();
    let tier = server.tier();
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
    assert_eq!(
        server.keys("b"),
        [format!("jit-cache/b/{}/{name}", &name[..2])],
        "fanned out under its first two hex digits"
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
    let other = server.tier();
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

#[test]
fn every_read_is_bounded_and_an_upload_corrupted_on_the_way_is_refused() {
    let server = Server::start();
    let tier = server.tier();
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

    let intended = b"the bytes the uploader hashed".to_vec();
    let object = format!("jit-cache/b/00/{}", digest(&intended));
    let refused = server
        .weed
        .put_corrupted(&object, &intended, b"the bytes that arrived");
    let error = refused.expect_err("the server refuses a body that does not match its checksum");
    assert!(
        error.to_string().contains("checksum"),
        "the message says why: {error}"
    );
    assert_eq!(server.weed.get(&object), None, "nothing was stored");
}

#[test]
fn leases_are_exclusive_renewed_and_released_only_by_their_holder() {
    let server = Server::start();
    let a = server.tier();
    let b = server.tier();
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
        server.keys("l").is_empty(),
        "a released lease leaves no object"
    );
    assert!(
        b.acquire_lease(&key, "host-b", ttl).expect("b takes"),
        "free again"
    );
}

#[test]
fn a_dead_holders_lease_is_taken_over_only_after_its_expiry_on_the_server_clock() {
    let server = Server::start();
    let dead = server.tier();
    let waiter = server.tier();
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

#[test]
fn a_server_that_ignores_conditions_gets_no_leases_and_no_manifest_updates() {
    let server = Server::start();
    let proxy = ConditionDroppingProxy::start(&server.weed.endpoint());
    let config = server
        .weed
        .config(server.weed.admin())
        .endpoint(proxy.endpoint())
        .timeouts(Duration::from_secs(2), Duration::from_secs(10));
    let tier = S3Tier::open(config).expect("tier");
    tier.health().expect("reads work through the proxy");
    let key = "12".repeat(32);
    let refused = tier
        .acquire_lease(&key, "token", Duration::from_secs(5))
        .expect_err("coordination is refused");
    assert_eq!(
        refused.kind(),
        TierErrorKind::Denied,
        "a refused write: {refused}"
    );
    assert!(
        refused
            .to_string()
            .contains("does not honour conditional writes"),
        "says why: {refused}"
    );
    let manifest = tier.replace_manifest(&key, Expected::Absent, b"m");
    assert_eq!(
        manifest.map_err(|e| e.kind()),
        Err(TierErrorKind::Denied),
        "no manifest update either"
    );
    assert!(server.keys("l").is_empty() && server.keys("m").is_empty());
    // The same server without the proxy passes the probe.
    let direct = server.tier();
    assert!(direct
        .acquire_lease(&key, "token", Duration::from_secs(5))
        .expect("the real server honours conditions"));
}

#[test]
fn health_names_a_missing_bucket_a_wrong_secret_and_an_unknown_key() {
    let server = Server::start();
    server.tier().health().expect("healthy");
    let cases = [
        (
            server
                .weed
                .config_for("s3://no-such-bucket/p", server.weed.admin()),
            "does not exist",
        ),
        (
            server.weed.config(&wrong_secret(server.weed.admin())),
            "AWS_SECRET_ACCESS_KEY",
        ),
        (
            server.weed.config(&jit_cache_s3::Credentials::new(
                "nobody",
                server.weed.admin().secret_access_key.clone(),
            )),
            "AWS_ACCESS_KEY_ID",
        ),
    ];
    for (config, says) in cases {
        let url = config.url();
        let tier = S3Tier::open(config).expect("tier");
        let error = tier.health().expect_err("an error, never a quiet miss");
        assert!(error.to_string().contains(says), "{url}: {error}");
        let read = tier.get_manifest(&"34".repeat(32), 100);
        assert!(read.is_err(), "{url}: a read is an error too, not a miss");
    }
}

#[test]
fn a_read_only_identity_reads_and_every_write_it_tries_is_refused() {
    let server = Server::start();
    let admin = server.tier();
    let bytes = b"artifact".to_vec();
    admin.put_blob(&digest(&bytes), &bytes).expect("upload");
    let reader = S3Tier::open(
        server
            .weed
            .config(server.weed.reader())
            .timeouts(Duration::from_secs(2), Duration::from_secs(10)),
    )
    .expect("tier");
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
    assert_eq!(server.keys("b").len(), 1, "the reader stored nothing");
    assert!(server.keys("l").is_empty());
}

#[test]
fn an_audit_finds_corrupt_blobs_and_unreadable_manifests() {
    let server = Server::start();
    let tier = server.tier();
    let clean = tier.audit().expect("audit");
    assert_eq!((clean.manifests, clean.blobs), (0, 0));
    let bytes = b"artifact".to_vec();
    tier.put_blob(&digest(&bytes), &bytes).expect("upload");
    let blob = server.keys("b").remove(0);
    server.weed.put(&blob, b"tampered");
    server
        .weed
        .put(&format!("jit-cache/m/ab/{}", "ab".repeat(32)), b"{not json");
    let audit = tier.audit().expect("audit");
    assert_eq!(audit.corrupt_blobs, [blob]);
    assert_eq!(audit.unreadable_manifests.len(), 1);
}

#[test]
fn a_stopped_server_costs_a_process_the_connect_timeout_not_the_io_timeout() {
    let server = Server::start();
    let config = server
        .weed
        .config(server.weed.admin())
        .timeouts(Duration::from_millis(100), Duration::from_secs(3));
    let fresh = S3Tier::open(config.clone()).expect("tier");
    let talking = S3Tier::open(config).expect("tier");
    talking.health().expect("this one has had an answer");
    server.weed.signal(rustix::process::Signal::STOP);
    let started = Instant::now();
    let error = fresh
        .get_manifest(&"78".repeat(32), 100)
        .expect_err("no answer");
    let first = started.elapsed();
    let started = Instant::now();
    let later = talking.get_manifest(&"78".repeat(32), 100);
    let after_an_answer = started.elapsed();
    server.weed.signal(rustix::process::Signal::CONT);
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

#[test]
fn a_listing_past_one_page_finds_every_object() {
    let server = Server::start();
    let tier = server.tier();
    // One more than a page holds (1,000): the audit must follow the continuation token.
    let blobs: Vec<Vec<u8>> = (0..1001)
        .map(|i| format!("blob {i}").into_bytes())
        .collect();
    for bytes in &blobs {
        tier.put_blob(&digest(bytes), bytes).expect("upload");
    }
    assert_eq!(server.keys("b").len(), 1001, "every blob listed");
    let audit = tier.audit().expect("audit");
    assert_eq!(
        (audit.blobs, audit.corrupt_blobs.len()),
        (1001, 0),
        "{audit:?}"
    );
}

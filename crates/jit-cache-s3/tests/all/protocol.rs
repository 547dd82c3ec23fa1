//! What only S3 has to get right, against the real server: a server that ignores conditions is
//! found out before any coordination; an upload corrupted on the way is refused by its
//! checksum; health names what is wrong (bucket, secret, key); blobs fan out by digest. The
//! operations both tiers share are in the conformance suite.

use crate::support::{wrong_secret, ConditionDroppingProxy, Server};
use jit_cache::{Expected, RemoteTier, TierErrorKind};
use jit_cache_remote::conformance::server::{Space, TestServer, Timeouts};
use jit_cache_s3::S3Tier;
use std::time::Duration;

fn digest(bytes: &[u8]) -> String {
    fingerprint::Digest::of_bytes(bytes).to_hex()
}

#[test]
fn blobs_fan_out_under_their_first_two_hex_digits() {
    let server = Server::start();
    let good = b"the artifact".to_vec();
    let name = digest(&good);
    server
        .tier(Timeouts::Generous)
        .put_blob(&name, &good)
        .expect("upload");
    assert_eq!(
        server.names(Space::Blob),
        [format!("jit-cache/b/{}/{name}", &name[..2])],
        "fanned out under its first two hex digits"
    );
}

#[test]
fn an_upload_corrupted_on_the_way_is_refused() {
    let server = Server::start();
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
fn a_server_that_ignores_conditions_gets_no_leases_and_no_manifest_updates() {
    let server = Server::start();
    let proxy = ConditionDroppingProxy::start(&server.weed.endpoint());
    let config = server.config().endpoint(proxy.endpoint());
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
    assert!(server.names(Space::Lease).is_empty() && server.names(Space::Manifest).is_empty());
    // The same server without the proxy passes the probe.
    let direct = server.tier(Timeouts::Generous);
    assert!(direct
        .acquire_lease(&key, "token", Duration::from_secs(5))
        .expect("the real server honours conditions"));
}

#[test]
fn health_names_a_missing_bucket_a_wrong_secret_and_an_unknown_key() {
    let server = Server::start();
    server.tier(Timeouts::Generous).health().expect("healthy");
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

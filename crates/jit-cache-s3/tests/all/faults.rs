//! Faults only S3 has, each still a local build, no failed build and one error with its reason:
//! a wrong secret, a missing bucket, and a server that ignores conditional writes. The faults
//! both tiers share are in the conformance suite.

use crate::support::{remote_with, wrong_secret, ConditionDroppingProxy, Server};
use jit_cache::{Outcome, RemoteMode};
use jit_cache_remote::conformance::hosts::{all_built_locally, host, kernel, one_fault, remote};
use jit_cache_remote::conformance::server::{Space, TestServer};

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
    assert_eq!(
        server.names(Space::Blob).len(),
        1,
        "nothing else was written"
    );
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
    let config = server.config().endpoint(proxy.endpoint());
    let lax = remote_with(config, RemoteMode::ReadWrite);
    let cache = host(&dir.path().join("a"), Some(lax.clone()));
    assert_eq!(
        cache.get_or_build(&kernel(1)).expect("fetch").outcome,
        Outcome::Fetched,
        "reads work"
    );
    all_built_locally(&cache, &[2, 3]);
    one_fault(&lax, "does not honour conditional writes");
    assert_eq!(
        server.names(Space::Blob).len(),
        1,
        "no upload without coordination"
    );
    assert_eq!(server.names(Space::Manifest).len(), 1);
    assert!(server.names(Space::Lease).is_empty());
}

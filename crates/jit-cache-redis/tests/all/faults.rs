//! Faults only Redis has: a server out of memory (`maxmemory`) refuses writes with `OOM`, and
//! builds go on. The faults both tiers share are in the conformance suite.

use crate::support::Server;
use jit_cache::{Outcome, RemoteMode};
use jit_cache_remote::conformance::hosts::{all_built_locally, host, kernel, remote};
use jit_cache_remote::conformance::server::TestServer;

#[test]
fn a_full_server_refuses_uploads_and_builds_go_on() {
    let server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = host(
        &dir.path().join("w"),
        Some(remote(&server, RemoteMode::ReadWrite)),
    );
    writer
        .get_or_build(&kernel(1))
        .expect("uploaded before the server filled");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query::<()>(&mut server.admin())
        .expect("maxmemory 1 byte: every write is refused with OOM");
    let full_remote = remote(&server, RemoteMode::ReadWrite);
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

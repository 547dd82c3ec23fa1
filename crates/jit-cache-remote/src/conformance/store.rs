//! Stored entries (`jit_cache::store`) across hosts through the tier: one host produces, the
//! others fetch every file verified instead of producing, and a blob that does not hash to its
//! name is refused (the host produces itself and repairs it).

use crate::conformance::hosts::remote;
use crate::conformance::server::{Space, TestServer};
use jit_cache::store::{Claim, Namespace, Store, StoreOptions, StoredEntry};
use jit_cache::RemoteMode;
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

fn store<S: TestServer>(root: &Path, server: &S) -> Store {
    Store::open_with(
        root,
        StoreOptions::default().remote(remote(server, RemoteMode::ReadWrite)),
    )
    .expect("open store")
}

fn produce_group(store: &Store, key: &str) -> Option<StoredEntry> {
    let triton = Namespace::new("triton").expect("namespace");
    match store.begin(&triton, key, WAIT).expect("begin") {
        Claim::Ready(_) => None,
        Claim::Produce(producer) => {
            producer
                .write("add.cubin", b"\x7fELF cubin")
                .expect("write");
            producer
                .write("add.json", b"{\"name\": \"add\"}")
                .expect("write");
            Some(producer.commit().expect("commit"))
        }
    }
}

/// An entry produced on host a is fetched, every file verified, on host b, and stays a local
/// hit there with the server gone.
pub fn a_stored_entry_produced_on_one_host_is_fetched_verified_on_another<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = store(&dir.path().join("a"), &server);
    let b = store(&dir.path().join("b"), &server);
    produce_group(&a, "k1").expect("host a produces: nothing anywhere yet");
    assert_eq!(server.names(Space::Blob).len(), 2, "a blob per file");
    assert_eq!(server.names(Space::Manifest).len(), 1, "and the manifest");

    // Host b fetches instead of producing: `begin` answers Ready.
    assert!(
        produce_group(&b, "k1").is_none(),
        "host b fetched the entry"
    );
    let triton = Namespace::new("triton").expect("namespace");
    let fetched = b.get(&triton, "k1").expect("get").expect("published on b");
    assert_eq!(fetched.read("add.cubin").expect("read"), b"\x7fELF cubin");
    assert_eq!(
        fetched.files().collect::<Vec<_>>(),
        ["add.cubin", "add.json"]
    );
    // Published on b's own root, durably: with the server gone it is still a local hit.
    drop(server);
    let b_again = Store::open(dir.path().join("b")).expect("reopen");
    assert!(b_again.get(&triton, "k1").expect("get").is_some());
}

/// A stored blob that does not hash to its name is refused: the host produces the entry itself
/// and its upload repairs the blob.
pub fn a_corrupt_stored_blob_is_refused_and_the_host_produces_and_repairs_it<S: TestServer>() {
    let server = S::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let a = store(&dir.path().join("a"), &server);
    produce_group(&a, "k2").expect("host a produces");
    // Flip the cubin's blob on the server: same length, other bytes.
    let cubin = fingerprint::Digest::of_bytes(b"\x7fELF cubin").to_hex();
    let name = server
        .names(Space::Blob)
        .into_iter()
        .find(|name| name.ends_with(&cubin))
        .expect("the cubin's blob is named by its digest");
    server.put(&name, b"\x7fELF cubiX");

    let c = store(&dir.path().join("c"), &server);
    let produced = produce_group(&c, "k2");
    assert!(
        produced.is_some(),
        "host c refused the corrupt blob and produced the entry itself"
    );
    assert_eq!(
        server.get(&name).as_deref(),
        Some(&b"\x7fELF cubin"[..]),
        "its upload repaired the blob"
    );
}

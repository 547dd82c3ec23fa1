//! Manifests: components, environment, serialisation, digests and diffs.

use fingerprint::{
    diff, Change, Component, Digest, Manifest, TreeComponents, TreeOptions, FORMAT_VERSION,
};

use crate::write;

#[test]
fn env_distinguishes_unset_from_empty() {
    // Names unique to this test, so no other test touches them.
    let unset = "FINGERPRINT_TEST_SURELY_UNSET_1";
    let empty = "FINGERPRINT_TEST_EMPTY_1";
    // SAFETY (std): set_var is only unsafe in edition 2024; this crate is edition 2021 and the
    // variable is private to this test.
    std::env::set_var(empty, "");
    let mut m = Manifest::new();
    m.insert_env(unset);
    m.insert_env(empty);
    let u = m
        .get(&format!("env:{unset}"))
        .expect("unset var is recorded");
    let e = m
        .get(&format!("env:{empty}"))
        .expect("empty var is recorded");
    assert_eq!(u.value, None, "unset has no value");
    assert_eq!(e.value.as_deref(), Some(""), "empty has an empty value");
    assert_ne!(u.digest, e.digest, "unset and empty hash differently");

    let mut n = m.clone();
    n.insert_value(format!("env:{unset}"), "-lineinfo");
    let reasons: Vec<String> = diff(&m, &n).iter().map(ToString::to_string).collect();
    assert_eq!(
        reasons,
        [format!("env `{unset}` changed (unset -> `-lineinfo`)")],
        "env changes read like cargo's reasons"
    );
}

#[test]
fn serde_round_trip_keeps_digest_and_components() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "include/tile.cuh", b"tile");
    let mut m = Manifest::new();
    m.insert_value("toolchain:nvcc", "13.5");
    m.insert_list("flags", &["-O3".to_owned(), "-arch=sm_90".to_owned()]);
    m.insert_bytes("build.ninja", b"rule cc");
    m.insert_file(
        "source:kernels/gemm.cu",
        &dir.path().join("include/tile.cuh"),
    )
    .expect("insert file");
    m.insert_tree(
        "header:include",
        &dir.path().join("include"),
        &TreeOptions::default(),
        None,
    )
    .expect("insert tree");
    let json = serde_json::to_string_pretty(&m).expect("serialise");
    let back: Manifest = serde_json::from_str(&json).expect("deserialise");
    assert_eq!(back, m, "round trip is lossless");
    assert_eq!(back.digest(), m.digest(), "and keeps the digest");
    assert!(
        diff(&m, &back).is_empty(),
        "no reasons between equal manifests"
    );
    assert_eq!(
        m.format_version(),
        FORMAT_VERSION,
        "made with the current version"
    );
    assert!(
        json.contains("\"header:include/tile.cuh\""),
        "per-file component is named name/relpath"
    );
}

#[test]
fn older_format_version_is_a_reason() {
    let m = Manifest::new();
    let mut v: serde_json::Value = serde_json::to_value(&m).expect("to value");
    v["format_version"] = serde_json::json!(0);
    let old: Manifest = serde_json::from_value(v).expect("from value");
    let reasons: Vec<String> = diff(&old, &m).iter().map(ToString::to_string).collect();
    assert_eq!(reasons.len(), 1, "one reason: {reasons:?}");
    assert!(
        reasons[0].contains("format_version"),
        "it names the format version: {reasons:?}"
    );
}

#[test]
fn digest_is_framed_per_component() {
    let mut a = Manifest::new();
    a.insert_value("ab", "c");
    let mut b = Manifest::new();
    b.insert_value("a", "bc");
    assert_ne!(
        a.digest(),
        b.digest(),
        "moving bytes between name and value changes the digest"
    );
    let mut l1 = Manifest::new();
    l1.insert_list("flags", &["-a b".to_owned()]);
    let mut l2 = Manifest::new();
    l2.insert_list("flags", &["-a".to_owned(), "b".to_owned()]);
    assert_ne!(l1.digest(), l2.digest(), "list items are framed");
    assert_ne!(
        Manifest::new().digest(),
        a.digest(),
        "a component changes the digest"
    );
}

#[test]
fn tree_entries_explain_exec_bit_and_content_changes() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "run.sh", b"#!/bin/sh\n");
    write(dir.path(), "tile.cuh", b"64");
    let take = || {
        let mut m = Manifest::new();
        m.insert_tree("source:tree", dir.path(), &TreeOptions::default(), None)
            .expect("tree");
        m
    };
    let old = take();
    std::fs::set_permissions(
        dir.path().join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod +x");
    write(dir.path(), "tile.cuh", b"128");
    let new = take();
    let changes = diff(&old, &new);
    let names: Vec<&str> = changes.iter().map(Change::name).collect();
    assert_eq!(
        names,
        ["source:tree", "source:tree/run.sh", "source:tree/tile.cuh"],
        "the tree and exactly the two touched files"
    );
    assert_eq!(
        changes[1].to_string(),
        "source `tree/run.sh` changed (`100644` -> `100755`)",
        "an exec-bit flip shows as a mode change"
    );
    assert!(
        changes[2]
            .to_string()
            .starts_with("source `tree/tile.cuh` changed (blake3 "),
        "content changes show digests: {}",
        changes[2]
    );

    let mut only = Manifest::new();
    let opts = TreeOptions::default().components(TreeComponents::TreeOnly);
    only.insert_tree("header:tree", dir.path(), &opts, None)
        .expect("tree only");
    assert_eq!(only.len(), 1, "TreeOnly records one component");
}

#[test]
fn components_can_be_inserted_directly() {
    let mut m = Manifest::new();
    m.insert(
        "toolchain:nvcc",
        Component {
            digest: Digest::of_bytes(b"nvcc"),
            value: Some("13.5".to_owned()),
        },
    );
    let got: Vec<(&str, &Component)> = m.iter().collect();
    assert_eq!(got.len(), 1, "one component");
    assert_eq!(got[0].0, "toolchain:nvcc", "under its name");
}

//! Property tests: random trees and random edits.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use fingerprint::{diff, hash_tree, Change, Manifest, StatCache, TreeOptions};
use proptest::prelude::*;

/// A tree as the test models it: relative path -> (content, executable).
type Model = BTreeMap<String, (Vec<u8>, bool)>;

fn path_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "k.cu", "t.cuh", "d"]),
        1..4,
    )
    .prop_map(|parts| parts.join("/"))
}

/// Drops paths that would need a file and a directory of the same name.
fn consistent(mut m: Model) -> Model {
    let keys: Vec<String> = m.keys().cloned().collect();
    for k in &keys {
        if keys.iter().any(|other| other.starts_with(&format!("{k}/"))) {
            m.remove(k);
        }
    }
    m
}

fn model_strategy() -> impl Strategy<Value = Model> {
    prop::collection::btree_map(
        path_strategy(),
        (prop::collection::vec(any::<u8>(), 0..64), any::<bool>()),
        0..10,
    )
    .prop_map(consistent)
}

#[derive(Clone, Debug)]
enum Edit {
    Rewrite(usize, Vec<u8>),
    FlipByte(usize, usize),
    ToggleExec(usize),
    Remove(usize),
    Add(String, Vec<u8>),
    Rename(usize, String),
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(i, c)| Edit::Rewrite(i, c)),
        (any::<usize>(), any::<usize>()).prop_map(|(i, j)| Edit::FlipByte(i, j)),
        any::<usize>().prop_map(Edit::ToggleExec),
        any::<usize>().prop_map(Edit::Remove),
        (path_strategy(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(p, c)| Edit::Add(p, c)),
        (any::<usize>(), path_strategy()).prop_map(|(i, p)| Edit::Rename(i, p)),
    ]
}

fn apply(model: &Model, edits: &[Edit]) -> Model {
    let mut m = model.clone();
    for e in edits {
        let keys: Vec<String> = m.keys().cloned().collect();
        let pick = |i: usize| (!keys.is_empty()).then(|| keys[i % keys.len()].clone());
        match e {
            Edit::Rewrite(i, c) => {
                if let Some(k) = pick(*i) {
                    if let Some(v) = m.get_mut(&k) {
                        v.0 = c.clone();
                    }
                }
            }
            Edit::FlipByte(i, j) => {
                if let Some(k) = pick(*i) {
                    if let Some(v) = m.get_mut(&k) {
                        if !v.0.is_empty() {
                            let n = v.0.len();
                            v.0[*j % n] ^= 1;
                        }
                    }
                }
            }
            Edit::ToggleExec(i) => {
                if let Some(k) = pick(*i) {
                    if let Some(v) = m.get_mut(&k) {
                        v.1 = !v.1;
                    }
                }
            }
            Edit::Remove(i) => {
                if let Some(k) = pick(*i) {
                    m.remove(&k);
                }
            }
            Edit::Add(p, c) => {
                m.insert(p.clone(), (c.clone(), false));
            }
            Edit::Rename(i, p) => {
                if let Some(k) = pick(*i) {
                    if let Some(v) = m.remove(&k) {
                        m.insert(p.clone(), v);
                    }
                }
            }
        }
        m = consistent(m);
    }
    m
}

fn materialise(root: &Path, m: &Model) {
    for (rel, (content, exec)) in m {
        crate::write(root, rel, content);
        let mode = if *exec { 0o755 } else { 0o644 };
        std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(mode))
            .expect("chmod");
    }
}

fn manifest(root: &Path, cache: Option<&mut StatCache>) -> Manifest {
    let mut m = Manifest::new();
    m.insert_tree("source:t", root, &TreeOptions::default(), cache)
        .expect("insert tree");
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn digest_equal_iff_content_equal_and_diff_names_exactly_the_changes(
        model in model_strategy(),
        edits in prop::collection::vec(edit_strategy(), 0..4),
    ) {
        let edited = apply(&model, &edits);
        let a = tempfile::tempdir().expect("temp dir");
        let b = tempfile::tempdir().expect("temp dir");
        materialise(a.path(), &model);
        materialise(b.path(), &edited);
        let mut cache = StatCache::new();
        let ta = hash_tree(a.path(), &TreeOptions::default(), Some(&mut cache)).expect("hash a");
        let tb = hash_tree(b.path(), &TreeOptions::default(), None).expect("hash b");
        prop_assert_eq!(ta.digest == tb.digest, model == edited, "digest equal iff content equal");

        let ma = manifest(a.path(), Some(&mut cache));
        let mb = manifest(b.path(), None);
        let changed: BTreeSet<String> = diff(&ma, &mb).iter().map(|c: &Change| c.name().to_owned()).collect();
        let mut expected = BTreeSet::new();
        for k in model.keys().chain(edited.keys()) {
            if model.get(k) != edited.get(k) {
                expected.insert(format!("source:t/{k}"));
            }
        }
        if model != edited {
            expected.insert("source:t".to_owned());
        }
        // The tree component's value counts entries; it changes exactly when the digest does.
        prop_assert_eq!(changed, expected, "diff names exactly the changed components");
    }
}

//! A pack's import on the power-loss filesystem, cut after every operation in turn: an import
//! that returned `Ok` lost none of its entries, and at every cut each visible entry is whole
//! (`verify` finds nothing torn).

use jit_cache::store::{Claim, Namespace, Store};
use jit_cache::{Cache, CacheOptions, PackFilter, Sharing};
use powercut_fs::{CutMode, Options, PowercutMount};
use std::path::Path;
use std::time::Duration;

use crate::util::{payload, wipe};

const ENTRIES: usize = 5;

fn key(i: usize) -> String {
    format!("entry-{i}")
}

fn files(i: usize) -> Vec<(String, Vec<u8>)> {
    vec![
        ("a.bin".to_string(), payload(i as u8 + 1, 700 + 300 * i)),
        ("b.json".to_string(), format!("{{\"i\": {i}}}").into_bytes()),
    ]
}

/// The pack, made from a root on a real filesystem outside the mount.
fn make_pack(dir: &Path) -> std::path::PathBuf {
    let source = dir.join("source");
    let store = Store::open(&source).expect("open source store");
    let ns = Namespace::new("packed").expect("namespace");
    for i in 0..ENTRIES {
        let Claim::Produce(producer) = store
            .begin(&ns, &key(i), Duration::from_secs(60))
            .expect("begin")
        else {
            panic!("entry {i} existed");
        };
        for (name, bytes) in files(i) {
            producer.write(&name, &bytes).expect("write");
        }
        producer.commit().expect("commit");
    }
    let pack = dir.join("entries.pack");
    let cache = Cache::open(&source).expect("open source");
    cache
        .export_pack(&pack, &PackFilter::default())
        .expect("export");
    pack
}

/// The root on the mount, local: one host uses it. (Under the shared protocol, which FUSE would
/// choose, the staging heartbeat thread may touch a path at the instant of the cut, and the
/// unmount then finds the filesystem busy.)
fn open(root: &Path) -> jit_cache::Result<Cache> {
    Cache::open_with(root, CacheOptions::default().sharing(Sharing::Local))
}

/// A fresh, durable, empty cache root on the mount.
fn start(mount: &mut PowercutMount, root: &Path) {
    mount.set_cut_mode(CutMode::DropUnsynced);
    wipe(mount.root()).expect("wipe");
    drop(open(root).expect("open the root"));
    mount.power_cut().expect("cut after the setup");
}

/// Imports, returning whether the import reported success.
fn import(root: &Path, pack: &Path) -> bool {
    open(root)
        .and_then(|cache| cache.import_pack(pack))
        .is_ok_and(|report| report.imported == ENTRIES)
}

/// Every entry whole, or (unless `reported`) absent; verify finds nothing torn.
fn check(root: &Path, reported: bool, at: &str) -> usize {
    let cache = open(root).unwrap_or_else(|e| panic!("{at}: open after the cut: {e}"));
    let verified = cache.verify().expect("verify");
    assert!(
        verified.corrupt.is_empty() && verified.corrupt_pinned.is_empty(),
        "{at}: a torn entry is visible: {verified:?}"
    );
    let store = cache.store().expect("store");
    let ns = Namespace::new("packed").expect("namespace");
    let mut present = 0;
    for i in 0..ENTRIES {
        match store.get(&ns, &key(i)).expect("get") {
            Some(entry) => {
                for (name, bytes) in files(i) {
                    assert_eq!(
                        entry.read(&name).expect("read"),
                        bytes,
                        "{at}: entry {i} whole"
                    );
                }
                present += 1;
            }
            None => assert!(
                !reported,
                "{at}: entry {i} lost after the import reported it"
            ),
        }
    }
    present
}

#[test]
fn heavy_a_pack_import_cut_at_every_operation_loses_nothing_it_reported() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let outside = tempfile::tempdir().expect("temp dir");
        let pack = make_pack(outside.path());
        let root = mount.root().join("cache");
        start(mount, &root);
        assert!(import(&root, &pack), "the import succeeds without a cut");
        let length = mount.operations_since_cut();
        mount.power_cut().expect("cut after the dry run");
        assert_eq!(check(&root, true, "dry run"), ENTRIES);
        let (mut reported, mut partial) = (0, 0);
        for mode in [
            CutMode::DropUnsynced,
            CutMode::RandomSubset { seed: 3 },
            CutMode::TornWrites { seed: 5 },
        ] {
            for k in 1..=length {
                start(mount, &root);
                mount.set_cut_mode(mode);
                mount.arm_cut_after(k);
                let ok = import(&root, &pack);
                let report = mount
                    .power_cut()
                    .unwrap_or_else(|e| panic!("{mode:?}, cut after operation {k}: {e}"));
                assert!(report.armed_cut_fired, "the cut after operation {k} fired");
                let present = check(&root, ok, &format!("{mode:?}, cut after operation {k}"));
                reported += usize::from(ok);
                partial += usize::from(present > 0 && present < ENTRIES);
            }
        }
        assert!(
            length > 20,
            "every step of the import is a crash point: {length}"
        );
        assert!(
            partial + reported > 0,
            "some cuts came after entries were durable"
        );
    });
}

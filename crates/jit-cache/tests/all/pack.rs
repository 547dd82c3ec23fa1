//! Kernel packs: export then import into a fresh root (stored entries, and kernels with the real
//! nvcc: hits, no compile), the same bytes for the same entries, refusal of a pack truncated at
//! every block boundary or with any byte flipped (with the offset, publishing nothing), and
//! kernels whose recorded inputs differ here skipped.

use crate::support::{kernel_text, open_cache};
use jit_cache::store::{Claim, Namespace, Store};
use jit_cache::{
    Cache, Error, KernelSpec, Outcome, OutputKind, PackEntryKind, PackFilter, PackKind,
};
use std::path::Path;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);
const BLOCK: usize = 4096;

/// Stored entries made: each key with its files (name, bytes).
type Made = Vec<(String, Vec<(String, Vec<u8>)>)>;

/// Stored entries of several shapes: empty files, files of a block exactly, files over one.
fn fill_store(root: &Path) -> Made {
    let store = Store::open(root).expect("open store");
    let ns = Namespace::new("triton").expect("namespace");
    let mut made = Vec::new();
    for (i, sizes) in [vec![0usize, 10], vec![BLOCK], vec![BLOCK + 1, 3, 700]]
        .into_iter()
        .enumerate()
    {
        let key = format!("key-{i}");
        let files: Vec<(String, Vec<u8>)> = sizes
            .iter()
            .enumerate()
            .map(|(j, n)| (format!("f{j}.bin"), vec![(i * 7 + j + 1) as u8; *n]))
            .collect();
        match store.begin(&ns, &key, WAIT).expect("begin") {
            Claim::Produce(producer) => {
                for (name, bytes) in &files {
                    producer.write(name, bytes).expect("write");
                }
                producer.commit().expect("commit");
            }
            Claim::Ready(_) => panic!("{key} was not there yet"),
        }
        made.push((key, files));
    }
    made
}

fn assert_stored(root: &Path, made: &Made) {
    let store = Store::open(root).expect("open store");
    let ns = Namespace::new("triton").expect("namespace");
    for (key, files) in made {
        let entry = store
            .get(&ns, key)
            .expect("get")
            .unwrap_or_else(|| panic!("{key} was imported"));
        for (name, bytes) in files {
            assert_eq!(
                &entry.read(name).expect("read"),
                bytes,
                "{key}/{name} whole"
            );
        }
    }
}

#[test]
fn stored_entries_round_trip_and_the_same_entries_give_the_same_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let made = fill_store(&dir.path().join("a"));
    let a = Cache::open(dir.path().join("a")).expect("open a");
    let (one, two) = (dir.path().join("one.pack"), dir.path().join("two.pack"));
    let report = a.export_pack(&one, &PackFilter::default()).expect("export");
    assert_eq!(report.entries, 3, "every entry exported");
    assert!(report.skipped_damaged.is_empty());
    a.export_pack(&two, &PackFilter::default())
        .expect("export again");
    assert_eq!(
        std::fs::read(&one).expect("read one"),
        std::fs::read(&two).expect("read two"),
        "the same entries give the same bytes"
    );
    assert_eq!(report.bytes % BLOCK as u64, 0, "the pack is whole blocks");

    let listed = jit_cache::list_pack(&one).expect("ls");
    assert_eq!(listed.len(), 3);
    assert!(listed
        .iter()
        .all(|e| e.kind == PackEntryKind::Stored && e.name.starts_with("triton/")));

    let b = Cache::open(dir.path().join("b")).expect("open b");
    let imported = b.import_pack(&one).expect("import");
    assert_eq!(
        (imported.imported, imported.present),
        (3, 0),
        "{imported:?}"
    );
    assert_stored(&dir.path().join("b"), &made);
    let again = b.import_pack(&one).expect("import again");
    assert_eq!(
        (again.imported, again.present),
        (0, 3),
        "a second import replaces nothing"
    );
    let verified = b.verify().expect("verify");
    assert_eq!(verified.checked, 3, "imported entries are ordinary entries");
    assert!(verified.corrupt.is_empty(), "{:?}", verified.corrupt);

    let gc = b
        .gc(jit_cache::GcPolicy {
            max_bytes: Some(0),
            max_age: None,
        })
        .expect("gc");
    assert_eq!(gc.evicted, 3, "gc evicts imported entries as any other");

    // Under the shared protocol (another host may use the root) the same import holds.
    let shared = Cache::open_with(
        dir.path().join("shared"),
        jit_cache::CacheOptions::default().sharing(jit_cache::Sharing::Shared),
    )
    .expect("open shared root");
    let imported = shared.import_pack(&one).expect("import into a shared root");
    assert_eq!(imported.imported, 3, "{imported:?}");
    assert_stored(&dir.path().join("shared"), &made);

    let only = a
        .export_pack(
            dir.path().join("only.pack"),
            &PackFilter::default().name("triton/key-1"),
        )
        .expect("export one");
    assert_eq!(only.entries, 1, "the name glob chooses");
    let none = a
        .export_pack(
            dir.path().join("none.pack"),
            &PackFilter::default().kind(PackKind::Kernel(OutputKind::Cubin)),
        )
        .expect("export no kernels");
    assert_eq!(none.entries, 0, "the kind chooses");
}

/// The refusal's offset, or a panic saying what was accepted.
fn refused_at(cache: &Cache, pack: &Path, what: &str) -> (u64, Option<String>) {
    match cache.import_pack(pack) {
        Err(Error::Pack { offset, entry, .. }) => (offset, entry),
        Err(other) => panic!("{what}: refused without an offset: {other}"),
        Ok(report) => panic!("{what}: accepted: {report:?}"),
    }
}

#[test]
fn a_pack_truncated_at_any_block_boundary_is_refused_and_publishes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    fill_store(&dir.path().join("a"));
    let a = Cache::open(dir.path().join("a")).expect("open a");
    let pack = dir.path().join("a.pack");
    a.export_pack(&pack, &PackFilter::default())
        .expect("export");
    let bytes = std::fs::read(&pack).expect("read pack");
    let b = Cache::open(dir.path().join("b")).expect("open b");
    let cut = dir.path().join("cut.pack");
    for len in (0..bytes.len()).step_by(BLOCK) {
        std::fs::write(&cut, &bytes[..len]).expect("write truncated pack");
        let (offset, _) = refused_at(&b, &cut, &format!("truncated at {len}"));
        assert!(
            offset <= len as u64,
            "the offset {offset} is inside the {len} bytes left"
        );
    }
    assert!(
        b.entries().expect("entries").is_empty(),
        "nothing was published"
    );
}

#[test]
fn a_byte_flipped_anywhere_is_refused_with_its_offset_and_publishes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    fill_store(&dir.path().join("a"));
    let a = Cache::open(dir.path().join("a")).expect("open a");
    let pack = dir.path().join("a.pack");
    a.export_pack(&pack, &PackFilter::default())
        .expect("export");
    let bytes = std::fs::read(&pack).expect("read pack");
    let b = Cache::open(dir.path().join("b")).expect("open b");
    let flipped = dir.path().join("flipped.pack");
    let mut named = 0;
    // Every region: the header's fields and padding, each file and its padding, the index and
    // the zeros after it (every file and the index fit in one block here).
    for at in (0..bytes.len()).step_by(13).chain([bytes.len() - 1]) {
        let mut copy = bytes.clone();
        copy[at] ^= 0x20;
        std::fs::write(&flipped, &copy).expect("write flipped pack");
        let (offset, entry) = refused_at(&b, &flipped, &format!("byte {at} flipped"));
        assert!(
            offset <= at as u64 && offset / BLOCK as u64 == (at / BLOCK) as u64,
            "byte {at} flipped: refused at {offset}, in its own block"
        );
        named += usize::from(entry.is_some());
    }
    assert!(named > 0, "damage inside an entry names the entry");
    assert!(
        b.entries().expect("entries").is_empty(),
        "nothing was published"
    );
}

fn three_kernels() -> Vec<KernelSpec> {
    (0..3)
        .map(|n| KernelSpec::from_text(format!("pk{n}"), format!("pk{n}.cu"), kernel_text(n + 40)))
        .collect()
}

#[test]
fn kernels_exported_then_imported_into_a_fresh_root_are_hits_without_a_compile() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = open_cache(&dir.path().join("a"));
    for spec in three_kernels() {
        assert_eq!(
            a.get_or_build(&spec).expect("build").outcome,
            Outcome::Built
        );
    }
    let pack = dir.path().join("kernels.pack");
    let exported = a
        .export_pack(&pack, &PackFilter::default().arch("sm_90"))
        .expect("export");
    assert_eq!(exported.entries, 3);
    let listed = jit_cache::list_pack(&pack).expect("ls");
    assert!(
        listed
            .iter()
            .all(|e| e.toolchain.is_some() && e.output.as_deref() == Some("cubin")),
        "{listed:?}"
    );
    let b = open_cache(&dir.path().join("b"));
    let imported = b.import_pack(&pack).expect("import");
    assert_eq!(imported.imported, 3, "{imported:?}");
    assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
    for spec in three_kernels() {
        let answer = b.get_or_build(&spec).expect("get");
        assert_eq!(
            answer.outcome,
            Outcome::Hit,
            "{} is a hit: no compile",
            spec.name
        );
    }
    let verified = b.verify().expect("verify");
    assert_eq!((verified.checked, verified.corrupt.len()), (3, 0));
}

#[test]
fn a_kernel_whose_installed_header_differs_here_is_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let header = dir.path().join("installed").join("tile.cuh");
    std::fs::create_dir_all(header.parent().expect("parent")).expect("mkdir");
    std::fs::write(&header, "#define TILE 4.0f\n").expect("header");
    let spec = || {
        KernelSpec::from_text(
            "tiled",
            "tiled.cu",
            format!(
                "#include \"{}\"\nextern \"C\" __global__ void tiled(float* x) {{ x[0] = TILE; }}\n",
                header.display()
            ),
        )
    };
    let a = open_cache(&dir.path().join("a"));
    a.get_or_build(&spec()).expect("build");
    let pack = dir.path().join("tiled.pack");
    a.export_pack(&pack, &PackFilter::default())
        .expect("export");
    std::fs::write(&header, "#define TILE 5.0f\n").expect("edit header");
    let b = open_cache(&dir.path().join("b"));
    let report = b.import_pack(&pack).expect("import");
    assert_eq!(report.imported, 0, "{report:?}");
    assert_eq!(report.skipped.len(), 1, "skipped and counted: {report:?}");
    assert!(
        report.skipped[0].1.contains("inputs differ"),
        "skipped for its header: {report:?}"
    );
    assert!(b.entries().expect("entries").is_empty(), "never served");
    std::fs::write(&header, "#define TILE 4.0f\n").expect("restore header");
    let report = b.import_pack(&pack).expect("import again");
    assert_eq!(
        report.imported, 1,
        "the same header again: imported ({report:?})"
    );
    assert_eq!(b.get_or_build(&spec()).expect("get").outcome, Outcome::Hit);
}

#[test]
fn an_empty_pack_round_trips_and_a_foreign_file_is_refused_at_offset_zero() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = Cache::open(dir.path().join("a")).expect("open a");
    let pack = dir.path().join("empty.pack");
    let report = a
        .export_pack(&pack, &PackFilter::default())
        .expect("export");
    assert_eq!(
        (report.entries, report.bytes),
        (0, 2 * BLOCK as u64),
        "a header and an index"
    );
    assert!(jit_cache::list_pack(&pack).expect("ls").is_empty());
    let imported = a.import_pack(&pack).expect("import");
    assert_eq!((imported.entries, imported.imported), (0, 0));

    let foreign = dir.path().join("foreign.pack");
    std::fs::write(&foreign, vec![7u8; 3 * BLOCK]).expect("write");
    match jit_cache::list_pack(&foreign) {
        Err(Error::Pack { offset, reason, .. }) => {
            assert_eq!(offset, 0, "{reason}");
            assert!(reason.contains("not a jit-cache pack"), "{reason}");
        }
        other => panic!("a foreign file is refused: {other:?}"),
    }
    let message = a.import_pack(&foreign).expect_err("refused").to_string();
    assert!(
        message.contains(&foreign.display().to_string()) && message.contains("offset 0"),
        "the message names the pack and the offset: {message}"
    );
}

/// Every `meta.json` of a root's entries, with its path.
fn metas(root: &Path) -> Vec<(std::path::PathBuf, serde_json::Value)> {
    let mut found = Vec::new();
    let entries = root.join(jit_cache::FORMAT_DIR).join("entries");
    for shard in std::fs::read_dir(&entries).expect("entries").flatten() {
        for key in std::fs::read_dir(shard.path()).expect("shard").flatten() {
            for variant in std::fs::read_dir(key.path()).expect("key").flatten() {
                let path = variant.path().join("meta.json");
                if let Ok(text) = std::fs::read(&path) {
                    found.push((
                        path,
                        serde_json::from_slice(&text).expect("meta.json is JSON"),
                    ));
                }
            }
        }
    }
    found
}

/// Moves an entry directory to the key directory `key` (hex), as a forger relabelling it would.
fn move_to_key(root: &Path, variant_dir: &Path, key: &str) -> std::path::PathBuf {
    let key_dir = root
        .join(jit_cache::FORMAT_DIR)
        .join("entries")
        .join(&key[..2])
        .join(key);
    std::fs::create_dir_all(&key_dir).expect("key dir");
    let to = key_dir.join(variant_dir.file_name().expect("variant"));
    std::fs::rename(variant_dir, &to).expect("move the entry");
    to
}

fn write_json(path: &Path, value: &serde_json::Value) {
    std::fs::write(path, serde_json::to_vec(value).expect("json")).expect("write meta.json");
}

/// Issue 31, item 1: a stored entry whose `meta.json` digest is not blake3(namespace, key) was
/// published at the address its namespace and key name, reported imported, and left corrupt
/// there; one naming an invalid namespace failed the whole import with `InvalidStoreKey`. Both
/// are now refused as damage naming the entry, and nothing is published.
#[test]
fn a_stored_entry_whose_digest_or_namespace_is_forged_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("a");
    fill_store(&root);
    let (path, mut meta) = metas(&root)
        .into_iter()
        .find(|(_, m)| m["key"] == "key-0")
        .expect("key-0's meta.json");
    let forged = "ab".repeat(32);
    meta["digest"] = serde_json::Value::String(forged.clone());
    write_json(&path, &meta);
    move_to_key(&root, path.parent().expect("entry dir"), &forged);
    let a = Cache::open(&root).expect("open a");
    let pack = dir.path().join("forged.pack");
    a.export_pack(&pack, &PackFilter::default().name("triton/key-0"))
        .expect("export");
    let b = Cache::open(dir.path().join("b")).expect("open b");
    let (_, entry) = refused_at(&b, &pack, "a digest that is not blake3(namespace, key)");
    assert!(
        entry.is_some_and(|e| e.contains("key-0")),
        "the refusal names the entry"
    );
    assert!(
        b.entries().expect("entries").is_empty(),
        "nothing published"
    );

    // The same entry naming a namespace no store accepts.
    let (path, mut meta) = metas(&root)
        .into_iter()
        .find(|(_, m)| m["key"] == "key-0")
        .expect("key-0's meta.json");
    meta["namespace"] = serde_json::Value::String("Not A Namespace".into());
    write_json(&path, &meta);
    a.export_pack(&pack, &PackFilter::default().name("*key-0"))
        .expect("export");
    match b.import_pack(&pack) {
        Err(Error::Pack { entry, reason, .. }) => {
            assert!(entry.is_some(), "names the entry: {reason}");
            assert!(reason.contains("namespace"), "{reason}");
        }
        other => panic!("an invalid namespace is the pack's damage, not {other:?}"),
    }
}

/// Issue 31, item 1: a kernel entry relabelled with another kernel's key (its `meta.json`'s key,
/// slot and name, its directory moved) was imported and served for that kernel: a hit with the
/// other kernel's artifact. The key is now the digest of the recorded manifest and the slot
/// that of the recorded name, kind and arches, or the pack is refused.
#[test]
fn a_kernel_relabelled_with_another_kernels_key_is_refused_never_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = open_cache(&dir.path().join("a"));
    let specs = three_kernels();
    for spec in &specs[..2] {
        a.get_or_build(spec).expect("build");
    }
    let root = dir.path().join("a").join("cache");
    let all = metas(&root);
    let of = |name: &str| {
        all.iter()
            .find(|(_, m)| m["name"] == name)
            .cloned()
            .expect("the kernel's meta.json")
    };
    let ((a_path, mut a_meta), (b_path, b_meta)) = (of("pk0"), of("pk1"));
    // pk1's own entry goes; pk0's takes its key, slot and name.
    std::fs::remove_dir_all(b_path.parent().expect("pk1's entry")).expect("remove pk1");
    for field in ["key", "slot", "name"] {
        a_meta[field] = b_meta[field].clone();
    }
    write_json(&a_path, &a_meta);
    let key = b_meta["key"].as_str().expect("hex key").to_string();
    move_to_key(&root, a_path.parent().expect("pk0's entry"), &key);
    let pack = dir.path().join("relabelled.pack");
    a.export_pack(&pack, &PackFilter::default())
        .expect("export");
    let b = open_cache(&dir.path().join("b"));
    let imported = b.import_pack(&pack);
    assert!(
        matches!(imported, Err(Error::Pack { entry: Some(_), .. })),
        "a key that is not its manifest's digest is refused: {imported:?}"
    );
    let answer = b.get_or_build(&specs[1]).expect("build pk1");
    assert_eq!(
        answer.outcome,
        Outcome::Built,
        "pk1 is compiled, never pk0's artifact"
    );
}

#[test]
fn a_compiler_record_naming_another_kernels_headers_is_not_imported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir src");
    for (name, n) in [("ra", 1), ("rb", 2)] {
        std::fs::write(
            src.join(format!("{name}.cuh")),
            format!("#define SCALE_{n} {n}.0f\n"),
        )
        .expect("write header");
        std::fs::write(
            src.join(format!("{name}.cu")),
            format!(
                "#include \"{name}.cuh\"\nextern \"C\" __global__ void {name}(float *x) {{ x[0] *= SCALE_{n}; }}\n"
            ),
        )
        .expect("write source");
    }
    let spec = |name: &str| {
        KernelSpec::from_file(src.join(format!("{name}.cu")))
            .name(name)
            .arches(["sm_90"])
    };
    let a = open_cache(&dir.path().join("a"));
    let (_, ra_record) = a.get_or_build_with_record(&spec("ra")).expect("build ra");
    let (_, rb_record) = a.get_or_build_with_record(&spec("rb")).expect("build rb");
    assert!(
        ra_record.is_some() && rb_record.is_some(),
        "builds keep a record"
    );
    // ra's entry gets rb's record: a dependency file of another compile's headers.
    let root = dir.path().join("a").join("cache");
    let all = metas(&root);
    let entry_of = |name: &str| {
        all.iter()
            .find(|(_, m)| m["name"] == name)
            .map(|(p, _)| p.parent().expect("entry dir").to_path_buf())
            .expect("the kernel's entry")
    };
    std::fs::copy(
        entry_of("rb").join("compiler.json"),
        entry_of("ra").join("compiler.json"),
    )
    .expect("swap the record");
    let pack = dir.path().join("records.pack");
    a.export_pack(&pack, &PackFilter::default())
        .expect("export");
    let b = open_cache(&dir.path().join("b"));
    let imported = b.import_pack(&pack).expect("import");
    assert_eq!(imported.imported, 2, "{imported:?}");
    let (answer, record) = b.get_or_build_with_record(&spec("ra")).expect("get ra");
    assert_eq!(answer.outcome, Outcome::Hit, "ra's artifact is imported");
    let names: Vec<String> = record
        .iter()
        .flat_map(|r| r.prerequisites.iter().map(|p| p.path.display().to_string()))
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with("rb.cuh")),
        "ra's record never names rb's header: {names:?}"
    );
    let (_, record) = b.get_or_build_with_record(&spec("rb")).expect("get rb");
    assert!(
        record.is_some_and(|r| r.prerequisites.iter().any(|p| p.path.ends_with("rb.cuh"))),
        "rb's own record is imported"
    );
}

/// Issue 31, item 6: an entry larger than a chunk (64 MiB) is streamed, piece by piece, with
/// the same checks as one read whole: a byte flipped in its file (first, middle and last
/// pieces) or in the padding after a file is refused naming the entry, padding at its exact
/// offset, and nothing is published; the pack unflipped imports the entry whole.
#[test]
fn heavy_an_entry_larger_than_a_chunk_is_streamed_with_every_check() {
    // On the default temp dir its files are written; on xfs they are cloned from a private
    // copy of the entry that the streamed checks read (issue 33).
    for kind in [fs_testbed::FsKind::DefaultTmp, fs_testbed::FsKind::Xfs] {
        fs_testbed::run_or_skip(kind, |dir| {
            streamed_with_every_check(dir, kind == fs_testbed::FsKind::Xfs)
        });
    }
}

fn streamed_with_every_check(dir: &Path, shares: bool) {
    const BIG: usize = (64 << 20) + 5000;
    let root = dir.join("a");
    let store = Store::open(&root).expect("open store");
    let ns = Namespace::new("torch").expect("namespace");
    let big: Vec<u8> = (0..BIG)
        .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
        .collect();
    let small = b"a small file after the big one".to_vec();
    match store.begin(&ns, "big", WAIT).expect("begin") {
        Claim::Produce(producer) => {
            producer.write("a.bin", &big).expect("write");
            producer.write("b.bin", &small).expect("write");
            producer.commit().expect("commit");
        }
        Claim::Ready(_) => panic!("the entry was not there yet"),
    }
    let a = Cache::open(&root).expect("open a");
    let pack = dir.join("a.pack");
    a.export_pack(&pack, &PackFilter::default())
        .expect("export");
    let bytes = std::fs::read(&pack).expect("read pack");
    // The layout: the big file at the first block, the next file at the block after its end.
    let a_at = BLOCK;
    let b_at = a_at + BIG.div_ceil(BLOCK) * BLOCK;
    assert_eq!(&bytes[a_at..a_at + 16], &big[..16], "a.bin opens the data");
    assert_eq!(
        &bytes[b_at..b_at + small.len()],
        &small[..],
        "b.bin follows"
    );
    let b = Cache::open(dir.join("b")).expect("open b");
    let flipped = dir.join("flipped.pack");
    let in_file = [a_at, a_at + (40 << 20) + 17, a_at + BIG - 1, b_at + 3];
    let in_padding = [a_at + BIG, b_at - 1, b_at + small.len()];
    for at in in_file.into_iter().chain(in_padding) {
        let mut copy = bytes.clone();
        copy[at] ^= 0x20;
        std::fs::write(&flipped, &copy).expect("write flipped pack");
        let (offset, entry) = refused_at(&b, &flipped, &format!("byte {at} flipped"));
        assert!(entry.is_some(), "byte {at}: the entry is named");
        if in_padding.contains(&at) {
            assert_eq!(offset, at as u64, "padding is refused at the byte");
        } else {
            assert!(offset <= at as u64, "byte {at}: refused at {offset}");
        }
        assert!(
            b.entries().expect("entries").is_empty(),
            "byte {at}: nothing was published"
        );
        let staged = std::fs::read_dir(dir.join("b/v2/staging"))
            .expect("list staging")
            .count();
        assert_eq!(
            staged, 0,
            "byte {at}: the streamed files are not left staged"
        );
    }
    let report = b.import_pack(&pack).expect("import the pack as exported");
    assert_eq!(report.imported, 1, "{report:?}");
    let expected_shared = if shares { BIG as u64 } else { 0 };
    assert_eq!(report.bytes_shared, expected_shared, "{report:?}");
    let entry = Store::open(dir.join("b"))
        .expect("open b's store")
        .get(&ns, "big")
        .expect("get")
        .expect("the entry was imported");
    assert!(
        entry.read("a.bin").expect("read a.bin") == big,
        "a.bin whole"
    );
    assert_eq!(
        entry.read("b.bin").expect("read b.bin"),
        small,
        "b.bin whole"
    );
}

/// Issue 33: on xfs and btrfs an import shares the pack's extents (`FICLONERANGE`) rather than
/// writing the entries' bytes (the filesystem's free space barely moves), checks what it shares
/// (a byte flipped in a shared file is refused, nothing published), and the entries read back
/// whole and pass `verify`; on ext4 it writes them and says why.
#[test]
fn an_import_shares_the_packs_extents_where_the_filesystem_can_and_says_why_where_not() {
    use fs_testbed::FsKind;
    const BIG: usize = 1 << 20;
    for kind in [FsKind::Xfs, FsKind::Btrfs, FsKind::Ext4] {
        fs_testbed::run_or_skip(kind, |mount| {
            let fs = kind.name();
            let root = mount.join("a");
            let store = Store::open(&root).expect("open store");
            let ns = Namespace::new("triton").expect("namespace");
            let mut made: Made = Vec::new();
            for i in 0..4u8 {
                let key = format!("key-{i}");
                let files = vec![
                    (
                        "big.bin".to_string(),
                        (0..BIG + 100 * i as usize)
                            .map(|j| (j % 253) as u8 ^ i)
                            .collect::<Vec<u8>>(),
                    ),
                    ("small.json".to_string(), vec![b'{', i, b'}']),
                ];
                let Claim::Produce(producer) = store.begin(&ns, &key, WAIT).expect("begin") else {
                    panic!("{key} was not there yet");
                };
                for (name, bytes) in &files {
                    producer.write(name, bytes).expect("write");
                }
                producer.commit().expect("commit");
                made.push((key, files));
            }
            let a = Cache::open(&root).expect("open a");
            let pack = mount.join("a.pack");
            a.export_pack(&pack, &PackFilter::default())
                .expect("export");
            let big_bytes: u64 = made.iter().map(|(_, f)| f[0].1.len() as u64).sum();

            // A byte flipped inside a shared file: refused, nothing published.
            let mut flipped = std::fs::read(&pack).expect("read the pack");
            let at = flipped
                .windows(64)
                .position(|w| w == &made[2].1[0].1[1000..1064])
                .expect("key-2's big file is in the pack")
                + 10;
            flipped[at] ^= 1;
            let damaged = mount.join("damaged.pack");
            std::fs::write(&damaged, &flipped).expect("write the damaged pack");
            let b_root = mount.join("b");
            let b = Cache::open(&b_root).expect("open b");
            match b.import_pack(&damaged) {
                Err(Error::Pack { entry, .. }) => assert!(entry.is_some(), "{fs}: names it"),
                other => panic!("{fs}: a flipped byte was not refused: {other:?}"),
            }
            assert!(
                b.entries().expect("entries").is_empty(),
                "{fs}: nothing of the damaged chunk was published"
            );

            let free = || {
                let _ = rustix::fs::syncfs(std::fs::File::open(mount).expect("open mount"));
                let s = rustix::fs::statvfs(mount).expect("statvfs");
                s.f_bfree * s.f_frsize
            };
            let before = free();
            let report = b.import_pack(&pack).expect("import");
            let used = before.saturating_sub(free());
            assert_eq!(report.imported, 4, "{fs}: {report:?}");
            assert_stored(&b_root, &made);
            let verified = b.verify().expect("verify");
            assert!(verified.corrupt.is_empty(), "{fs}: {:?}", verified.corrupt);
            if kind == FsKind::Ext4 {
                assert_eq!(report.bytes_shared, 0, "{fs}: {report:?}");
                let why = report.not_shared.as_deref().unwrap_or_default();
                assert!(why.contains("does not share extents"), "{fs}: {report:?}");
                assert!(used >= big_bytes, "{fs}: {used} bytes written");
            } else {
                assert_eq!(report.bytes_shared, big_bytes, "{fs}: {report:?}");
                assert_eq!(report.not_shared, None, "{fs}: {report:?}");
                assert!(
                    used < big_bytes / 4,
                    "{fs}: {used} bytes of space used to import {big_bytes} bytes of shared files"
                );
            }
        });
    }
}

/// Issue 33: the next chunk is read and checked in a thread while the one before is published.
/// Damage in the second chunk still refuses the pack naming the entry: every entry of the first
/// chunk (256 entries) is published whole, none of the second.
#[test]
fn damage_in_a_later_chunk_refuses_the_pack_after_the_chunks_before_it_are_published() {
    const ENTRIES: usize = 300;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("a")).expect("open store");
    let ns = Namespace::new("triton").expect("namespace");
    let payload = |key: &str| format!("payload of {key}, unique in the pack").into_bytes();
    for i in 0..ENTRIES {
        let key = format!("key-{i:03}");
        let Claim::Produce(producer) = store.begin(&ns, &key, WAIT).expect("begin") else {
            panic!("{key} was not there yet");
        };
        producer.write("f.bin", &payload(&key)).expect("write");
        producer.commit().expect("commit");
    }
    let a = Cache::open(dir.path().join("a")).expect("open a");
    let pack = dir.path().join("a.pack");
    a.export_pack(&pack, &PackFilter::default())
        .expect("export");
    // The pack's order: the first 256 entries make the first chunk.
    let keys: Vec<String> = jit_cache::list_pack(&pack)
        .expect("ls")
        .into_iter()
        .map(|e| e.name.trim_start_matches("triton/").to_string())
        .collect();
    assert_eq!(keys.len(), ENTRIES);
    let damaged_key = &keys[280];
    let mut bytes = std::fs::read(&pack).expect("read the pack");
    let wanted = payload(damaged_key);
    let at = bytes
        .windows(wanted.len())
        .position(|w| w == &wanted[..])
        .expect("the entry's file is in the pack");
    bytes[at + 3] ^= 1;
    let damaged = dir.path().join("damaged.pack");
    std::fs::write(&damaged, &bytes).expect("write the damaged pack");

    let b = Cache::open(dir.path().join("b")).expect("open b");
    let (offset, entry) = refused_at(&b, &damaged, "a byte flipped in the second chunk");
    assert_eq!(
        offset,
        (at + 3) as u64 / BLOCK as u64 * BLOCK as u64,
        "its file's block"
    );
    let entry = entry.expect("the entry is named");
    assert!(entry.contains(damaged_key.as_str()), "{entry}");
    let b_store = Store::open(dir.path().join("b")).expect("open b's store");
    for (i, key) in keys.iter().enumerate() {
        let got = b_store.get(&ns, key).expect("get");
        if i < 256 {
            let entry = got.expect("the first chunk is published");
            assert_eq!(entry.read("f.bin").expect("read"), payload(key), "{key}");
        } else {
            assert!(got.is_none(), "{key} of the damaged chunk was published");
        }
    }
}

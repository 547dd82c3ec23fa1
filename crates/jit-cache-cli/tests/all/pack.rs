//! `jit-cache pack`: export, list and import with the real nvcc (counted: an imported kernel
//! is a hit, never a compile), a pack from another toolchain skipped, and three importers racing
//! three builders of the same kernels in one root (seed 004's race, with processes).

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

fn sources(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let path = dir.join(format!("pack{i}.cu"));
            std::fs::write(&path, kernel_text(60 + i)).expect("write kernel");
            path
        })
        .collect()
}

fn ok(out: Output, what: &str) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: one JSON document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn build(cache: &Path, nvcc: &Path, sources: &[PathBuf]) -> serde_json::Value {
    ok(
        cli(cache, nvcc)
            .arg("--json")
            .arg("build")
            .args(sources)
            .output()
            .expect("run build"),
        "build",
    )
}

fn outcomes(doc: &serde_json::Value) -> Vec<String> {
    doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_pack_exported_listed_and_imported_gives_hits_with_no_compile() {
    let dir = tempfile::tempdir().expect("temp dir");
    let compiler = CountingCompiler::new(dir.path());
    let sources = sources(dir.path(), 3);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    build(&a, &compiler.path, &sources);
    assert_eq!(compiler.compiles(), 3);
    let pack = dir.path().join("k.pack");
    let exported = ok(
        cli(&a, &compiler.path)
            .args([
                "--json", "pack", "export", "--arch", "sm_90", "--kind", "cubin", "-o",
            ])
            .arg(&pack)
            .output()
            .expect("export"),
        "export",
    );
    assert_eq!(exported["export"]["entries"], 3, "{exported}");
    let listed = ok(
        cli(&b, &compiler.path)
            .args(["--json", "pack", "ls"])
            .arg(&pack)
            .output()
            .expect("ls"),
        "ls",
    );
    assert_eq!(
        listed["entries"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
    assert!(!b.exists(), "listing a pack touches no cache");
    let imported = ok(
        cli(&b, &compiler.path)
            .args(["--json", "pack", "import"])
            .arg(&pack)
            .output()
            .expect("import"),
        "import",
    );
    assert_eq!(imported["import"]["imported"], 3, "{imported}");
    let again = build(&b, &compiler.path, &sources);
    assert_eq!(outcomes(&again), ["hit", "hit", "hit"], "{again}");
    assert_eq!(compiler.compiles(), 3, "no compile in the importing root");
}

#[test]
fn a_pack_from_another_toolchain_is_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ours = CountingCompiler::new(&dir.path().join("ours"));
    // Another wrapper script: another compiler binary, so another toolchain identity.
    let theirs = CountingCompiler::new(&dir.path().join("theirs"));
    let sources = sources(dir.path(), 2);
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    build(&a, &theirs.path, &sources);
    let pack = dir.path().join("theirs.pack");
    ok(
        cli(&a, &theirs.path)
            .args(["--json", "pack", "export", "-o"])
            .arg(&pack)
            .output()
            .expect("export"),
        "export",
    );
    let imported = ok(
        cli(&b, &ours.path)
            .args(["--json", "pack", "import"])
            .arg(&pack)
            .output()
            .expect("import"),
        "import",
    );
    assert_eq!(imported["import"]["imported"], 0, "{imported}");
    let skipped = imported["import"]["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 2, "both skipped and counted: {imported}");
    assert!(
        skipped[0][1]
            .as_str()
            .unwrap_or_default()
            .contains("another nvcc"),
        "the reason names the toolchain: {imported}"
    );
    let ls = ok(
        cli(&b, &ours.path)
            .args(["--json", "ls"])
            .output()
            .expect("ls"),
        "ls",
    );
    assert_eq!(
        ls["entries"].as_array().map(Vec::len),
        Some(0),
        "never served"
    );
}

#[test]
fn heavy_three_importers_racing_three_builders_leave_every_entry_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let compiler = CountingCompiler::new(dir.path());
    let sources = sources(dir.path(), 4);
    let (a, c) = (dir.path().join("a"), dir.path().join("c"));
    build(&a, &compiler.path, &sources);
    let pack = dir.path().join("race.pack");
    ok(
        cli(&a, &compiler.path)
            .args(["--json", "pack", "export", "-o"])
            .arg(&pack)
            .output()
            .expect("export"),
        "export",
    );
    let before = compiler.compiles();
    let mut children = Vec::new();
    for i in 0..6 {
        let mut cmd = cli(&c, &compiler.path);
        cmd.arg("--json");
        if i % 2 == 0 {
            cmd.args(["pack", "import"]).arg(&pack);
        } else {
            cmd.arg("build").args(&sources);
        }
        children.push((
            i,
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn"),
        ));
    }
    for (i, child) in children {
        let doc = ok(
            child.wait_with_output().expect("wait"),
            &format!("process {i}"),
        );
        if i % 2 == 0 {
            let r = &doc["import"];
            let settled = r["imported"].as_u64().unwrap_or(0) + r["present"].as_u64().unwrap_or(0);
            assert_eq!(
                settled, 4,
                "importer {i}: every entry imported or present: {doc}"
            );
        } else {
            assert_eq!(outcomes(&doc).len(), 4, "builder {i}: {doc}");
        }
    }
    assert!(
        compiler.compiles() - before <= 4,
        "each kernel compiled at most once in the racing root"
    );
    let verified = ok(
        cli(&c, &compiler.path)
            .args(["--json", "verify"])
            .output()
            .expect("verify"),
        "verify",
    );
    assert_eq!(verified["verify"]["checked"], 4, "{verified}");
    assert_eq!(
        verified["verify"]["corrupt"].as_array().map(Vec::len),
        Some(0),
        "every entry whole: {verified}"
    );
    let after = compiler.compiles();
    let again = build(&c, &compiler.path, &sources);
    assert_eq!(outcomes(&again), ["hit", "hit", "hit", "hit"], "{again}");
    assert_eq!(compiler.compiles(), after, "hits only");
}

/// kill -9 of an importer at each of its steps (jit-cache's failpoints): no entry is torn, no
/// lock or staging directory blocks the next import, which completes the pack, and the kernels
/// are hits.
#[cfg(feature = "failpoints")]
#[test]
fn heavy_an_importer_killed_at_each_failpoint_leaves_nothing_torn_or_blocking() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let compiler = CountingCompiler::new(dir.path());
    let sources = sources(dir.path(), 3);
    let a = dir.path().join("a");
    build(&a, &compiler.path, &sources);
    let pack = dir.path().join("k.pack");
    ok(
        cli(&a, &compiler.path)
            .args(["--json", "pack", "export", "-o"])
            .arg(&pack)
            .output()
            .expect("export"),
        "export",
    );
    for point in [
        "import-locked",
        "import-staging",
        "writing-meta",
        "import-publishing",
        "import-published",
    ] {
        let c = dir.path().join(format!("c-{point}"));
        let status = cli(&c, &compiler.path)
            .env("JIT_CACHE_FAILPOINT", format!("{point}:abort"))
            .args(["pack", "import"])
            .arg(&pack)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run importer");
        assert_eq!(
            status.signal(),
            Some(9),
            "{point}: the importer was killed there"
        );
        let imported = ok(
            cli(&c, &compiler.path)
                .args(["--json", "pack", "import"])
                .arg(&pack)
                .output()
                .expect("import again"),
            &format!("{point}: the next import"),
        );
        let r = &imported["import"];
        let settled = r["imported"].as_u64().unwrap_or(0) + r["present"].as_u64().unwrap_or(0);
        assert_eq!(
            settled, 3,
            "{point}: every entry imported or present: {imported}"
        );
        if point == "import-published" {
            assert_eq!(
                r["present"], 3,
                "{point}: the killed import's renames stand: {imported}"
            );
        }
        for entry in std::fs::read_dir(c.join(jit_cache::FORMAT_DIR).join("staging"))
            .expect("staging")
            .flatten()
        {
            set_mtime(&entry.path(), 1_000_000_000);
        }
        let verified = ok(
            cli(&c, &compiler.path)
                .args(["--json", "verify"])
                .output()
                .expect("verify"),
            "verify",
        );
        assert_eq!(
            verified["verify"]["corrupt"].as_array().map(Vec::len),
            Some(0),
            "{point}: nothing torn: {verified}"
        );
        let left = std::fs::read_dir(c.join(jit_cache::FORMAT_DIR).join("staging"))
            .expect("staging")
            .count();
        assert_eq!(left, 0, "{point}: the killed importer's staging was swept");
        let before = compiler.compiles();
        let again = build(&c, &compiler.path, &sources);
        assert_eq!(outcomes(&again), ["hit", "hit", "hit"], "{point}: {again}");
        assert_eq!(compiler.compiles(), before, "{point}: no compile");
    }
}

/// Importers and builders of the same kernels killed with SIGKILL at seeded random instants,
/// round after round, in one root: whatever instant a kill lands on, no entry is torn, nothing
/// blocks the next import, which completes the pack, and every kernel is then a hit.
#[test]
fn heavy_importers_and_builders_killed_at_random_instants_leave_nothing_torn() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let compiler = CountingCompiler::new(dir.path());
    let sources = sources(dir.path(), 4);
    let a = dir.path().join("a");
    build(&a, &compiler.path, &sources);
    let pack = dir.path().join("k.pack");
    ok(
        cli(&a, &compiler.path)
            .args(["--json", "pack", "export", "-o"])
            .arg(&pack)
            .output()
            .expect("export"),
        "export",
    );
    let c = dir.path().join("c");
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut draw = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let (mut killed, mut finished) = (0, 0);
    for round in 0..16 {
        let mut children: Vec<_> = (0..3)
            .map(|i| {
                let mut cmd = cli(&c, &compiler.path);
                if i < 2 {
                    cmd.args(["pack", "import"]).arg(&pack);
                } else {
                    cmd.arg("build").args(&sources);
                }
                cmd.stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        // The kill schedule: a seeded instant in the processes' lives, not a synchronisation.
        std::thread::sleep(std::time::Duration::from_millis(draw(250)));
        for child in &mut children {
            let _ = child.kill();
        }
        for mut child in children {
            let status = child.wait().expect("reap");
            match status.signal() {
                Some(9) => killed += 1,
                _ => {
                    assert!(
                        status.success(),
                        "round {round}: a process failed: {status}"
                    );
                    finished += 1;
                }
            }
        }
        // Between rounds a root may be wiped of entries (so later kills meet imports that
        // publish, not only ones that find everything present).
        if round % 4 == 3 {
            ok(
                cli(&c, &compiler.path)
                    .args(["--json", "clear"])
                    .output()
                    .expect("clear"),
                "clear",
            );
        }
    }
    assert!(
        killed > 0,
        "some processes were killed mid-way ({finished} finished)"
    );
    let staging = c.join(jit_cache::FORMAT_DIR).join("staging");
    for entry in std::fs::read_dir(&staging).expect("staging").flatten() {
        set_mtime(&entry.path(), 1_000_000_000);
    }
    let verified = ok(
        cli(&c, &compiler.path)
            .args(["--json", "verify"])
            .output()
            .expect("verify"),
        "verify",
    );
    assert_eq!(
        verified["verify"]["corrupt"].as_array().map(Vec::len),
        Some(0),
        "nothing torn after {killed} kills: {verified}"
    );
    assert_eq!(
        std::fs::read_dir(&staging).expect("staging").count(),
        0,
        "every killed process's staging was swept"
    );
    let imported = ok(
        cli(&c, &compiler.path)
            .args(["--json", "pack", "import"])
            .arg(&pack)
            .output()
            .expect("import"),
        "the import after the kills",
    );
    let r = &imported["import"];
    let settled = r["imported"].as_u64().unwrap_or(0) + r["present"].as_u64().unwrap_or(0);
    assert_eq!(settled, 4, "every entry imported or present: {imported}");
    let before = compiler.compiles();
    let again = build(&c, &compiler.path, &sources);
    assert_eq!(outcomes(&again), ["hit", "hit", "hit", "hit"], "{again}");
    assert_eq!(compiler.compiles(), before, "hits only");
}

#[test]
fn an_unknown_kind_is_a_usage_error_not_an_empty_pack() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pack = dir.path().join("k.pack");
    let out = cli(&dir.path().join("cache"), Path::new("/nonexistent/nvcc"))
        .args(["pack", "export", "-o"])
        .arg(&pack)
        .args(["--kind", "cubn"])
        .output()
        .expect("run pack export");
    assert_eq!(
        out.status.code(),
        Some(2),
        "a misspelt kind is refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cubn") && stderr.contains("stored") && stderr.contains("cubin"),
        "the error names the kind and the valid ones: {stderr}"
    );
    assert!(!pack.exists(), "no pack is written");
}

/// A misspelt arch (`sm90`) matched no entry and wrote an empty pack with exit 0, as a misspelt
/// kind did: it is a usage error, by the rule kernel specs follow.
#[test]
fn a_misspelt_arch_is_a_usage_error_not_an_empty_pack() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pack = dir.path().join("k.pack");
    let out = cli(&dir.path().join("cache"), Path::new("/nonexistent/nvcc"))
        .args(["pack", "export", "-o"])
        .arg(&pack)
        .args(["--arch", "sm90"])
        .output()
        .expect("run pack export");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a misspelt arch is refused: {stderr}"
    );
    assert!(
        stderr.contains("sm90") && stderr.contains("sm_NN"),
        "the error names the arch and the form: {stderr}"
    );
    assert!(!pack.exists(), "no pack is written");
}

/// Issue 31, item 6: a genuine stored entry larger than the memory a process may use. Export
/// read each file whole (twice) and import read an entry's span whole, so an entry larger than
/// memory could never travel; both now stream, in pieces, hashing as they go. Shown with a
/// 384 MiB file and the processes' data limited to 192 MiB (`prlimit --data`): the earlier main
/// aborted (memory allocation failed).
#[test]
fn heavy_a_stored_entry_larger_than_the_memory_allowed_is_exported_and_imported() {
    const SIZE: usize = 384 << 20;
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let store = jit_cache::store::Store::open(&a).expect("open store");
    let ns = jit_cache::store::Namespace::new("torch").expect("namespace");
    // Not zeros: every mebibyte differs, so a piece written twice or out of place shows.
    let piece = |i: usize| -> Vec<u8> {
        let mut block = vec![0u8; 1 << 20];
        for (j, byte) in block.iter_mut().enumerate() {
            *byte = (i.wrapping_mul(31) ^ j.wrapping_mul(7) ^ (j >> 11)) as u8;
        }
        block
    };
    store
        .get_or_insert_with(&ns, "big", std::time::Duration::from_secs(60), |dir| {
            let mut file = std::io::BufWriter::new(std::fs::File::create(dir.join("graph.bin"))?);
            for i in 0..SIZE >> 20 {
                std::io::Write::write_all(&mut file, &piece(i))?;
            }
            std::io::Write::flush(&mut file)
        })
        .expect("store the entry");
    drop(store);
    let nvcc = real_nvcc();
    let limited = |cache: &Path| {
        let mut command = std::process::Command::new("prlimit");
        command
            .arg(format!("--data={}", 192u64 << 20))
            .arg(env!("CARGO_BIN_EXE_jit-cache"))
            .arg("--cache-dir")
            .arg(cache)
            .env("NVCC", &nvcc);
        command
    };
    let pack = dir.path().join("big.pack");
    let exported = ok(
        limited(&a)
            .args(["--json", "pack", "export", "-o"])
            .arg(&pack)
            .output()
            .expect("export"),
        "export",
    );
    assert_eq!(exported["export"]["entries"], 1, "{exported}");
    let imported = ok(
        limited(&b)
            .args(["--json", "pack", "import"])
            .arg(&pack)
            .output()
            .expect("import"),
        "import",
    );
    assert_eq!(imported["import"]["imported"], 1, "{imported}");
    let store = jit_cache::store::Store::open(&b).expect("open the importing store");
    let entry = store
        .get(&ns, "big")
        .expect("read the store")
        .expect("the imported entry is there");
    let mut file =
        std::fs::File::open(entry.path("graph.bin").expect("its file")).expect("open its file");
    let mut block = vec![0u8; 1 << 20];
    for i in 0..SIZE >> 20 {
        std::io::Read::read_exact(&mut file, &mut block).expect("read a mebibyte");
        assert!(block == piece(i), "mebibyte {i} is the one stored");
    }
    assert_eq!(
        std::io::Read::read(&mut file, &mut block).expect("read past the end"),
        0,
        "nothing after the last mebibyte"
    );
}

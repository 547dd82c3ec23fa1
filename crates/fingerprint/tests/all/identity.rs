//! Toolchain, wheel and interpreter identities.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use fingerprint::{python_identity, tool_identity, wheel_identity, ErrorKind, IdentityCache};

use crate::write;

fn fake_toolchain(root: &Path, version: &str) -> PathBuf {
    let bin = root.join("bin/tool");
    write(
        root,
        "bin/tool",
        format!("#!/bin/sh\necho '{version}'\n").as_bytes(),
    );
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod +x");
    write(root, "include/cuda.h", b"#define CUDA 13050\n");
    bin
}

#[test]
fn tool_identity_is_content_and_version_never_path() {
    let a = tempfile::tempdir().expect("temp dir");
    let b = tempfile::tempdir().expect("temp dir");
    let bin_a = fake_toolchain(a.path(), "tool 1.0");
    let bin_b = fake_toolchain(b.path(), "tool 1.0");
    let mut cache = IdentityCache::new();
    let ia = tool_identity(
        &bin_a,
        &[a.path().join("include/cuda.h")],
        &["--version"],
        &mut cache,
    )
    .expect("identity a");
    let ib = tool_identity(
        &bin_b,
        &[b.path().join("include/cuda.h")],
        &["--version"],
        &mut cache,
    )
    .expect("identity b");
    assert_eq!(
        ia.version, "tool 1.0",
        "version output is captured and trimmed"
    );
    assert_eq!(
        ia.digest, ib.digest,
        "the same toolchain elsewhere has the same identity"
    );
    assert_eq!(
        ia.files[0].0, "bin/tool",
        "the binary is named relative to its grandparent"
    );
    assert_eq!(ia.files[1].0, "include/cuda.h", "companions too");
    assert_eq!(ia.path, bin_a, "the path is kept for display");

    write(b.path(), "include/cuda.h", b"#define CUDA 13060\n");
    let ib2 = tool_identity(
        &bin_b,
        &[b.path().join("include/cuda.h")],
        &["--version"],
        &mut cache,
    )
    .expect("identity b after companion change");
    assert_ne!(
        ib2.digest, ia.digest,
        "a companion's content is part of the identity"
    );

    let err = tool_identity(
        &a.path().join("bin/missing"),
        &[],
        &["--version"],
        &mut cache,
    )
    .expect_err("a missing binary is an error");
    assert!(
        err.to_string().contains("bin/missing"),
        "names the binary: {err}"
    );
}

#[test]
fn identity_cache_is_written_only_when_it_changes() {
    // System files are old, so their entries are trusted immediately.
    let tool = Path::new("/usr/bin/env");
    let state = tempfile::tempdir().expect("temp dir");
    let cache_path = state.path().join("identity.json");
    let mut cache = IdentityCache::load(&cache_path);
    let first = tool_identity(tool, &[], &["--version"], &mut cache).expect("identity of env");
    assert!(
        cache.save_if_changed(&cache_path).expect("save"),
        "first use writes the cache"
    );
    assert!(
        !cache.save_if_changed(&cache_path).expect("save again"),
        "nothing new: no write"
    );

    let mut reloaded = IdentityCache::load(&cache_path);
    let second =
        tool_identity(tool, &[], &["--version"], &mut reloaded).expect("identity from cache");
    assert_eq!(first, second, "the cached identity equals the computed one");
    assert!(
        !reloaded.is_dirty(),
        "a hit on an unchanged toolchain changes nothing"
    );
    assert!(
        !reloaded
            .save_if_changed(&cache_path)
            .expect("save after hit"),
        "the hit path writes nothing"
    );
}

#[test]
fn real_nvcc_identity_when_available() {
    let nvcc = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/nvcc-venv/lib/python3.11/site-packages/nvidia/cu13/bin/nvcc"
            ))
        });
    if !nvcc.exists() {
        eprintln!(
            "nvcc not found at {}; covered by the fake toolchain test",
            nvcc.display()
        );
        return;
    }
    let mut cache = IdentityCache::new();
    let id = tool_identity(&nvcc, &[], &["--version"], &mut cache).expect("nvcc identity");
    assert!(
        id.version.contains("Cuda compilation tools"),
        "nvcc --version output: {}",
        id.version
    );
    assert_eq!(id.files[0].0, "bin/nvcc", "named relative to the CUDA root");
}

fn site(root: &Path, record: &str, direct_url: Option<&str>) {
    write(
        root,
        "flashinfer_python-0.5.0.dist-info/RECORD",
        record.as_bytes(),
    );
    write(
        root,
        "flashinfer_python-0.5.0.dist-info/METADATA",
        b"Name: flashinfer-python\n",
    );
    if let Some(d) = direct_url {
        write(
            root,
            "flashinfer_python-0.5.0.dist-info/direct_url.json",
            d.as_bytes(),
        );
    }
}

#[test]
fn wheel_identity_hashes_full_record_rows() {
    let sp = tempfile::tempdir().expect("temp dir");
    let rows = "flashinfer/__init__.py,sha256=AAA,10\n\"flashinfer/a,b.py\",sha256=BBB,20\n\
                flashinfer_python-0.5.0.dist-info/RECORD,,\n../../bin/fi,sha256=CCC,5\n";
    site(sp.path(), rows, None);
    let a = wheel_identity(sp.path(), "FlashInfer-Python").expect("find by normalised name");
    assert_eq!(a.name, "flashinfer_python", "name as spelled on disk");
    assert_eq!(a.version, "0.5.0", "version from the directory name");
    assert!(!a.editable, "a regular install");

    // Same paths and version, different bytes: FlashInfer #4489's reinstall.
    site(
        sp.path(),
        &rows.replace("sha256=BBB,20", "sha256=DDD,20"),
        None,
    );
    let b = wheel_identity(sp.path(), "flashinfer_python").expect("reinstalled");
    assert_ne!(
        a.digest, b.digest,
        "a row's hash is part of the identity, not only its path"
    );

    // Rows outside site-packages (scripts with absolute shebangs) and RECORD itself do not count.
    site(
        sp.path(),
        &rows.replace("sha256=CCC,5", "sha256=EEE,6"),
        None,
    );
    let c = wheel_identity(sp.path(), "flashinfer-python").expect("script changed");
    assert_eq!(
        a.digest, c.digest,
        "scripts outside site-packages are excluded"
    );

    site(sp.path(), "flashinfer/x.py,sha256=A\n", None);
    let err = wheel_identity(sp.path(), "flashinfer-python").expect_err("bad RECORD");
    assert!(
        matches!(err.kind(), ErrorKind::BadRecordLine { line: 1, .. }),
        "got {err}"
    );
    assert!(
        err.path().ends_with("RECORD"),
        "names the RECORD file: {err}"
    );

    let err = wheel_identity(sp.path(), "torch").expect_err("absent distribution");
    assert!(
        err.to_string().contains("torch"),
        "names the distribution: {err}"
    );
}

#[test]
fn editable_install_hashes_its_source_tree() {
    let sp = tempfile::tempdir().expect("temp dir");
    let src = tempfile::tempdir().expect("temp dir");
    write(src.path(), "flashinfer/jit/core.py", b"x = 1\n");
    let url = format!(
        "{{\"url\": \"file://{}\", \"dir_info\": {{\"editable\": true}}}}",
        src.path().display()
    );
    site(
        sp.path(),
        "__editable__.flashinfer_python-0.5.0.pth,sha256=P,40\n",
        Some(&url),
    );
    let a = wheel_identity(sp.path(), "flashinfer-python").expect("editable identity");
    assert!(a.editable, "detected as editable");
    write(src.path(), "flashinfer/jit/core.py", b"x = 2\n");
    let b = wheel_identity(sp.path(), "flashinfer-python").expect("after a source edit");
    assert_ne!(
        a.digest, b.digest,
        "editing the source tree changes the identity"
    );
}

#[test]
fn python_identity_asks_the_interpreter() {
    let venv = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/nvcc-venv/bin/python"
    ));
    let python = if venv.exists() {
        venv
    } else {
        Path::new("/usr/bin/python3")
    };
    if python.exists() {
        let id = python_identity(python).expect("probe python");
        assert!(
            id.soabi.starts_with("cpython-"),
            "SOABI of CPython: {}",
            id.soabi
        );
        assert!(
            id.version.starts_with("3."),
            "a Python 3 version: {}",
            id.version
        );
    }
    let err = python_identity(Path::new("/bin/false")).expect_err("a failing probe is an error");
    assert!(
        matches!(err.kind(), ErrorKind::PythonProbe { .. }),
        "got {err}"
    );
    assert!(
        err.to_string().contains("/bin/false"),
        "names the executable: {err}"
    );
}

#[test]
fn identity_cache_from_another_boot_starts_empty() {
    let tool = Path::new("/usr/bin/env");
    let state = tempfile::tempdir().expect("temp dir");
    let path = state.path().join("identity.json");
    let mut cache = IdentityCache::new();
    tool_identity(tool, &[], &["--version"], &mut cache).expect("identity");
    assert!(
        cache.save_if_changed(&path).expect("save"),
        "first save writes"
    );

    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read cache")).expect("cache is JSON");
    json["boot_id"] = serde_json::json!("another-boot");
    std::fs::write(&path, serde_json::to_vec(&json).expect("to JSON")).expect("forge boot id");
    let mut other_boot = IdentityCache::load(&path);
    tool_identity(tool, &[], &["--version"], &mut other_boot).expect("identity after reboot");
    assert!(
        other_boot.is_dirty(),
        "entries from another boot are not trusted: everything is hashed again"
    );

    std::fs::write(&path, b"{ corrupt").expect("corrupt the cache");
    let mut corrupt = IdentityCache::load(&path);
    let id = tool_identity(tool, &[], &["--version"], &mut corrupt).expect("identity from scratch");
    assert!(!id.version.is_empty(), "a corrupt cache is only a miss");
}

#[test]
fn a_tool_that_never_answers_its_probe_fails_it_instead_of_hanging_the_caller() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tool = dir.path().join("bin/hangs");
    std::fs::create_dir_all(tool.parent().expect("parent")).expect("mkdir");
    std::fs::write(&tool, "#!/bin/sh\nexec sleep 600\n").expect("write tool");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut cache = IdentityCache::default();
    let probed = tool_identity(&tool, &[], &["--help"], &mut cache);
    let err = probed.expect_err("a probe that never answers is an error");
    assert!(
        err.to_string().contains("did not answer"),
        "the error says why: {err}"
    );
}

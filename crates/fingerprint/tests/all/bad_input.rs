//! Bad input: FIFOs, sockets, unreadable directories, non-UTF-8 names.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use fingerprint::{hash_file, hash_tree, ErrorKind, SymlinkPolicy, TreeOptions};

use crate::write;

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(
        rc,
        0,
        "mkfifo {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Opening a FIFO for reading blocks until a writer appears, and none ever will: if the walker
/// opened it, this test would hang instead of failing.
#[test]
fn fifo_in_a_tree_is_reported_by_path_and_never_opened() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(dir.path(), "src/a.cu", b"a");
    let fifo = dir.path().join("src/pipe");
    mkfifo(&fifo);
    let err =
        hash_tree(dir.path(), &TreeOptions::default(), None).expect_err("a FIFO must be reported");
    assert!(
        matches!(err.kind(), ErrorKind::SpecialFile { file_type: "FIFO" }),
        "kind says FIFO, got {err}"
    );
    assert!(
        err.path().ends_with("src/pipe"),
        "the error names the FIFO: {err}"
    );
    assert!(
        err.to_string().contains("src/pipe"),
        "the message names the FIFO: {err}"
    );

    let err = hash_file(&fifo).expect_err("hash_file on a FIFO must fail");
    assert!(
        matches!(err.kind(), ErrorKind::SpecialFile { .. }),
        "got {err}"
    );

    // A symlink to the FIFO under the Follow policy must not open it either.
    std::fs::remove_file(&fifo).expect("remove fifo");
    let other = tempfile::tempdir().expect("temp dir");
    let outside = other.path().join("pipe");
    mkfifo(&outside);
    std::os::unix::fs::symlink(&outside, dir.path().join("src/link")).expect("symlink");
    let err = hash_tree(dir.path(), &TreeOptions::default(), None)
        .expect_err("followed FIFO is reported");
    assert!(
        err.path().ends_with("src/link"),
        "the error names the link: {err}"
    );
    let recorded = hash_tree(
        dir.path(),
        &TreeOptions::default().symlinks(SymlinkPolicy::Record),
        None,
    );
    assert!(
        recorded.is_ok(),
        "recording the link string never touches the FIFO"
    );
}

#[test]
fn socket_in_a_tree_is_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sock = dir.path().join("ctl.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind socket");
    let err = hash_tree(dir.path(), &TreeOptions::default(), None)
        .expect_err("a socket must be reported");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::SpecialFile {
                file_type: "socket"
            }
        ),
        "got {err}"
    );
    assert!(err.path().ends_with("ctl.sock"), "names the socket: {err}");
}

#[test]
fn device_in_a_tree_is_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink("/dev/null", dir.path().join("null")).expect("symlink to a device");
    let err = hash_tree(dir.path(), &TreeOptions::default(), None)
        .expect_err("a device must be reported");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::SpecialFile {
                file_type: "character device"
            }
        ),
        "got {err}"
    );
}

#[test]
fn non_utf8_names_hash_by_their_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let raw = dir.path().join(OsStr::from_bytes(b"caf\xe9.cuh"));
    std::fs::write(&raw, b"x").expect("write non-UTF-8 name");
    let t = hash_tree(dir.path(), &TreeOptions::default(), None).expect("hash non-UTF-8 tree");
    assert_eq!(
        t.files[0].0, "caf\\xe9.cuh",
        "listed in the lossless escaped form"
    );

    // A UTF-8 name that spells the escape must not collide with the raw byte.
    let other = tempfile::tempdir().expect("temp dir");
    std::fs::write(other.path().join("caf\\xe9.cuh"), b"x").expect("write look-alike");
    let u = hash_tree(other.path(), &TreeOptions::default(), None).expect("hash look-alike");
    assert_ne!(
        t.digest, u.digest,
        "raw bytes and their escaped spelling differ"
    );
    assert_ne!(t.files[0].0, u.files[0].0, "and list differently");
}

#[test]
fn missing_root_and_file_root_are_reported_with_their_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let err = hash_tree(&dir.path().join("missing"), &TreeOptions::default(), None)
        .expect_err("a missing root is an error");
    assert!(
        err.to_string().contains("missing"),
        "names the missing root: {err}"
    );
    write(dir.path(), "file", b"x");
    let err = hash_tree(&dir.path().join("file"), &TreeOptions::default(), None)
        .expect_err("a file is not a tree");
    assert!(matches!(err.kind(), ErrorKind::NotADirectory), "got {err}");
    let err = hash_file(dir.path()).expect_err("a directory is not a file");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::SpecialFile {
                file_type: "directory"
            }
        ),
        "got {err}"
    );
}

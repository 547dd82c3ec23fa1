//! Faults: a full disk, a read-only filesystem, a missing parent, a directory target, planted
//! symlinks.

use std::ffi::CString;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use durable_fs::{
    atomic_rename, create_dir_all_durable, put, put_with, rename_noreplace, temp_name, testing,
    DirMode, StagingDir,
};
use fs_testbed::{run_or_skip, FsKind};

use crate::common::{is_root, names, temps};

#[test]
fn enospc_leaves_old_target_and_no_temp() {
    run_or_skip(FsKind::TinyTmpfs, |root| {
        let target = root.join("target");
        put(&target, b"old contents").expect("put the old file");
        let err = put(&target, &vec![1u8; 2 << 20]).expect_err("2 MiB cannot fit in 1 MiB");
        assert_eq!(err.kind(), ErrorKind::StorageFull, "ENOSPC surfaces: {err}");
        assert_eq!(
            err.op(),
            "write temp file",
            "the failing step is named: {err}"
        );
        assert_eq!(
            std::fs::read(&target).expect("read"),
            b"old contents",
            "old target intact"
        );
        assert!(temps(root).is_empty(), "no temp left: {:?}", names(root));
        // A staging dir that fills the disk is removed on drop, and the space comes back.
        let staging = StagingDir::new_in(root).expect("staging dir");
        let err = put(staging.path().join("big"), &vec![1u8; 2 << 20]).expect_err("too big");
        assert_eq!(err.kind(), ErrorKind::StorageFull);
        drop(staging);
        assert!(
            temps(root).is_empty(),
            "no staging dir left: {:?}",
            names(root)
        );
        put(&target, &vec![2u8; 512 << 10]).expect("space is free again");
    });
}

#[test]
fn writer_error_aborts_put_and_removes_temp() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("t");
    put(&target, b"old").expect("put");
    let err = put_with(&target, |f| {
        std::io::Write::write_all(f, b"half")?;
        Err(std::io::Error::other("generator failed"))
    })
    .expect_err("writer error propagates");
    assert_eq!(err.op(), "write temp file");
    assert!(
        err.to_string().contains("generator failed"),
        "source kept: {err}"
    );
    assert_eq!(
        std::fs::read(&target).expect("read"),
        b"old",
        "target untouched"
    );
    assert!(temps(dir.path()).is_empty(), "temp removed");
}

fn remount_read_only(root: &Path) {
    let target = CString::new(root.as_os_str().as_bytes()).expect("no NUL in the mount path");
    // SAFETY: target is a valid NUL-terminated path; null source, type and data are allowed for a
    // remount. This runs inside fs-testbed's private mount namespace.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_RDONLY,
            std::ptr::null(),
        )
    };
    assert_eq!(
        rc,
        0,
        "remount read-only: {}",
        std::io::Error::last_os_error()
    );
}

#[test]
fn read_only_filesystem_fails_cleanly() {
    run_or_skip(FsKind::Ext4, |root| {
        let target = root.join("target");
        put(&target, b"before").expect("put while writable");
        remount_read_only(root);
        let err = put(&target, b"after").expect_err("put on a read-only fs");
        assert_eq!(err.kind(), ErrorKind::ReadOnlyFilesystem, "EROFS: {err}");
        assert!(
            err.to_string().starts_with("create temp file ") && err.path().starts_with(root),
            "names op and path: {err}"
        );
        assert_eq!(
            std::fs::read(&target).expect("read"),
            b"before",
            "target intact"
        );
        let err = create_dir_all_durable(root.join("d/e"), DirMode::from_mode(0o755))
            .expect_err("mkdir on ro fs");
        assert_eq!(err.kind(), ErrorKind::ReadOnlyFilesystem);
        let err = StagingDir::new_in(root).expect_err("staging on ro fs");
        assert_eq!(err.kind(), ErrorKind::ReadOnlyFilesystem);
        let err = atomic_rename(&target, root.join("moved")).expect_err("rename on ro fs");
        assert_eq!(err.kind(), ErrorKind::ReadOnlyFilesystem);
        assert!(temps(root).is_empty(), "nothing created");
    });
}

#[test]
fn missing_parent_is_an_error_naming_the_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("missing/sub/file");
    let err = put(&target, b"x").expect_err("no parent");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.op(), "open directory");
    assert_eq!(
        err.path(),
        dir.path().join("missing/sub"),
        "names the missing directory"
    );
    assert!(names(dir.path()).is_empty(), "nothing created");
}

#[test]
fn directory_target_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("entry");
    std::fs::create_dir(&target).expect("mkdir");
    put(target.join("inner"), b"keep").expect("put inside");
    let err = put(&target, b"file").expect_err("cannot rename a file over a directory");
    assert_eq!(err.op(), "rename", "{err}");
    assert_eq!(err.kind(), ErrorKind::IsADirectory, "{err}");
    assert_eq!(
        std::fs::read(target.join("inner")).expect("read"),
        b"keep",
        "dir intact"
    );
    assert!(
        temps(dir.path()).is_empty(),
        "temp removed: {:?}",
        names(dir.path())
    );
}

/// Another user plants a symlink where we will write; as root, make it really another user's.
fn plant_symlink(link: &Path, to: &Path) {
    std::os::unix::fs::symlink(to, link).expect("plant symlink");
    if is_root() {
        std::os::unix::fs::lchown(link, Some(65534), Some(65534)).expect("chown to nobody");
    }
}

#[test]
fn symlink_at_target_is_replaced_not_followed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let victim = dir.path().join("victim");
    put(&victim, b"precious").expect("put victim");
    let target = dir.path().join("target");
    plant_symlink(&target, &victim);
    put(&target, b"ours").expect("put over a symlink");
    assert_eq!(
        std::fs::read(&victim).expect("read"),
        b"precious",
        "the link was not followed"
    );
    let meta = std::fs::symlink_metadata(&target).expect("stat");
    assert!(meta.is_file(), "the symlink was replaced by our file");
    assert_eq!(std::fs::read(&target).expect("read"), b"ours");
    // The no-replace publish sees the symlink as an existing target.
    let other = dir.path().join("other");
    plant_symlink(&other, &victim);
    put(dir.path().join("src"), b"src").expect("put");
    assert_eq!(
        rename_noreplace(dir.path().join("src"), &other).expect("publish"),
        durable_fs::PublishOutcome::AlreadyExisted
    );
    assert_eq!(std::fs::read(&victim).expect("read"), b"precious");
}

#[test]
fn symlink_at_temp_name_is_never_followed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let victim = dir.path().join("victim");
    put(&victim, b"precious").expect("put victim");
    let temp = temp_name("target");
    plant_symlink(&dir.path().join(&temp), &victim);
    let target = dir.path().join("target");
    let err = testing::put_with_temp_name(&target, &temp, b"ours").expect_err("O_EXCL refuses");
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert_eq!(err.op(), "create temp file");
    assert_eq!(
        std::fs::read(&victim).expect("read"),
        b"precious",
        "victim untouched"
    );
    assert!(!target.exists(), "nothing published");
    // A dangling planted symlink (the classic attack creates the file through it) fails too.
    let temp2 = temp_name("target");
    let created_through = dir.path().join("created-through-link");
    plant_symlink(&dir.path().join(&temp2), &created_through);
    testing::put_with_temp_name(&target, &temp2, b"ours").expect_err("O_EXCL|O_NOFOLLOW refuses");
    assert!(
        !created_through.exists(),
        "nothing created through the link"
    );
}

#[test]
fn create_dir_all_durable_refuses_a_file_in_the_way() {
    let dir = tempfile::tempdir().expect("temp dir");
    put(dir.path().join("file"), b"x").expect("put");
    let err = create_dir_all_durable(dir.path().join("file/sub"), DirMode::from_mode(0o755))
        .expect_err("a file where a directory should be");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::AlreadyExists | ErrorKind::NotADirectory
        ),
        "{err}"
    );
    let err = create_dir_all_durable(dir.path().join("file"), DirMode::from_mode(0o755))
        .expect_err("file itself");
    assert_eq!(err.kind(), ErrorKind::AlreadyExists, "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("file")).expect("read"),
        b"x",
        "file untouched"
    );
}

/// The documented traps, as a user meets them: a symlink at the target is replaced (its pointee
/// untouched), and the old file's mode is not kept unless `put_with` sets it.
#[test]
fn put_replaces_a_symlink_and_does_not_keep_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let pointee = dir.path().join("pointee");
    put(&pointee, b"pointee").expect("put");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&pointee, &link).expect("symlink");
    put(&link, b"new").expect("put over the link");
    let meta = std::fs::symlink_metadata(&link).expect("lstat");
    assert!(
        meta.is_file(),
        "the link itself was replaced by a regular file"
    );
    assert_eq!(
        std::fs::read(&pointee).expect("read"),
        b"pointee",
        "the pointee is untouched"
    );

    let script = dir.path().join("run.sh");
    put(&script, b"old").expect("put");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    put(&script, b"new").expect("put");
    let mode = std::fs::metadata(&script)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_ne!(mode, 0o700, "put does not keep the old mode");
    let old = std::fs::Permissions::from_mode(0o700);
    put_with(&script, |f| {
        f.set_permissions(old)?;
        std::io::Write::write_all(f, b"newer")
    })
    .expect("put_with keeping the mode");
    let mode = std::fs::metadata(&script)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "put_with can keep it");
}

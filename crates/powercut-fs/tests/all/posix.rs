//! POSIX behaviour through the mount: what a real filesystem does, including its errors.

use std::io;
use std::os::unix::fs::MetadataExt;

use powercut_fs::{Options, RenameFlags};
use rustix::fs::{Mode, OFlags, RenameFlags as Flags, CWD};

fn errno(result: io::Result<impl std::fmt::Debug>) -> Option<i32> {
    result.err().and_then(|e| e.raw_os_error())
}

fn rename2(from: &std::path::Path, to: &std::path::Path, flags: Flags) -> io::Result<()> {
    Ok(rustix::fs::renameat_with(CWD, from, CWD, to, flags)?)
}

#[test]
fn heavy_files_directories_links_and_renames_behave_as_on_a_real_filesystem() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        let (a, b, d) = (root.join("a"), root.join("b"), root.join("d"));

        std::fs::write(&a, b"alpha").expect("create and write a");
        assert_eq!(std::fs::read(&a).expect("read a"), b"alpha", "read back");
        let excl = rustix::fs::openat(
            CWD,
            &a,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(0o644),
        );
        assert_eq!(
            excl.err().map(|e| e.raw_os_error()),
            Some(libc::EEXIST),
            "O_EXCL on an existing name"
        );

        std::fs::write(&b, b"beta").expect("create b");
        assert_eq!(
            errno(rename2(&a, &b, Flags::NOREPLACE)),
            Some(libc::EEXIST),
            "RENAME_NOREPLACE onto an existing name"
        );
        rename2(&a, &b, Flags::EXCHANGE).expect("RENAME_EXCHANGE");
        assert_eq!(std::fs::read(&a).expect("read a"), b"beta", "exchanged");
        assert_eq!(std::fs::read(&b).expect("read b"), b"alpha", "exchanged");
        rename2(&a, &root.join("c"), Flags::NOREPLACE).expect("noreplace to a free name");
        assert!(!a.exists(), "the source name is gone after a rename");
        std::fs::rename(root.join("c"), &a).expect("plain rename back");

        std::fs::hard_link(&a, root.join("a2")).expect("link");
        assert_eq!(
            std::fs::metadata(&a).expect("stat a").nlink(),
            2,
            "two names"
        );
        assert_eq!(
            errno(std::fs::hard_link(&a, &b)),
            Some(libc::EEXIST),
            "link onto an existing name"
        );
        std::fs::remove_file(root.join("a2")).expect("unlink the second name");
        assert_eq!(
            std::fs::metadata(&a).expect("stat a").nlink(),
            1,
            "one name"
        );

        std::fs::create_dir(&d).expect("mkdir");
        assert_eq!(
            errno(std::fs::create_dir(&d)),
            Some(libc::EEXIST),
            "mkdir existing"
        );
        std::fs::write(d.join("x"), b"x").expect("create d/x");
        assert_eq!(
            errno(std::fs::remove_dir(&d)),
            Some(libc::ENOTEMPTY),
            "rmdir non-empty"
        );
        assert_eq!(
            errno(std::fs::remove_dir(&a)),
            Some(libc::ENOTDIR),
            "rmdir a file"
        );
        assert_eq!(
            errno(std::fs::remove_file(&d)),
            Some(libc::EISDIR),
            "unlink a directory"
        );
        assert_eq!(
            errno(std::fs::rename(&d, &a)),
            Some(libc::ENOTDIR),
            "rename a directory over a file"
        );
        assert_eq!(
            errno(std::fs::rename(&a, &d)),
            Some(libc::EISDIR),
            "rename a file over a directory"
        );
        assert_eq!(
            errno(std::fs::read(root.join("missing"))),
            Some(libc::ENOENT),
            "open a missing name"
        );
        let names: Vec<String> = std::fs::read_dir(&root)
            .expect("readdir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["a", "b", "d"], "readdir lists every name once");
        std::fs::remove_file(d.join("x")).expect("unlink d/x");
        std::fs::remove_dir(&d).expect("rmdir empty");
        assert!(!d.exists(), "rmdir removed it");

        let mut truncated = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&b)
            .expect("open with O_TRUNC");
        std::io::Write::write_all(&mut truncated, b"new").expect("write after truncate");
        drop(truncated);
        assert_eq!(std::fs::read(&b).expect("read b"), b"new", "O_TRUNC");
    });
}

#[test]
fn heavy_rename_flags_can_be_refused_like_nfs() {
    let options = Options {
        rename_flags: RenameFlags::RefuseWithEinval,
        ..Options::default()
    };
    powercut_fs::run_or_skip(options, |mount| {
        let root = mount.root();
        std::fs::write(root.join("a"), b"a").expect("create a");
        std::fs::write(root.join("c"), b"c").expect("create c");
        assert_eq!(
            errno(rename2(&root.join("a"), &root.join("b"), Flags::NOREPLACE)),
            Some(libc::EINVAL),
            "RENAME_NOREPLACE refused"
        );
        assert_eq!(
            errno(rename2(&root.join("a"), &root.join("c"), Flags::EXCHANGE)),
            Some(libc::EINVAL),
            "RENAME_EXCHANGE refused"
        );
        std::fs::rename(root.join("a"), root.join("b")).expect("a plain rename still works");
        assert!(root.join("b").exists(), "renamed");
    });
}

#[test]
fn heavy_the_mount_is_invisible_outside_its_thread() {
    let seen_inside = powercut_fs::run_or_skip(Options::default(), |mount| {
        let mounts = std::fs::read_to_string("/proc/thread-self/mounts").expect("read mounts");
        mounts.contains(&mount.root().display().to_string())
    });
    if let Some(seen_inside) = seen_inside {
        assert!(seen_inside, "the mount is listed in its own namespace");
        let outside = std::fs::read_to_string("/proc/self/mounts").expect("read mounts");
        assert!(
            !outside.contains("powercut-fs-"),
            "the mount leaked into the process's namespace"
        );
    }
}

#[test]
fn heavy_a_cut_with_a_file_still_open_cuts_the_descriptor_off() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        std::fs::write(root.join("open"), b"x").expect("create a file");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join("open"))
            .expect("open it and keep it open");
        mount
            .power_cut()
            .expect("a cut with a busy mount detaches and aborts");
        let late = std::io::Write::write_all(&mut file, b"after the cut");
        assert!(late.is_err(), "the old descriptor is dead after the cut");
        drop(file);
        std::fs::write(root.join("new"), b"y").expect("the remounted filesystem works");
        assert_eq!(std::fs::read(root.join("new")).expect("read back"), b"y");
    });
}

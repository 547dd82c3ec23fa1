//! The daemon sees the fsyncs a correct put does, and injected faults reach the caller.

use powercut_fs::{Faults, Options};

use crate::util::{payload, put, Flaw};

#[test]
fn heavy_the_fsyncs_of_a_correct_put_reach_the_daemon() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        let before = mount.counters();
        put(&root, "a", b"bytes", Flaw::None).expect("a correct put");
        let after = mount.counters();
        assert_eq!(after.fsync - before.fsync, 1, "one file fsync");
        assert_eq!(after.fsyncdir - before.fsyncdir, 1, "one directory fsync");
        assert!(
            after.flush > before.flush,
            "close reached the daemon as flush"
        );
        put(&root, "b", b"bytes", Flaw::NoFileFsync).expect("a put without the file fsync");
        assert_eq!(
            mount.counters().fsync,
            after.fsync,
            "the broken put did not fsync the file, and the counter shows it"
        );
        assert_eq!(
            mount.counters().fsyncdir,
            after.fsyncdir + 1,
            "it synced the directory"
        );
    });
}

#[test]
fn heavy_eio_on_the_nth_fsync_is_returned_and_nothing_is_published() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        mount.set_faults(Faults {
            eio_on_fsync: Some(2),
            ..Faults::default()
        });
        put(&root, "first", &payload(1, 600), Flaw::None).expect("the first fsync succeeds");
        let err =
            put(&root, "second", &payload(2, 600), Flaw::None).expect_err("the second fsync fails");
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EIO),
            "EIO reaches the caller"
        );
        assert!(
            !root.join("second").exists(),
            "nothing is published after an fsync error"
        );
        put(&root, "third", &payload(3, 600), Flaw::None).expect("the fault was one-shot");
        mount.power_cut().expect("cut");
        assert_eq!(
            std::fs::read(root.join("first")).ok(),
            Some(payload(1, 600)),
            "first survives"
        );
        assert_eq!(
            std::fs::read(root.join("third")).ok(),
            Some(payload(3, 600)),
            "third survives"
        );
    });
}

#[test]
fn heavy_a_retried_fsync_after_eio_succeeds_without_the_data() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        put(&root, "f", b"", Flaw::None).expect("create f durably");
        mount.set_faults(Faults {
            eio_on_fsync: Some(1),
            ..Faults::default()
        });
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join("f"))
            .expect("open f");
        std::io::Write::write_all(&mut file, b"lost").expect("write");
        let first = file.sync_all();
        assert_eq!(
            first.err().and_then(|e| e.raw_os_error()),
            Some(libc::EIO),
            "fsync fails"
        );
        file.sync_all()
            .expect("the retry reports success (fsyncgate)");
        drop(file);
        mount.power_cut().expect("cut");
        assert_eq!(
            std::fs::read(root.join("f")).expect("f exists"),
            b"",
            "the data is gone although the retried fsync succeeded: never retry, fail"
        );
    });
}

#[test]
fn heavy_enospc_after_n_bytes() {
    powercut_fs::run_or_skip(Options::default(), |mount| {
        let root = mount.root().to_path_buf();
        mount.set_faults(Faults {
            enospc_after_bytes: Some(1000),
            ..Faults::default()
        });
        put(&root, "small", &payload(1, 600), Flaw::None).expect("600 bytes fit");
        let err = put(&root, "big", &payload(2, 600), Flaw::None).expect_err("the next 600 do not");
        assert_eq!(
            err.raw_os_error(),
            Some(libc::ENOSPC),
            "ENOSPC reaches the caller"
        );
        assert!(
            !root.join("big").exists(),
            "nothing is published after ENOSPC"
        );
    });
}

//! Both engines, forced in turn, stream ranges into a sink with the file's bytes; io_uring is
//! refused for real (a seccomp filter in a child process) and the automatic choice falls back.

use crate::common::{write_pattern, Rng, SIZES};
use direct_io::{
    ByteRange, CachePolicy, DirectFile, Engine, EngineChoice, EngineConfig, EngineKind,
    EngineReason, HostSink, RingConfig,
};
use fs_testbed::{run_or_skip, FsKind};
use std::path::Path;

const CHILD_ENV: &str = "DIRECT_IO_SECCOMP_CHILD";

fn engine(choice: EngineChoice) -> Engine {
    let e = Engine::new(choice, EngineConfig::default()).expect("set up the engine");
    let want = match choice {
        EngineChoice::IoUring => EngineKind::IoUring,
        _ => EngineKind::Threads,
    };
    assert_eq!(e.kind(), want, "the forced engine is the one that runs");
    assert_eq!(e.reason(), &EngineReason::Requested);
    e
}

/// Streams random ranges of each size through `engine` and checks every byte and the number of
/// read requests (one per slot read when nothing is short).
fn stream_sizes(root: &Path, engine: &mut Engine, policy: CachePolicy, label: &str) {
    let mut rng = Rng::new(77);
    for size in SIZES {
        let path = root.join(format!("s{size}"));
        let data = write_pattern(&path, size);
        let file = DirectFile::open_with(&path, policy).expect("open");
        let mut ranges = Vec::new();
        for _ in 0..9 {
            let off = rng.below(size + 1);
            let len = rng.below(size - off + 1);
            ranges.push(ByteRange { offset: off, len });
        }
        let ring = RingConfig {
            slots: 3,
            slot_size: 8192,
        };
        let mut sink = HostSink::for_ranges(&ranges);
        let report = engine
            .stream(&file, &ranges, ring, &mut sink)
            .unwrap_or_else(|e| panic!("{label}: stream of {size}: {e}"));
        assert_eq!(
            report.engine,
            engine.kind(),
            "{label}: report names the engine"
        );
        assert_eq!(
            report.read_calls, report.slot_reads,
            "{label}: one read request per slot read"
        );
        for (r, got) in ranges.iter().zip(sink.buffers()) {
            let want = &data[r.offset as usize..(r.offset + r.len) as usize];
            assert!(
                got == want,
                "{label}: range {r:?} of {size} has the file's bytes"
            );
        }
        // A range past the end is EndOfFile before anything is read.
        let past = [ByteRange {
            offset: size.saturating_sub(1),
            len: 2,
        }];
        let err = engine
            .stream(&file, &past, ring, &mut HostSink::for_ranges(&past))
            .expect_err("a range past the end");
        assert!(err.is_end_of_file(), "{label}: {err}");
    }
}

#[test]
fn each_engine_forced_streams_the_files_bytes_direct_and_buffered() {
    let dir = tempfile::tempdir().expect("temp dir");
    for choice in [EngineChoice::IoUring, EngineChoice::Threads] {
        let mut e = engine(choice);
        for policy in [CachePolicy::Direct, CachePolicy::Buffered] {
            stream_sizes(
                dir.path(),
                &mut e,
                policy,
                &format!("{choice:?}/{policy:?}"),
            );
        }
    }
}

#[test]
fn heavy_each_engine_streams_on_every_mounted_filesystem() {
    for kind in [FsKind::Ext4, FsKind::Xfs4k, FsKind::Btrfs, FsKind::Tmpfs] {
        run_or_skip(kind, |root| {
            for choice in [EngineChoice::IoUring, EngineChoice::Threads] {
                let mut e = engine(choice);
                stream_sizes(root, &mut e, CachePolicy::Direct, kind.name());
            }
        });
    }
}

#[test]
fn registered_buffers_are_used_by_io_uring_and_not_by_threads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("reg");
    let data = write_pattern(&path, 100_000);
    let file = DirectFile::open(&path).expect("open");
    let ranges = [ByteRange {
        offset: 7,
        len: 99_000,
    }];
    for choice in [EngineChoice::IoUring, EngineChoice::Threads] {
        let mut e = engine(choice);
        let mut sink = HostSink::for_ranges(&ranges);
        let r = e
            .stream(&file, &ranges, RingConfig::default(), &mut sink)
            .expect("stream");
        match choice {
            EngineChoice::IoUring => assert!(
                matches!(
                    r.registered_buffers,
                    direct_io::RegisteredBuffers::Used | direct_io::RegisteredBuffers::Refused(_)
                ),
                "io_uring tries to register: {:?}",
                r.registered_buffers
            ),
            _ => assert_eq!(r.registered_buffers, direct_io::RegisteredBuffers::NotUsed),
        }
        assert!(
            sink.buffers()[0] == data[7..99_007],
            "bytes equal the file's"
        );
    }
}

/// BPF for "io_uring_setup fails with EPERM, everything else is allowed".
fn install_seccomp_denying_io_uring_setup() {
    // BPF_LD (0x00) | BPF_W (0x00) | BPF_ABS (0x20).
    const BPF_LD_W_ABS: u16 = 0x20;
    // BPF_JMP (0x05) | BPF_JEQ (0x10) | BPF_K (0x00).
    const BPF_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    #[cfg(target_arch = "x86_64")]
    const AUDIT_ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    const AUDIT_ARCH: u32 = 0xC000_00B7;
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |k, jt, jf| libc::sock_filter {
        code: BPF_JEQ_K,
        jt,
        jf,
        k,
    };
    let filter = [
        stmt(BPF_LD_W_ABS, 4), // seccomp_data.arch
        jump(AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
        stmt(BPF_LD_W_ABS, 0), // seccomp_data.nr
        jump(libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with constant arguments; required before an unprivileged filter.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(
        rc,
        0,
        "PR_SET_NO_NEW_PRIVS: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: prog points at a filter that lives across the call; TSYNC applies it to every
    // thread of this (child) process.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &prog as *const libc::sock_fprog,
        )
    };
    assert_eq!(rc, 0, "seccomp: {}", std::io::Error::last_os_error());
}

/// Runs in the child: with io_uring_setup refused, Auto picks threads and says why, a forced
/// io_uring is an error, and the thread engine still streams the file's bytes.
fn seccomp_child() {
    install_seccomp_denying_io_uring_setup();
    let forced = Engine::new(EngineChoice::IoUring, EngineConfig::default());
    assert!(
        forced.is_err(),
        "a forced io_uring is an error under the filter"
    );
    let mut e = Engine::new(EngineChoice::Auto, EngineConfig::default()).expect("auto engine");
    assert_eq!(e.kind(), EngineKind::Threads, "auto falls back to threads");
    assert!(
        matches!(e.reason(), EngineReason::IoUringSetupFailed { errno, .. } if *errno == libc::EPERM),
        "the reason records EPERM: {:?}",
        e.reason()
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("child");
    let data = write_pattern(&path, 50_000);
    let file = DirectFile::open(&path).expect("open");
    let ranges = [ByteRange {
        offset: 1,
        len: 49_998,
    }];
    let mut sink = HostSink::for_ranges(&ranges);
    e.stream(&file, &ranges, RingConfig::default(), &mut sink)
        .expect("stream on threads");
    assert!(
        sink.buffers()[0] == data[1..49_999],
        "bytes equal the file's"
    );
    println!("SECCOMP-CHILD-OK reason={}", e.reason());
}

#[test]
fn heavy_io_uring_refused_by_seccomp_falls_back_to_threads() {
    if std::env::var_os(CHILD_ENV).is_some() {
        seccomp_child();
        return;
    }
    // io_uring works in this (parent) process: Auto picks it.
    let auto = Engine::new(EngineChoice::Auto, EngineConfig::default()).expect("auto engine");
    assert_eq!(
        auto.kind(),
        EngineKind::IoUring,
        "io_uring is available here: {:?}",
        auto.reason()
    );
    assert_eq!(auto.reason(), &EngineReason::IoUringAvailable);
    let exe = std::env::current_exe().expect("path of the test binary");
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "engines::heavy_io_uring_refused_by_seccomp_falls_back_to_threads",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("SECCOMP-CHILD-OK"),
        "child under seccomp: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("errno 1"),
        "the child reports EPERM: {stdout}"
    );
}

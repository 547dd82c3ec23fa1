//! `read_at` and `read_exact_at`: bytes equal a buffered read at any offset and length, short at
//! the end and 0 past it, with a bounded number of system calls, on every filesystem.

use crate::common::{write_pattern, Rng, SIZES};
use direct_io::{AlignmentSource, CachePolicy, DirectFile, Error, ReadMode};
use fs_testbed::{run_or_skip, FsKind};
use std::path::Path;

/// Reads at random offsets and lengths (and the edge cases) and checks bytes, lengths and the
/// system-call count against the rule: one call per 8 MiB of aligned span, none past the end.
fn check_sizes(root: &Path, kind: FsKind) {
    let mut rng = Rng::new(0x5eed ^ kind.name().len() as u64);
    for size in SIZES {
        let path = root.join(format!("f{size}"));
        let data = write_pattern(&path, size);
        let file = DirectFile::open(&path).expect("open the test file");
        assert_eq!(file.size(), size, "{}: size recorded at open", kind.name());
        let align = file.alignment();
        assert!(
            align.offset.is_power_of_two() && align.memory.is_power_of_two(),
            "{}: alignment {align:?}",
            kind.name()
        );
        let mut cases: Vec<(u64, usize)> = vec![
            (0, size as usize),
            (0, size as usize + 1),
            (size.saturating_sub(1), 4096),
            (size, 1),
            (size + 4096, 10),
            (0, 0),
        ];
        for _ in 0..24 {
            let off = rng.below(size + 600);
            let len = rng.below(size.min(20_000) + 600) as usize;
            cases.push((off, len));
        }
        for (off, len) in cases {
            let mut buf = vec![0xAAu8; len];
            let before = file.read_calls();
            let got = file.read_at(off, &mut buf).unwrap_or_else(|e| {
                panic!("{}: read_at({off}, {len}) of {size}: {e}", kind.name())
            });
            let calls = file.read_calls() - before;
            let want = if off >= size {
                0
            } else {
                (len as u64).min(size - off) as usize
            };
            assert_eq!(
                got,
                want,
                "{}: read_at({off}, {len}) of a {size}-byte file is short only at the end",
                kind.name()
            );
            if want > 0 {
                assert_eq!(
                    &buf[..got],
                    &data[off as usize..off as usize + got],
                    "{}: bytes at {off}+{len} equal a buffered read",
                    kind.name()
                );
            }
            assert!(
                buf[got..].iter().all(|&b| b == 0xAA),
                "{}: nothing written past the bytes returned",
                kind.name()
            );
            let max_calls = if want == 0 {
                0
            } else {
                let a = align.offset as u64;
                let span = (off + want as u64).div_ceil(a) * a - off / a * a;
                span.div_ceil(8 << 20)
            };
            assert!(
                calls <= max_calls,
                "{}: read_at({off}, {len}) took {calls} reads, at most {max_calls} allowed",
                kind.name()
            );
            // read_exact_at: Ok exactly when the file holds every byte asked for.
            let exact = file.read_exact_at(off, &mut buf);
            match exact {
                Ok(()) => assert_eq!(want, len, "{}: exact read only when whole", kind.name()),
                Err(Error::EndOfFile {
                    path: p,
                    offset,
                    wanted,
                    available,
                }) => {
                    assert_eq!(p, path, "EndOfFile names the path");
                    assert_eq!(
                        (offset, wanted, available),
                        (off, len as u64, want as u64),
                        "{}: EndOfFile names offset, wanted and available",
                        kind.name()
                    );
                }
                Err(e) => panic!("{}: read_exact_at past the end gave {e}", kind.name()),
            }
        }
    }
}

fn probe_mode(root: &Path) -> ReadMode {
    let path = root.join("mode-probe");
    write_pattern(&path, 8192);
    let file = DirectFile::open(&path).expect("open the probe");
    file.mode().clone()
}

#[test]
fn read_at_matches_buffered_reads_on_the_default_filesystem() {
    run_or_skip(FsKind::DefaultTmp, |root| {
        check_sizes(root, FsKind::DefaultTmp)
    });
}

#[test]
fn heavy_read_at_matches_buffered_reads_on_every_mounted_filesystem() {
    for kind in [
        FsKind::Ext4,
        FsKind::Xfs,
        FsKind::Xfs4k,
        FsKind::Btrfs,
        FsKind::Tmpfs,
    ] {
        run_or_skip(kind, |root| {
            let mode = probe_mode(root);
            eprintln!("{}: read mode {mode:?}", kind.name());
            check_sizes(root, kind);
            let path = root.join("f10000");
            let file = DirectFile::open(&path).expect("open");
            let a = file.alignment();
            match kind {
                FsKind::Ext4 | FsKind::Xfs => {
                    assert!(mode.is_direct(), "{}: O_DIRECT accepted", kind.name());
                    assert_eq!(
                        a.source,
                        AlignmentSource::Statx,
                        "{}: statx reports",
                        kind.name()
                    );
                }
                FsKind::Xfs4k => {
                    assert!(mode.is_direct(), "xfs-4k: O_DIRECT accepted");
                    assert_eq!(
                        a.offset, 4096,
                        "xfs on 4096-byte sectors needs 4096 offsets"
                    );
                }
                FsKind::Btrfs => {
                    assert_ne!(
                        a.source,
                        AlignmentSource::Statx,
                        "btrfs reports no DIOALIGN here"
                    );
                    assert!(a.offset >= 4096, "btrfs falls back to at least 4096");
                }
                _ => {}
            }
        });
    }
}

/// Seed 003: on a 10,000-byte file a 4 KiB read at 8192 returns 1808, at 10000 returns 0, and a
/// file shortened after open gives EndOfFile (the aligned retry makes no progress), never a
/// failed read or a loop.
#[test]
fn a_file_shortened_after_open_is_end_of_file_not_a_failed_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ten-thousand");
    let data = write_pattern(&path, 10_000);
    let file = DirectFile::open(&path).expect("open");
    let mut buf = vec![0u8; 4096];
    assert_eq!(file.read_at(8192, &mut buf).expect("read the tail"), 1808);
    assert_eq!(&buf[..1808], &data[8192..]);
    assert_eq!(file.read_at(10_000, &mut buf).expect("read at the end"), 0);

    // Shorten to 9000 bytes: the handle still believes 10,000.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(9000))
        .expect("shorten the file");
    let before = file.read_calls();
    let got = file
        .read_at(8192, &mut buf)
        .expect("a short read, not an error");
    assert_eq!(got, 808, "the bytes the file still holds");
    assert_eq!(&buf[..808], &data[8192..9000], "and they are the file's");
    assert!(
        file.read_calls() - before <= 2,
        "one read and at most one aligned retry"
    );
    match file.read_exact_at(8192, &mut buf) {
        Err(Error::EndOfFile {
            offset,
            wanted,
            available,
            ..
        }) => assert_eq!((offset, wanted, available), (8192, 4096, 808)),
        other => panic!("wanted EndOfFile, got {other:?}"),
    }
    let msg = file
        .read_exact_at(9500, &mut buf)
        .expect_err("past the new end")
        .to_string();
    assert!(
        msg.contains("end of file") && msg.contains(&path.display().to_string()),
        "the message says end of file and names the path: {msg}"
    );
}

/// The cache policy: a file just written is in the page cache, so probing picks buffered reads;
/// after fsync and `POSIX_FADV_DONTNEED` it is not, so probing picks O_DIRECT.
#[test]
fn probing_residency_picks_buffered_for_a_cached_file_and_direct_otherwise() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cached");
    let data = write_pattern(&path, 1 << 20);
    let probe = CachePolicy::Probe { buffered_at: 0.5 };
    let file = DirectFile::open_with(&path, probe).expect("open with probe");
    assert!(
        matches!(file.mode(), ReadMode::Buffered(_)),
        "a freshly written file is cached: {:?}",
        file.mode()
    );
    let mut buf = vec![0u8; 5000];
    assert_eq!(file.read_at(100, &mut buf).expect("buffered read"), 5000);
    assert_eq!(&buf[..], &data[100..5100]);

    let f = std::fs::File::open(&path).expect("open to drop cache");
    f.sync_all().expect("fsync so the pages are clean");
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).expect("fadvise");
    let residency = direct_io::page_cache_residency(&path).expect("mincore");
    if residency.fraction() < 0.5 {
        let file = DirectFile::open_with(&path, probe).expect("open with probe");
        assert!(
            file.mode().is_direct(),
            "an uncached file is read with O_DIRECT: {residency:?}"
        );
    } else {
        panic!("DONTNEED left {residency:?} resident; the probe cannot be checked");
    }
    let forced = DirectFile::open_with(&path, CachePolicy::Buffered).expect("open buffered");
    assert!(!forced.mode().is_direct(), "buffered when asked");
}

/// Where O_DIRECT is refused at open (EINVAL; procfs here, FUSE and some network filesystems
/// elsewhere) the file is opened for buffered reads and the mode says why.
#[test]
fn o_direct_refused_at_open_falls_back_to_buffered_and_says_so() {
    let file = DirectFile::open("/proc/version").expect("open a procfs file");
    assert_eq!(
        file.mode(),
        &ReadMode::Buffered(direct_io::BufferedReason::DirectRefused),
        "procfs refuses O_DIRECT with EINVAL"
    );
}

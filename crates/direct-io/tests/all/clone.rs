//! `DirectFile::clone_range_to`: shared where the filesystem has reflinks (xfs, btrfs), the
//! destination then reading the source's bytes while a later write to the source leaves it as it
//! was; refused, with nothing changed, where it has none (ext4, tmpfs).

use direct_io::{Cloned, DirectFile};
use fs_testbed::{run_or_skip, FsKind};
use std::os::unix::fs::FileExt;

const LEN: usize = 64 << 10;

#[test]
fn a_range_is_shared_where_the_filesystem_has_reflinks_and_refused_elsewhere() {
    for kind in [FsKind::Xfs, FsKind::Btrfs, FsKind::Ext4, FsKind::Tmpfs] {
        run_or_skip(kind, |root| {
            let fs = kind.name();
            let source = root.join("source");
            let bytes: Vec<u8> = (0..2 * LEN).map(|i| (i % 251) as u8).collect();
            std::fs::write(&source, &bytes).expect("write the source");
            let file = DirectFile::open(&source).expect("open the source");
            let target = root.join("target");
            let dest = std::fs::File::create(&target).expect("create the target");
            let cloned = file
                .clone_range_to(LEN as u64, LEN as u64, &dest, 0, &target)
                .expect("clone");
            match (kind, cloned) {
                (FsKind::Xfs | FsKind::Btrfs, Cloned::Shared) => {
                    let writer = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&source)
                        .expect("open the source to write");
                    writer
                        .write_all_at(&vec![0; 2 * LEN], 0)
                        .expect("overwrite the source");
                    assert_eq!(
                        std::fs::read(&target).expect("read the target"),
                        bytes[LEN..],
                        "{fs}: the target holds the range as it was when it was shared"
                    );
                }
                (FsKind::Ext4 | FsKind::Tmpfs, Cloned::Refused(why)) => {
                    assert_eq!(
                        std::fs::metadata(&target).expect("stat the target").len(),
                        0,
                        "{fs}: a refusal changes nothing ({why})"
                    );
                }
                (_, other) => panic!("{fs}: {other:?}"),
            }
        });
    }
}

#[test]
fn an_unaligned_range_is_refused_not_an_error() {
    run_or_skip(FsKind::Xfs, |root| {
        let source = root.join("source");
        std::fs::write(&source, vec![7u8; 3 * LEN]).expect("write the source");
        let file = DirectFile::open(&source).expect("open the source");
        let target = root.join("target");
        let dest = std::fs::File::create(&target).expect("create the target");
        let cloned = file
            .clone_range_to(100, LEN as u64, &dest, 0, &target)
            .expect("an unaligned range is an answer, not an error");
        assert!(matches!(cloned, Cloned::Refused(_)), "{cloned:?}");
    });
}

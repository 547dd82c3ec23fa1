//! The sweep removes exactly the abandoned temps: never a live writer's, never a non-temp, never
//! anything outside its directory (proptest over names, kinds, ages and liveness).

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use durable_fs::{sweep, temp_name, SweepPolicy};
use proptest::prelude::*;
use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags, Timespec, Timestamps, CWD};

const MAX_AGE: u64 = 3600;

#[derive(Debug, Clone)]
enum Name {
    /// A name temp_name makes.
    Temp(String),
    /// A user's file.
    Plain(String),
    /// An NFS silly-rename.
    Nfs(String),
    /// Starts with the prefix but is not our shape.
    LookAlike(String),
}

#[derive(Debug, Clone)]
struct Spec {
    name: Name,
    dir: bool,
    symlink: bool,
    old: bool,
    age_secs: u64,
    live: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    let stem = "[a-zA-Z0-9._-]{1,20}";
    let name = prop_oneof![
        4 => stem.prop_map(Name::Temp),
        2 => stem.prop_map(Name::Plain),
        1 => stem.prop_map(Name::Nfs),
        1 => stem.prop_map(Name::LookAlike),
    ];
    (
        name,
        any::<bool>(),
        0u8..8,
        any::<bool>(),
        0u64..3000,
        any::<bool>(),
    )
        .prop_map(|(name, dir, symlink, old, age, live)| Spec {
            name,
            dir,
            symlink: symlink == 0,
            old,
            // Young ages stay well under the limit and old ones well over it, so the outcome
            // never depends on how long the test itself takes.
            age_secs: if old { MAX_AGE + 400 + age } else { age },
            live,
        })
}

fn set_age(path: &Path, age_secs: u64) {
    let t = SystemTime::now() - Duration::from_secs(age_secs);
    let d = t.duration_since(UNIX_EPOCH).expect("after the epoch");
    let ts = Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    };
    rustix::fs::utimensat(
        CWD,
        path,
        &Timestamps {
            last_access: ts,
            last_modification: ts,
        },
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("set mtime");
}

fn hold_lock(path: &Path, dir: bool) -> OwnedFd {
    let flags = if dir {
        OFlags::RDONLY | OFlags::DIRECTORY
    } else {
        OFlags::RDONLY
    };
    let fd = rustix::fs::openat(CWD, path, flags | OFlags::CLOEXEC, Mode::empty()).expect("open");
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).expect("lock as a writer");
    fd
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn sweep_removes_exactly_abandoned_temps(specs in prop::collection::vec(spec(), 1..16)) {
        let outer = tempfile::tempdir().expect("temp dir");
        let dir = outer.path().join("swept");
        std::fs::create_dir(&dir).expect("mkdir");
        // Outside the swept directory: an old abandoned temp beside it, and a symlink target.
        let outside = outer.path().join(temp_name("outside"));
        std::fs::write(&outside, b"outside").expect("write");
        set_age(&outside, MAX_AGE * 3);
        // Inside a subdirectory: sweeps do not descend.
        let sub = dir.join("sub");
        std::fs::create_dir(&sub).expect("mkdir");
        let nested = sub.join(temp_name("nested"));
        std::fs::write(&nested, b"nested").expect("write");
        set_age(&nested, MAX_AGE * 3);

        let mut expected_removed = BTreeSet::new();
        let mut kept: Vec<PathBuf> = vec![sub.clone(), nested.clone()];
        let mut locks = Vec::new();
        let (mut live, mut young) = (0, 0);
        let mut seen = BTreeSet::new();
        for s in &specs {
            let file_name = match &s.name {
                Name::Temp(stem) => temp_name(stem).to_string_lossy().into_owned(),
                Name::Plain(stem) => format!("{stem}.bin"),
                Name::Nfs(stem) => format!(".nfs{stem}"),
                Name::LookAlike(stem) => format!("{}{stem}", durable_fs::TEMP_PREFIX),
            };
            if !seen.insert(file_name.clone()) || file_name == "sub" {
                continue;
            }
            let path = dir.join(&file_name);
            if s.symlink {
                std::os::unix::fs::symlink(&outside, &path).expect("symlink");
            } else if s.dir {
                std::fs::create_dir(&path).expect("mkdir");
                std::fs::write(path.join("inner"), b"inner").expect("write");
            } else {
                std::fs::write(&path, b"data").expect("write");
            }
            let live_writer = s.live && !s.symlink;
            if live_writer {
                locks.push(hold_lock(&path, s.dir));
            }
            set_age(&path, s.age_secs);
            let ours = matches!(s.name, Name::Temp(_)) && !s.symlink;
            match (ours, s.old, live_writer) {
                (true, true, false) => { expected_removed.insert(path); }
                (true, true, true) => { live += 1; kept.push(path); }
                (true, false, _) => { young += 1; kept.push(path); }
                _ => kept.push(path),
            }
        }

        let report = sweep(&dir, &SweepPolicy { max_age: Duration::from_secs(MAX_AGE) })
            .expect("sweep");
        prop_assert!(report.errors.is_empty(), "no errors: {:?}", report.errors);
        let removed: BTreeSet<PathBuf> = report.removed.iter().cloned().collect();
        prop_assert_eq!(&removed, &expected_removed, "removed exactly the abandoned temps");
        prop_assert_eq!(report.skipped_live, live, "live writers counted");
        prop_assert_eq!(report.skipped_young, young, "young temps counted");
        for p in &expected_removed {
            prop_assert!(std::fs::symlink_metadata(p).is_err(), "{} removed", p.display());
        }
        for p in &kept {
            prop_assert!(std::fs::symlink_metadata(p).is_ok(), "{} kept", p.display());
        }
        prop_assert_eq!(std::fs::read(&outside).expect("outside file"), b"outside".to_vec());
        drop(locks);
    }
}

/// The proptest's oracle is only meaningful if a sweep that ignored locks would be caught: a
/// temp held by a live writer must survive even the most aggressive policy.
#[test]
fn sweep_never_removes_a_live_put_temp() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("target");
    durable_fs::put_with(&target, |f| {
        std::io::Write::write_all(f, b"partial")?;
        let report = sweep(
            dir.path(),
            &SweepPolicy {
                max_age: Duration::ZERO,
            },
        )
        .map_err(std::io::Error::from)?;
        assert!(
            report.removed.is_empty(),
            "a live temp was swept: {report:?}"
        );
        assert_eq!(report.skipped_live, 1, "the live temp was seen and skipped");
        Ok(())
    })
    .expect("put survives a concurrent sweep");
    assert_eq!(std::fs::read(&target).expect("read"), b"partial");
}

//! A team root whose subdirectories a member swaps for symlinks after another member opened it:
//! that member's sweep, clear and eviction must not touch anything outside the root. (The
//! two-user tests of a team root, with real users and the CLI, are in `crates/jit-cache-cli`.)

use crate::support::*;
use jit_cache::{Cache, CacheOptions, KernelSpec, RootMode};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A team root: a setgid, group-writable directory (our own primary group is the team).
fn open_team_cache(dir: &Path) -> (Cache, PathBuf) {
    let root = dir.join("team");
    std::fs::create_dir(&root).expect("mkdir team root");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770))
        .expect("chmod 2770 team root");
    let cache = Cache::open_with(
        &root,
        CacheOptions::default()
            .mode(RootMode::Team)
            .nvcc(nvcc::Nvcc::at(real_nvcc()).expect("nvcc")),
    )
    .expect("open team cache");
    (cache, root)
}

/// Everything under `dir`, as sorted relative paths.
fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for item in std::fs::read_dir(&d).expect("list outside dir").flatten() {
            let path = item.path();
            if item.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(path.clone());
            }
            out.push(path.strip_prefix(dir).expect("under dir").to_path_buf());
        }
    }
    out.sort();
    out
}

/// An outside directory holding what each maintenance step would remove if it were sent there:
/// plain files (clear of slots/failures, trash removal), an old file with a durable-fs temp name
/// (the staging sweep), and a directory (trash removal).
fn outside_dir(dir: &Path, name: &str) -> PathBuf {
    let outside = dir.join(name);
    std::fs::create_dir_all(outside.join("project")).expect("mkdir outside");
    std::fs::write(outside.join("precious.json"), b"{}").expect("write precious file");
    std::fs::write(outside.join("project").join("main.cu"), b"// mine").expect("write source");
    let temp = outside.join(durable_fs::temp_name("staging"));
    std::fs::write(&temp, b"looks like a leftover").expect("write temp-named file");
    set_mtime(&temp, 1_000_000_000);
    outside
}

#[test]
fn subdirectories_swapped_for_symlinks_after_open_keep_sweep_and_clear_inside_the_root() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cache, root) = open_team_cache(dir.path());
    let spec = KernelSpec::from_text("swapped", "swapped.cu", kernel_text(21));
    let built = cache.get_or_build(&spec).expect("build");
    let entry_dir = built
        .artifact
        .path()
        .parent()
        .expect("entry dir")
        .to_path_buf();
    drop(built);

    // Another member, with the same rights in the root, moves the real directories aside and
    // plants symlinks to directories outside the root in their place.
    let v1 = root.join(jit_cache::FORMAT_DIR);
    let mut outside = Vec::new();
    for sub in ["trash", "slots", "failures", "staging", "state"] {
        let target = outside_dir(dir.path(), &format!("outside-{sub}"));
        std::fs::rename(v1.join(sub), v1.join(format!("{sub}-moved"))).expect("move aside");
        std::os::unix::fs::symlink(&target, v1.join(sub)).expect("plant symlink");
        outside.push((target.clone(), listing(&target)));
    }

    let cleared = cache.clear().expect("clear in a subverted root");
    let swept = cache.sweep().expect("sweep in a subverted root");

    for (target, before) in &outside {
        assert_eq!(
            &listing(target),
            before,
            "{} is outside the root: clear and sweep must neither remove nor add anything there",
            target.display()
        );
    }
    assert_eq!(
        cleared.evicted, 1,
        "the entry was still evicted, into the trash directory opened at open"
    );
    assert!(
        !entry_dir.exists(),
        "the evicted entry left its place in the root"
    );
    assert!(
        std::fs::read_dir(v1.join("trash-moved"))
            .expect("the real trash")
            .next()
            .is_none(),
        "the real trash was swept (clear swept {}, sweep {swept})",
        cleared.swept
    );
}

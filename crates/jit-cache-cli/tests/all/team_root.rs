//! A team root used by two real users of one group, each with umask 022: what one member builds,
//! the other hits, verifies, evicts, clears, rebuilds and imports from the first one's pack, with
//! no permission error and no uncached fallback. The users are created with `useradd` for the test (it runs as root, as
//! `cargo xtask test` does); elsewhere it says why it skipped, and under `cargo xtask test`
//! (`FS_TESTBED_REQUIRE=1`) a skip is a failure.

use crate::support::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Returns why the test cannot run here, or None.
fn why_not_runnable() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("it creates two users with useradd, which needs root".into());
    }
    for tool in ["useradd", "groupadd", "userdel", "groupdel"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

/// Prints why the test skipped, or fails under `cargo xtask test`, where skips are failures
/// (the convention of fs-testbed's `FS_TESTBED_REQUIRE`).
fn skip(test: &str, why: &str) {
    if std::env::var_os("FS_TESTBED_REQUIRE").is_some_and(|v| v == "1") {
        panic!("{test} cannot run: {why} (FS_TESTBED_REQUIRE=1: a skip is a failure)");
    }
    eprintln!("{test} skipped: {why}");
}

fn run_checked(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a user-management command");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A group and two members, made for this test run (names carry the pid) and removed on drop;
/// removal tolerates leftovers of an earlier run.
struct Team {
    group: String,
    gid: u32,
    members: Vec<(String, u32)>,
}

impl Team {
    fn create() -> Team {
        let pid = std::process::id();
        let group = format!("jct{pid}");
        let mut team = Team {
            group: group.clone(),
            gid: 0,
            members: Vec::new(),
        };
        run_checked(Command::new("groupadd").arg(&group));
        team.gid = run_checked(Command::new("getent").args(["group", &group]))
            .split(':')
            .nth(2)
            .and_then(|g| g.parse().ok())
            .expect("the new group's gid");
        for who in ["a", "b"] {
            let name = format!("jc{who}{pid}");
            run_checked(Command::new("useradd").args([
                "-M",
                "-N",
                "-g",
                &group,
                "-s",
                "/usr/sbin/nologin",
                &name,
            ]));
            let uid = run_checked(Command::new("id").args(["-u", &name]))
                .parse()
                .expect("the new user's uid");
            team.members.push((name, uid));
        }
        team
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        for (name, _) in &self.members {
            let _ = Command::new("userdel").arg(name).output();
        }
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

thread_local! {
    /// The CLI binary and the real nvcc, as the members reach them (`with_reachable`).
    static REACHABLE: std::cell::RefCell<Option<(PathBuf, PathBuf)>> =
        const { std::cell::RefCell::new(None) };
}

/// The CLI binary and the real nvcc where the members can run them.
fn reachable() -> (PathBuf, PathBuf) {
    REACHABLE
        .with(|r| r.borrow().clone())
        .expect("inside with_reachable")
}

/// The CLI run as `uid` with the team as its only group, umask 022, on the team root.
fn as_member(uid: u32, gid: u32, home: &Path, root: &Path, args: &[&str]) -> Output {
    let (binary, nvcc) = reachable();
    Command::new("/bin/sh")
        .args(["-c", "umask 022 && exec \"$0\" \"$@\""])
        .arg(binary)
        .arg("--cache-dir")
        .arg(root)
        .args(["--team", "--json"])
        .args(args)
        .env("NVCC", nvcc)
        .env("HOME", home)
        // In a directory the member can enter (the test's may be under one it cannot).
        .current_dir(home)
        .env_remove("JIT_CACHE_DIR")
        .env_remove("XDG_CACHE_HOME")
        // std drops root's supplementary groups (setgroups(0)) before setgid and setuid.
        .gid(gid)
        .uid(uid)
        .output()
        .expect("run jit-cache as a team member")
}

/// Runs the CLI as a member and returns its JSON document, failing on an error exit, on a
/// permission error and on any warning (an uncached fallback says so with one).
fn json_as(
    member: (&str, u32),
    gid: u32,
    home: &Path,
    root: &Path,
    args: &[&str],
) -> serde_json::Value {
    let out = as_member(member.1, gid, home, root, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({:?}): {stderr}{}",
        member.0,
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !stderr.contains("warning") && !stderr.contains("Permission denied"),
        "{} {args:?}: no warning, no permission error: {stderr}",
        member.0
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

fn outcome(doc: &serde_json::Value) -> String {
    doc["results"][0]["outcome"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| panic!("a build result: {doc}"))
}

/// Every file of every entry under `root` is 0660 (two entries of artifact, compiler record
/// and meta at least).
fn assert_team_entry_files(root: &Path) {
    let mut entry_files = Vec::new();
    let mut dirs = vec![root.join(jit_cache::FORMAT_DIR).join("entries")];
    while let Some(dir) = dirs.pop() {
        for item in std::fs::read_dir(&dir).expect("list entries").flatten() {
            if item.file_type().expect("file type").is_dir() {
                dirs.push(item.path());
            } else {
                entry_files.push(item.path());
            }
        }
    }
    assert!(
        entry_files.len() >= 6,
        "two entries of artifact, compiler record and meta: {entry_files:?}"
    );
    for file in &entry_files {
        assert_eq!(mode_of(file), 0o660, "{} is 0660", file.display());
    }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn two_members_with_umask_022_share_build_gc_verify_and_clear_without_eacces() {
    let test = "two_members_with_umask_022_share_build_gc_verify_and_clear_without_eacces";
    if let Some(why) = why_not_runnable() {
        return skip(test, &why);
    }
    // The members run what this checkout built, which may sit under a directory they cannot
    // enter (a clone under /root): they run it through read-only bind mounts they can reach.
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_jit-cache"));
    let nvcc = real_nvcc();
    let toolkit = nvcc
        .parent()
        .and_then(Path::parent)
        .expect("nvcc's toolkit root")
        .to_path_buf();
    let ran = fs_testbed::with_reachable(
        &[binary.parent().expect("the binary's directory"), &toolkit],
        |reach| {
            let name = binary.file_name().expect("binary name");
            REACHABLE.with(|r| {
                *r.borrow_mut() = Some((reach[0].join(name), reach[1].join("bin").join("nvcc")))
            });
            members_share_a_team_root();
        },
    );
    if let Err(skipped) = ran {
        skip(test, &skipped.to_string());
    }
}

fn members_share_a_team_root() {
    let team = Team::create();
    let (gid, a, b) = (
        team.gid,
        (team.members[0].0.as_str(), team.members[0].1),
        (team.members[1].0.as_str(), team.members[1].1),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    // The members must reach the sources and the root through the test's temp dir.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // No read touches an access time here (noatime, in this test's own mount namespace), so a
    // last-use stamp moves only when the cache sets it: relatime would refresh it on a read
    // and hide whether a member's hit did.
    rustix::mount::mount_bind(dir.path(), dir.path()).expect("bind the test's dir");
    rustix::mount::mount_remount(
        dir.path(),
        rustix::mount::MountFlags::BIND | rustix::mount::MountFlags::NOATIME,
        "",
    )
    .expect("remount it noatime");
    let root = dir.path().join("team");
    std::fs::create_dir(&root).expect("mkdir team root");
    std::os::unix::fs::chown(&root, None, Some(gid)).expect("chgrp team root");
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2770)).expect("chmod 2770");
    let mut homes = Vec::new();
    for (name, uid) in [a, b] {
        let home = dir.path().join(format!("home-{name}"));
        std::fs::create_dir(&home).expect("mkdir home");
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).expect("chown home");
        homes.push(home);
    }
    let (home_a, home_b) = (&homes[0], &homes[1]);
    let sources: Vec<PathBuf> = (0..2)
        .map(|n| {
            let path = dir.path().join(format!("k{n}.cu"));
            std::fs::write(&path, kernel_text(40 + n)).expect("write kernel");
            path
        })
        .collect();
    let (k0, k1) = (
        sources[0].to_str().expect("utf-8 path"),
        sources[1].to_str().expect("utf-8 path"),
    );

    // Member A builds; member B hits A's entries.
    assert_eq!(
        outcome(&json_as(a, gid, home_a, &root, &["build", k0])),
        "built"
    );
    assert_eq!(
        outcome(&json_as(a, gid, home_a, &root, &["build", k1])),
        "built"
    );
    // B's hit refreshes the last-use stamp of A's entry (what eviction orders by, and under
    // the shared protocol the pin other hosts see): it was never refreshed, since setting a
    // time of one's choosing is the owner's right alone (seen failing: the stamp stayed two
    // hours old).
    let built_a = json_as(a, gid, home_a, &root, &["build", k0]);
    let artifact = PathBuf::from(built_a["results"][0]["path"].as_str().expect("a path"));
    let two_hours_ago = rustix::fs::Timespec {
        tv_sec: now_secs() - 7200,
        tv_nsec: 0,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        &artifact,
        &rustix::fs::Timestamps {
            last_access: two_hours_ago,
            last_modification: two_hours_ago,
        },
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("age A's artifact");
    assert_eq!(
        outcome(&json_as(b, gid, home_b, &root, &["build", k0])),
        "hit",
        "B hits the entry A built"
    );
    let stamp = std::fs::metadata(&artifact)
        .expect("stat A's artifact")
        .atime();
    assert!(
        now_secs() - stamp < 600,
        "B's hit refreshed the stamp of A's entry ({}s old)",
        now_secs() - stamp
    );
    // Every file of an entry A published is the team's to read, whatever A's umask.
    assert_team_entry_files(&root);
    // A ships both entries as a pack (in A's home, readable by B), imported below.
    let pack = home_a.join("team.pack");
    let pack_arg = pack.to_str().expect("utf-8 path");
    let exported = json_as(a, gid, home_a, &root, &["pack", "export", "-o", pack_arg]);
    assert_eq!(exported["export"]["entries"], 2, "{exported}");
    // B verifies A's entries, then evicts them: moving another member's entry aside and
    // removing it from the trash needs the group's write permission on it.
    let verified = json_as(b, gid, home_b, &root, &["verify"]);
    assert_eq!(verified["verify"]["checked"], 2, "{verified}");
    assert_eq!(
        verified["verify"]["corrupt"].as_array().map(Vec::len),
        Some(0),
        "{verified}"
    );
    let gc = json_as(b, gid, home_b, &root, &["gc", "--max-size", "0"]);
    assert_eq!(gc["gc"]["evicted"], 2, "B evicts both of A's entries: {gc}");
    // B builds again (cached, no fallback), A hits B's entry, B clears everything. After the
    // eviction the slot remembers the entry, so a build is a "rebuilt".
    let compiled = |o: String| o == "built" || o == "rebuilt";
    let again = outcome(&json_as(b, gid, home_b, &root, &["build", k0]));
    assert!(compiled(again.clone()), "B compiles again: {again}");
    assert_eq!(
        outcome(&json_as(a, gid, home_a, &root, &["build", k0])),
        "hit",
        "A hits the entry B built"
    );
    let again = outcome(&json_as(a, gid, home_a, &root, &["build", k1]));
    assert!(compiled(again.clone()), "A compiles again: {again}");
    let cleared = json_as(b, gid, home_b, &root, &["clear"]);
    assert_eq!(cleared["clear"]["evicted"], 2, "{cleared}");
    let stats = json_as(a, gid, home_a, &root, &["stats"]);
    assert_eq!(stats["stats"]["entries"], 0, "{stats}");
    assert_eq!(
        stats["stats"]["builds_recorded"], 4,
        "both members' builds reach the shared event log: {stats}"
    );
    assert_eq!(
        stats["stats"]["trash"], 0,
        "B's clear emptied the trash: {stats}"
    );
    // B imports A's pack into the cleared root: A hits both entries, and their files are the
    // team's whoever imported them.
    let imported = json_as(b, gid, home_b, &root, &["pack", "import", pack_arg]);
    assert_eq!(imported["import"]["imported"], 2, "{imported}");
    for k in [k0, k1] {
        assert_eq!(
            outcome(&json_as(a, gid, home_a, &root, &["build", k])),
            "hit",
            "A hits the entry B imported"
        );
    }
    assert_team_entry_files(&root);

    // Whatever the umask, the group can write every directory and lock file.
    let v1 = root.join(jit_cache::FORMAT_DIR);
    for sub in ["entries", "slots", "failures", "locks", "trash", "state"] {
        assert_eq!(mode_of(&v1.join(sub)), 0o2770, "{sub} is 2770");
    }
    // Staging is sticky: B may make directories there but not rename A's (and plant one of
    // B's own making for A's build to publish).
    assert_eq!(mode_of(&v1.join("staging")), 0o3770, "staging is 3770");
    let made = as_member_shell(
        a.1,
        gid,
        &format!("mkdir '{}/staging/a-build'", v1.display()),
    );
    assert!(made.status.success(), "A makes a directory: {made:?}");
    let renamed = as_member_shell(
        b.1,
        gid,
        &format!(
            "mv '{0}/staging/a-build' '{0}/staging/b-moved'",
            v1.display()
        ),
    );
    assert!(
        !renamed.status.success(),
        "B cannot rename A's staging directory"
    );
    assert!(v1.join("staging/a-build").is_dir());
    std::fs::remove_dir(v1.join("staging/a-build")).expect("remove A's directory");
    assert_eq!(
        mode_of(&v1.join("state/events.log")),
        0o660,
        "every member appends to the event log"
    );
    let locks: Vec<_> = std::fs::read_dir(v1.join("locks"))
        .expect("locks")
        .flatten()
        .collect();
    assert!(!locks.is_empty(), "the builds took key locks");
    for lock in locks {
        let meta = lock.metadata().expect("stat lock file");
        assert_eq!(
            meta.permissions().mode() & 0o777,
            0o660,
            "{} is 0660, so every member opens it read-write",
            lock.path().display()
        );
        assert_eq!(meta.gid(), gid, "lock files belong to the team");
    }

    // A member who swaps the trash for a symlink to a directory outside the root: the other
    // member's clear refuses the root and touches nothing there.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).expect("mkdir outside");
    std::os::unix::fs::chown(&outside, Some(b.1), Some(gid)).expect("chown outside");
    std::fs::write(outside.join("precious"), b"b's file").expect("write outside file");
    std::os::unix::fs::chown(outside.join("precious"), Some(b.1), Some(gid)).expect("chown");
    let swap = as_member_shell(
        a.1,
        gid,
        &format!(
            "mv '{0}/trash' '{0}/trash-moved' && ln -s '{1}' '{0}/trash'",
            v1.display(),
            outside.display()
        ),
    );
    assert!(swap.status.success(), "A swaps the trash: {swap:?}");
    let refused = as_member(b.1, gid, home_b, &root, &["clear"]);
    assert!(
        !refused.status.success(),
        "B's clear refuses a root whose trash is a symlink"
    );
    assert!(
        outside.join("precious").exists(),
        "nothing outside the root was removed"
    );
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

fn as_member_shell(uid: u32, gid: u32, script: &str) -> Output {
    Command::new("/bin/sh")
        .args(["-c", script])
        .gid(gid)
        .uid(uid)
        .output()
        .expect("run a shell as a team member")
}

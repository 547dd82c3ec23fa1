//! The cache's promises across hosts (issue 13), each with its negative control: the same
//! scenario under an injected bug (jit-cache's `failpoints`) must break the promise visibly.

use crate::support::*;
use nfs_sim::{Cluster, Locks};
use std::path::PathBuf;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// Host 0 builds a kernel whose compile waits at a gate; meanwhile the build is made to look
/// 30 s old (its staging mtimes forged) and host 1 sweeps, with `bug` injected there. Returns
/// how many leftovers host 1 swept and host 0's answer.
fn builder_against_a_sweeper(bug: Option<&str>) -> Option<(u64, serde_json::Value)> {
    let c = cluster(2, Duration::from_secs(1), Locks::Shared)?;
    let bench = Bench::new();
    let root = c.root().join("cache");
    let root_s = root.to_str().expect("utf-8 path").to_string();
    let nvcc = bench.nvcc.to_str().expect("utf-8 path").to_string();
    let gate = bench.path("gate");
    let gate_s = gate.to_str().expect("utf-8").to_string();
    let builder = host_op(
        &c,
        0,
        &bench,
        &[("FAKE_NVCC_GATE", &gate_s)],
        &["build", &root_s, &nvcc, "slow"],
    );
    wait_until("host 0's compile to start", LONG, || {
        bench.path("gate.waiting").exists()
    });
    let staging = root.join(jit_cache::FORMAT_DIR).join("staging");
    c.on(1, move || age_children(&staging, 30));
    let env: Vec<(&str, &str)> = bug
        .map(|b| ("JIT_CACHE_INJECT_BUG", b))
        .into_iter()
        .collect();
    let sweep = answer(host_op(&c, 1, &bench, &env, &["sweep", &root_s]));
    std::fs::write(&gate, b"").expect("open the gate");
    let built = answer(builder);
    Some((sweep["swept"].as_u64().expect("a count"), built))
}

#[test]
fn a_builder_on_one_host_is_never_swept_by_another() {
    let Some((swept, built)) = builder_against_a_sweeper(None) else {
        return;
    };
    assert_eq!(swept, 0, "host 1 removed nothing of host 0's live build");
    assert_eq!(built["outcome"], "built", "{built}");
    assert_eq!(
        built["cached"], true,
        "published in the cache, no warning: {built}"
    );
}

#[test]
fn negative_control_the_two_second_sweep_removes_a_live_build_on_another_host() {
    let Some((swept, built)) = builder_against_a_sweeper(Some("sweep-2s")) else {
        return;
    };
    assert!(
        swept >= 1,
        "the old rule swept host 0's live staging: {swept}"
    );
    // Without its staging the build fails (the source vanished mid-compile) or falls back to
    // an uncached compile with a warning.
    assert_ne!(
        built["cached"], true,
        "host 0's build lost its staging: {built}"
    );
}

/// Host 0 builds and holds an artifact; host 1 clears the cache (with `bug` injected there);
/// host 0 then reads its artifact's path, asking the server (actimeo 0: a cached lookup could
/// still find a moved entry's files). Returns host 1's clear report and host 0's answer.
fn holder_against_a_clear(bug: Option<&str>) -> Option<(serde_json::Value, serde_json::Value)> {
    let c = cluster_with(&[Duration::ZERO, Duration::from_secs(1)], Locks::Shared)?;
    let bench = Bench::new();
    let root_s = c.root().join("cache").to_str().expect("utf-8").to_string();
    let nvcc = bench.nvcc.to_str().expect("utf-8").to_string();
    let holder = Holder::start(&c, &bench, &root_s, &nvcc, "held");
    let env: Vec<(&str, &str)> = bug
        .map(|b| ("JIT_CACHE_INJECT_BUG", b))
        .into_iter()
        .collect();
    let cleared = answer(host_op(&c, 1, &bench, &env, &["clear", &root_s]));
    Some((cleared, holder.release()))
}

#[test]
fn gc_on_another_host_never_evicts_a_held_entry() {
    let Some((cleared, held)) = holder_against_a_clear(None) else {
        return;
    };
    assert_eq!(cleared["evicted"], 0, "{cleared}");
    assert_eq!(
        cleared["skipped_busy"], 1,
        "the held entry counts as pinned: {cleared}"
    );
    assert_eq!(
        held["held_ok"], true,
        "Artifact::path() still reads the bytes on host 0: {held}"
    );
}

#[test]
fn negative_control_pins_by_directory_flock_only_let_another_host_evict_a_held_entry() {
    let Some((cleared, held)) = holder_against_a_clear(Some("pin-flock-only")) else {
        return;
    };
    assert_eq!(
        cleared["evicted"], 1,
        "host 1 cannot see host 0's directory flock: {cleared}"
    );
    assert_eq!(held["held_ok"], false, "host 0's path dangles: {held}");
}

/// Host 0 built a kernel long ago (its stamp aged past the grace). Host 1's `clear` looks at the
/// stamp and stops just before it marks the entry for eviction (failpoint `evicting:pause`);
/// host 0 then hits the entry and holds it; host 1 goes on (with `bug` injected there). With
/// `at_second_look`, host 1 stops again just before its second look at the stamp, and host 0
/// reads its held path then. Returns host 1's clear report and host 0's answer.
///
/// Host 1 caches attributes for 3 s: its first look cached the entry's, and its second look
/// sees the hit only because it opens each file, which revalidates them (close-to-open; without
/// nfs-sim's revalidation at open this test fails). Host 0 caches nothing (actimeo 0), so each
/// read of its held path asks the server: with a cached lookup it would find the moved
/// directory's files wherever they went, and whether a path dangled would depend on timing (the
/// negative control once read its dangling path through host 0's cache, under load).
fn hit_between_an_evictions_look_and_its_move(
    bug: Option<&str>,
    at_second_look: bool,
) -> Option<(serde_json::Value, serde_json::Value)> {
    let c = cluster_with(&[Duration::ZERO, Duration::from_secs(3)], Locks::Shared)?;
    let bench = Bench::new();
    let root_s = c.root().join("cache").to_str().expect("utf-8").to_string();
    let nvcc = bench.nvcc.to_str().expect("utf-8").to_string();
    let built = answer(host_op(
        &c,
        0,
        &bench,
        &[],
        &["build", &root_s, &nvcc, "late"],
    ));
    let entry = PathBuf::from(built["path"].as_str().expect("a path"))
        .parent()
        .expect("entry dir")
        .to_path_buf();
    c.on(0, move || age_children(&entry, 3600));
    let phase = bench.path("clear.phase");
    std::fs::write(&phase, b"").expect("phase file");
    let phase_s = phase.to_str().expect("utf-8").to_string();
    let points = if at_second_look {
        "evicting:pause,evicting-second-look:pause"
    } else {
        "evicting:pause"
    };
    let mut env = vec![
        ("JIT_CACHE_FAILPOINT", points),
        ("JIT_CACHE_PHASE_FILE", phase_s.as_str()),
    ];
    if let Some(bug) = bug {
        env.push(("JIT_CACHE_INJECT_BUG", bug));
    }
    let clear = host_op(&c, 1, &bench, &env, &["clear", &root_s]);
    let pid = clear.id();
    let stopped_at = |point: &str| {
        let stopped = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        });
        stopped && std::fs::read_to_string(&phase).is_ok_and(|p| p.trim_end() == point)
    };
    let resume = || {
        let stopped = rustix::process::Pid::from_raw(pid as i32).expect("a pid");
        rustix::process::kill_process(stopped, rustix::process::Signal::CONT).expect("continue");
    };
    wait_until("host 1's clear to stop before its mark", LONG, || {
        stopped_at("evicting")
    });
    let holder = Holder::start(&c, &bench, &root_s, &nvcc, "late");
    resume();
    let held = if at_second_look {
        wait_until(
            "host 1's clear to stop before its second look",
            LONG,
            || stopped_at("evicting-second-look"),
        );
        let held = holder.release();
        resume();
        held
    } else {
        holder.release()
    };
    Some((answer(clear), held))
}

#[test]
fn a_hit_between_an_evictions_look_and_its_move_keeps_its_path() {
    let Some((cleared, held)) = hit_between_an_evictions_look_and_its_move(None, false) else {
        return;
    };
    assert_eq!(held["outcome"], "hit", "{held}");
    assert_eq!(
        cleared["evicted"], 0,
        "the second look saw the hit and called the eviction off: {cleared}"
    );
    assert_eq!(
        held["held_ok"], true,
        "Artifact::path() still reads the bytes on host 0: {held}"
    );
}

/// The CI failure of a multi-host crash run (`pin-vanished`): an eviction moved the entry aside
/// before its second look and put it back after, so a reader on another host that had just
/// found the entry saw its path name nothing in between (seen failing: host 0's held path read
/// nothing while host 1 stood at its second look). The eviction now marks the entry and looks
/// again before it moves anything.
#[test]
fn a_held_path_names_its_entry_at_every_instant_of_an_eviction_called_off() {
    let Some((cleared, held)) = hit_between_an_evictions_look_and_its_move(None, true) else {
        return;
    };
    assert_eq!(held["outcome"], "hit", "{held}");
    assert_eq!(
        held["held_ok"], true,
        "host 0's path reads its bytes while host 1 stands at its second look: {held}"
    );
    assert_eq!(cleared["evicted"], 0, "{cleared}");
}

/// An eviction killed between its mark and its move leaves a whole entry marked: a reader on
/// another host misses it (and does not refresh its stamp), and the next build there moves it
/// aside and publishes its own, which then hits, with no warning and no private copy.
#[test]
fn an_entry_marked_by_a_killed_eviction_is_rebuilt_once_and_then_hits() {
    let Some(c) = cluster(2, Duration::ZERO, Locks::Shared) else {
        return;
    };
    let bench = Bench::new();
    let root_s = c.root().join("cache").to_str().expect("utf-8").to_string();
    let nvcc = bench.nvcc.to_str().expect("utf-8").to_string();
    let build = || {
        answer(host_op(
            &c,
            0,
            &bench,
            &[],
            &["build", &root_s, &nvcc, "marked"],
        ))
    };
    let built = build();
    let entry = PathBuf::from(built["path"].as_str().expect("a path"))
        .parent()
        .expect("entry dir")
        .to_path_buf();
    let aged = entry.clone();
    c.on(0, move || age_children(&aged, 3600));
    let killed = host_op(
        &c,
        1,
        &bench,
        &[("JIT_CACHE_FAILPOINT", "evicting-second-look:abort")],
        &["clear", &root_s],
    )
    .wait_with_output()
    .expect("host 1's clear ran");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed.status),
        Some(9),
        "killed between its mark and its move"
    );
    let marked = entry.join("meta.json");
    let mtime = c.on(0, move || {
        std::os::unix::fs::MetadataExt::mtime(&std::fs::metadata(&marked).expect("meta.json"))
    });
    assert_eq!(mtime, 0, "the entry is left whole and marked");
    let again = build();
    assert!(
        again["outcome"]
            .as_str()
            .is_some_and(|o| o.starts_with("rebuilt")),
        "a marked entry is a miss: {again}"
    );
    assert_eq!(again["cached"], true, "{again}");
    assert!(again["warning"].is_null(), "no private copy: {again}");
    assert_eq!(bench.compiles(0, "marked"), 2);
    let hit = build();
    assert_eq!(hit["outcome"], "hit", "{hit}");
    assert_eq!(bench.compiles(0, "marked"), 2);
}

#[test]
fn negative_control_an_eviction_with_one_look_takes_an_entry_hit_meanwhile() {
    let Some((cleared, held)) =
        hit_between_an_evictions_look_and_its_move(Some("evict-one-look"), false)
    else {
        return;
    };
    assert_eq!(cleared["evicted"], 1, "{cleared}");
    assert_eq!(held["held_ok"], false, "host 0's path dangles: {held}");
}

/// `local` locks and a long actimeo: host 1 looks the kernel up (priming a negative entry for
/// its variant directory) and compiles behind a gate; host 0 builds and publishes the same key
/// meanwhile (its key lock is invisible to host 1); then host 1 finishes with `bug` injected.
/// Returns host 1's answer and how many compiles it ran.
fn loser_hidden_from_the_winner(bug: Option<&str>) -> Option<(serde_json::Value, usize)> {
    let c: Cluster = cluster(2, Duration::from_secs(30), Locks::Local)?;
    let bench = Bench::new();
    let root = c.root().join("cache");
    let root_s = root.to_str().expect("utf-8").to_string();
    let nvcc = bench.nvcc.to_str().expect("utf-8").to_string();
    // A first build and eviction leave the key directory in place with no variant in it.
    let first = answer(host_op(
        &c,
        0,
        &bench,
        &[],
        &["build", &root_s, &nvcc, "raced"],
    ));
    let entry = PathBuf::from(first["path"].as_str().expect("a path"))
        .parent()
        .expect("entry dir")
        .to_path_buf();
    let aged = entry.clone();
    c.on(0, move || age_children(&aged, 3600));
    let cleared = answer(host_op(&c, 0, &bench, &[], &["clear", &root_s]));
    assert_eq!(
        cleared["evicted"], 1,
        "setup: the first entry is evicted: {cleared}"
    );
    let gate = bench.path("gate");
    let gate_s = gate.to_str().expect("utf-8").to_string();
    let mut env = vec![("FAKE_NVCC_GATE", gate_s.as_str())];
    if let Some(bug) = bug {
        env.push(("JIT_CACHE_INJECT_BUG", bug));
    }
    let loser = host_op(&c, 1, &bench, &env, &["build", &root_s, &nvcc, "raced"]);
    wait_until("host 1's compile to start", LONG, || {
        bench.path("gate.waiting").exists()
    });
    // Host 1 looks at the variant's path while it is absent (the cache itself lists variants
    // with readdir, which is never cached; any stat primes it): a negative entry for 30 s.
    let primed = entry.clone();
    assert!(
        c.on(1, move || std::fs::symlink_metadata(&primed).is_err()),
        "setup: the variant is absent on host 1"
    );
    let winner = answer(host_op(
        &c,
        0,
        &bench,
        &[],
        &["build", &root_s, &nvcc, "raced"],
    ));
    assert_eq!(winner["cached"], true, "host 0 published: {winner}");
    std::fs::write(&gate, b"").expect("open the gate");
    let lost = answer(loser);
    Some((lost, bench.compiles(1, "raced")))
}

#[test]
fn a_loser_that_cannot_see_the_winner_uses_its_own_output() {
    let Some((lost, compiles)) = loser_hidden_from_the_winner(None) else {
        return;
    };
    assert!(
        lost.get("error").is_none(),
        "no request fails because of another host: {lost}"
    );
    assert_eq!(lost["outcome"], "built", "{lost}");
    assert_eq!(
        lost["cached"], false,
        "the winner was hidden, so host 1 answered with a private copy of its output: {lost}"
    );
    assert_eq!(
        compiles, 1,
        "host 1 compiled once and answered with its own output: {lost}"
    );
}

#[test]
fn negative_control_a_loser_that_asserts_the_winner_is_visible_fails_or_compiles_again() {
    let Some((lost, compiles)) = loser_hidden_from_the_winner(Some("loser-asserts")) else {
        return;
    };
    assert!(
        lost.get("error").is_some() || compiles > 1,
        "the asserting loser cannot use the winner it cannot see: {lost}, {compiles} compiles"
    );
}

/// Shared locks: a stored entry's producer on host 0 dies between its rename and its note (the
/// failpoint `store-published`), after host 1 looked the entry up (priming a negative entry for
/// it, 10 s). Host 1 then asks for it: its cached miss hides the entry and there is no note, so
/// it produces too, and its commit's no-replace rename finds host 0's entry. It must answer with
/// that entry (once its miss expires), not fail because the entry "vanished".
#[test]
fn a_producer_whose_rename_finds_an_unnoted_entry_answers_with_it() {
    let Some(c) = cluster(2, Duration::from_secs(10), Locks::Shared) else {
        return;
    };
    let bench = Bench::new();
    let root_s = c.root().join("cache").to_str().expect("utf-8").to_string();
    let killed_at = |point: &str| {
        let failpoint = format!("{point}:abort");
        let out = host_op(
            &c,
            0,
            &bench,
            &[("JIT_CACHE_FAILPOINT", &failpoint)],
            &["store", &root_s, "k"],
        )
        .wait_with_output()
        .expect("host-op ran");
        assert!(
            out.status.code().is_none(),
            "host 0 was killed at {point}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    };
    // A producer killed before its rename leaves the key directory, no entry and no note.
    killed_at("store-publishing");
    let primed = answer(host_op(&c, 1, &bench, &[], &["store-get", &root_s, "k"]));
    assert_eq!(
        primed["data"],
        serde_json::Value::Null,
        "setup: a miss on host 1: {primed}"
    );
    killed_at("store-published");
    let answered = answer(host_op(&c, 1, &bench, &[], &["store", &root_s, "k"]));
    assert!(
        answered.get("error").is_none(),
        "no request fails because another host died before its note: {answered}"
    );
    assert_eq!(answered["data"], "k", "{answered}");
}

#[test]
fn the_cache_detects_the_shared_filesystem_reports_it_and_can_be_told_otherwise() {
    let Some(c) = cluster(1, Duration::from_secs(1), Locks::Shared) else {
        return;
    };
    let bench = Bench::new();
    let on_mount = c.root().join("cache");
    let local = bench.path("local-cache");
    let stats = |root: &std::path::Path, env: &[(&str, &str)]| {
        let root = root.to_str().expect("utf-8").to_string();
        answer(host_op(&c, 0, &bench, env, &["stats", &root]))["stats"].clone()
    };
    let detected = stats(&on_mount, &[]);
    assert_eq!(detected["filesystem"], "fuse", "{detected}");
    assert_eq!(
        detected["protocol"], "shared",
        "FUSE may be a network filesystem: {detected}"
    );
    let told = stats(&on_mount, &[("JIT_CACHE_SHARING", "local")]);
    assert_eq!(told["protocol"], "local", "an explicit choice wins: {told}");
    let plain = stats(&local, &[]);
    assert_eq!(
        plain["protocol"], "local",
        "a local disk keeps the local protocol: {plain}"
    );
    let forced = stats(&local, &[("JIT_CACHE_SHARING", "shared")]);
    assert_eq!(forced["protocol"], "shared", "{forced}");
}

/// The real nvcc (`NVCC`, else the project's venv); under `cargo xtask test` its absence fails.
fn real_nvcc() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NVCC") {
        return Some(PathBuf::from(path));
    }
    match nvcc::Nvcc::locate() {
        Ok(found) => Some(found.path().to_path_buf()),
        Err(e) if fs_testbed::skips_are_failures() => panic!("the real nvcc: {e}"),
        Err(e) => {
            eprintln!("skipped: no real nvcc: {e}");
            None
        }
    }
}

/// Issue 20, class 7: on a shared root a hit trusted a plain `stat`, which an NFS client answers
/// from its attribute cache within `actimeo`, while nvcc's `open` revalidates with the server. A
/// header edited on host A (same size) was served stale on host B until B's cached attributes
/// expired; the hit now asks the server (`statx` with `AT_STATX_FORCE_SYNC`). Real nvcc, the
/// project and the root both on the export. Seen failing before the change: B answered 1111.
#[test]
fn heavy_a_header_edited_on_another_host_is_seen_at_once() {
    let Some(nvcc) = real_nvcc() else { return };
    let actimeo = Duration::from_secs(20);
    let Some(cluster) = cluster(2, actimeo, Locks::Shared) else {
        return;
    };
    let bench = Bench::new();
    let project = cluster.root().join("proj");
    let header = project.join("inc/x.h");
    let (root, source, include) = (
        cluster.root().join("cache"),
        project.join("k.cu"),
        project.join("inc"),
    );
    let text = |value: u32| format!("#pragma once\n#define VALUE {value}\n");
    cluster.on(0, {
        let (source, header) = (source.clone(), header.clone());
        move || {
            std::fs::create_dir_all(header.parent().expect("inc")).expect("mkdir inc");
            std::fs::write(
                &source,
                "#include \"x.h\"\n#define STR2(x) #x\n#define STR(x) STR2(x)\n\
                 __constant__ char tag[] = \"VAL=\" STR(VALUE) \";\";\n\
                 extern \"C\" __global__ void k(char* o) { o[threadIdx.x] = tag[threadIdx.x]; }\n",
            )
            .expect("write source");
            std::fs::write(&header, "#pragma once\n#define VALUE 1111\n").expect("write header");
        }
    });
    // A stamp taken within two seconds of a write on a network filesystem is not trusted
    // (`stamp.rs`): let the header's age pass that rule, so that a hit trusts its stamp.
    let written = cluster.on(0, {
        let header = header.clone();
        move || {
            std::fs::metadata(&header)
                .expect("stat header")
                .modified()
                .expect("mtime")
        }
    });
    wait_until(
        "the header's stamp to settle",
        Duration::from_secs(10),
        || {
            written
                .elapsed()
                .is_ok_and(|age| age > Duration::from_millis(2500))
        },
    );
    let args = |nvcc: &PathBuf| {
        [
            "build-file".to_string(),
            root.display().to_string(),
            nvcc.display().to_string(),
            source.display().to_string(),
            include.display().to_string(),
        ]
    };
    let build = |host: usize| {
        let a = args(&nvcc);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        answer(host_op(&cluster, host, &bench, &[], &a))
    };
    let first = build(0);
    assert_eq!(first["value"], "1111", "A builds: {first}");
    // B's hit, within its attribute cache's lifetime for what follows.
    let window = AttrWindow::opening_now(actimeo);
    let hit = build(1);
    assert_eq!(hit["outcome"], "hit", "B hits A's entry: {hit}");
    assert_eq!(hit["value"], "1111");
    cluster.on(0, {
        let header = header.clone();
        move || std::fs::write(&header, text(2222)).expect("A edits the header (same size)")
    });
    let after = build(1);
    assert!(
        window.is_open(),
        "the scenario ran within B's attribute cache lifetime (a slow machine: raise actimeo)"
    );
    assert_eq!(
        after["value"], "2222",
        "B sees A's edit at once, as nvcc's open would: {after}"
    );
}

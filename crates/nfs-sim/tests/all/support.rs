//! Starting clusters, the fake compiler, and running cache operations on a host.

use nfs_sim::{Cluster, Locks, Options};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Starts `hosts` hosts, or skips the test (printing why) where FUSE is unavailable; under
/// `cargo xtask test` (`FS_TESTBED_REQUIRE=1`) a skip is a failure.
pub fn cluster(hosts: usize, actimeo: Duration, locks: Locks) -> Option<Cluster> {
    match Cluster::start(Options {
        hosts,
        actimeo,
        locks,
    }) {
        Ok(cluster) => Some(cluster),
        Err(skipped) if fs_testbed::skips_are_failures() => panic!("{skipped}"),
        Err(skipped) => {
            eprintln!("{skipped}");
            None
        }
    }
}

/// Starts one host per element of `actimeos`, each caching for its own; skips as [`cluster`].
pub fn cluster_with(actimeos: &[Duration], locks: Locks) -> Option<Cluster> {
    match Cluster::start_with_actimeos(actimeos, locks) {
        Ok(cluster) => Some(cluster),
        Err(skipped) if fs_testbed::skips_are_failures() => panic!("{skipped}"),
        Err(skipped) => {
            eprintln!("{skipped}");
            None
        }
    }
}

/// Waits for a condition with a bound (never a sleep used as a barrier).
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A deterministic fake nvcc (as powercut-fs's): it logs each compile as
/// `<DURABLE_FS_HOST_ID> <first source line>` to `$FAKE_NVCC_LOG`, and with `$FAKE_NVCC_GATE`
/// set it creates `<gate>.waiting` and waits (at most 120 s) for `<gate>` before writing.
const FAKE_NVCC: &str = r#"#!/bin/sh
for a in "$@"; do
  if [ "$a" = -dryrun ]; then
    exit 1
  fi
  if [ "$a" = --version ] || [ "$a" = --help ]; then
    echo "nvcc: NVIDIA (R) Cuda compiler driver"
    echo "Cuda compilation tools, release 13.5, V13.5.0"
    exit 0
  fi
done
out=; dep=; prev=; src=
for a in "$@"; do
  case "$prev" in
    -o) out=$a ;;
    -MF) dep=$a ;;
  esac
  case "$a" in
    -Xcompiler=-MD,-MF,*) dep=${a#-Xcompiler=-MD,-MF,} ;;
  esac
  prev=$a
  src=$a
done
if [ -z "$out" ] || [ -z "$dep" ]; then
  echo "fake-nvcc: need -o OUT and a dependency file" >&2
  exit 2
fi
if [ -n "$FAKE_NVCC_LOG" ]; then
  printf '%s %s\n' "$DURABLE_FS_HOST_ID" "$(head -n1 "$src")" >> "$FAKE_NVCC_LOG"
fi
# Every compile runs `sleep` (a gated one waits with it): what a traced compile ran is an input,
# and a gated compile must have the same inputs as an ungated one.
sleep 0
if [ -n "$FAKE_NVCC_GATE" ]; then
  : > "$FAKE_NVCC_GATE.waiting"
  i=0
  while [ ! -e "$FAKE_NVCC_GATE" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done
fi
body=$(cat "$src" && printf x) || exit 3
body=${body%x}
{
  printf 'nfs-sim fake cubin v1\n'
  i=0
  while [ $i -lt 64 ]; do printf '%s' "$body"; i=$((i+1)); done
} > "$out" || exit 3
printf '%s: %s\n' "$out" "$src" > "$dep" || exit 3
"#;

/// A scratch directory outside the mounts (seen by every host) with the fake compiler.
pub struct Bench {
    pub dir: tempfile::TempDir,
    pub nvcc: PathBuf,
    pub log: PathBuf,
}

impl Bench {
    pub fn new() -> Bench {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("scratch dir");
        let nvcc = dir.path().join("nvcc");
        std::fs::write(&nvcc, FAKE_NVCC).expect("write fake nvcc");
        std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let log = dir.path().join("compiles.log");
        Bench { dir, nvcc, log }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// How many compiles of kernel `name` host `host` ran.
    pub fn compiles(&self, host: usize, name: &str) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let id = nfs_sim::host_id_of(host);
        text.lines()
            .filter(|l| l.starts_with(&id) && l.ends_with(&format!("nfs-sim kernel {name}")))
            .count()
    }
}

/// `nfs-sim-host-op <args>` on `host`, with extra environment; returns its JSON answer.
pub fn host_op(
    cluster: &Cluster,
    host: usize,
    bench: &Bench,
    env: &[(&str, &str)],
    args: &[&str],
) -> std::process::Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nfs-sim-host-op"));
    command
        .args(args)
        .env("FAKE_NVCC_LOG", &bench.log)
        // The fake's log and gate are its writes, not its answer (as a user's logging wrapper
        // declares its log).
        .env("JIT_CACHE_IGNORED_PATHS", bench.dir.path())
        .env_remove("JIT_CACHE_INJECT_BUG")
        .stdout(std::process::Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    cluster.spawn(host, command).expect("start host-op")
}

/// Waits for a host-op and parses its JSON line.
pub fn answer(child: std::process::Child) -> serde_json::Value {
    let out = child.wait_with_output().expect("host-op ran");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("host-op answered {text:?} ({e}), status {}", out.status))
}

/// Sets the access and modification times of everything directly in `dir` to `secs_ago`.
pub fn age_children(dir: &Path, secs_ago: u64) {
    let then = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        - secs_ago;
    let stamp = rustix::fs::Timespec {
        tv_sec: then as i64,
        tv_nsec: 0,
    };
    let stamps = rustix::fs::Timestamps {
        last_access: stamp,
        last_modification: stamp,
    };
    for item in std::fs::read_dir(dir).expect("list").flatten() {
        rustix::fs::utimensat(
            rustix::fs::CWD,
            item.path(),
            &stamps,
            rustix::fs::AtFlags::empty(),
        )
        .expect("set times");
    }
}

/// A `build --hold` on host 0: it holds the artifact of kernel `name` until released, then
/// answers whether its path still read the same bytes (`held_ok`).
pub struct Holder {
    child: std::process::Child,
    release: PathBuf,
}

impl Holder {
    /// Starts it and waits (bounded) until it holds the artifact.
    pub fn start(cluster: &Cluster, bench: &Bench, root: &str, nvcc: &str, name: &str) -> Holder {
        let (ready, release) = (bench.path("ready"), bench.path("release"));
        let child = host_op(
            cluster,
            0,
            bench,
            &[],
            &[
                "build",
                root,
                nvcc,
                name,
                "--hold",
                ready.to_str().expect("utf-8"),
                release.to_str().expect("utf-8"),
            ],
        );
        wait_until(
            "host 0 to hold its artifact",
            Duration::from_secs(60),
            || ready.exists(),
        );
        Holder { child, release }
    }

    /// Lets it go and returns its answer.
    pub fn release(self) -> serde_json::Value {
        std::fs::write(&self.release, b"").expect("release the holder");
        answer(self.child)
    }
}

/// The attributes a stat showed that another host's rewrite changes: identity, size, times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Seen {
    pub fn of_stat(st: &rustix::fs::Stat) -> Seen {
        Seen {
            ino: st.st_ino,
            size: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        }
    }

    pub fn of_statx(st: &rustix::fs::Statx) -> Seen {
        Seen {
            ino: st.stx_ino,
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, i64::from(st.stx_mtime.tv_nsec)),
            ctime: (st.stx_ctime.tv_sec, i64::from(st.stx_ctime.tv_nsec)),
        }
    }
}

/// A plain `stat` (`newfstatat`), as the cache's hit path makes: answered from the host's
/// attribute cache while it is fresh.
pub fn plain_stat(path: &Path) -> Seen {
    Seen::of_stat(&rustix::fs::stat(path).expect("stat"))
}

/// `statx(AT_STATX_FORCE_SYNC)`: the server's attributes, whatever the host has cached.
pub fn forced_statx(path: &Path) -> Seen {
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::STATX_FORCE_SYNC,
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .expect("statx(AT_STATX_FORCE_SYNC)");
    Seen::of_statx(&st)
}

/// `open` + `fstat`: the open revalidates the attributes (close-to-open). Returns the file too.
pub fn opened_stat(path: &Path) -> (Seen, std::fs::File) {
    let file = std::fs::File::open(path).expect("open");
    (
        Seen::of_stat(&rustix::fs::fstat(&file).expect("fstat")),
        file,
    )
}

/// How long attributes a host fetched stay cached there: from a moment taken just before the
/// fetch, `actimeo`. An observation that relies on the cache (a stale stat) proves something
/// only if it ended while the window was still open.
#[derive(Debug, Clone, Copy)]
pub struct AttrWindow {
    closes: Instant,
}

impl AttrWindow {
    /// Call just before the host fetches the attributes (its first stat of the path).
    pub fn opening_now(actimeo: Duration) -> AttrWindow {
        AttrWindow {
            closes: Instant::now() + actimeo,
        }
    }

    /// Whether attributes fetched after the window opened are surely still cached now.
    pub fn is_open(&self) -> bool {
        Instant::now() < self.closes
    }
}

/// Runs `scenario` (given its attempt number, for fresh names) until it is conclusive: it
/// returns `None` when the window closed before an observation that relied on the cache had
/// ended (the machine was slower than `actimeo`), and is then run again, at most 3 times.
/// Nothing is asserted on the cache's content once its window may have closed.
pub fn within_actimeo<R>(
    actimeo: Duration,
    mut scenario: impl FnMut(usize, AttrWindow) -> Option<R>,
) -> R {
    for attempt in 0..3 {
        if let Some(r) = scenario(attempt, AttrWindow::opening_now(actimeo)) {
            return r;
        }
        eprintln!("attempt {attempt} outlasted actimeo {actimeo:?}: inconclusive, once more");
    }
    panic!("three attempts each outlasted actimeo {actimeo:?}: this machine is too slow for it")
}

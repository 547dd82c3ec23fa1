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
  if [ "$a" = --version ]; then
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

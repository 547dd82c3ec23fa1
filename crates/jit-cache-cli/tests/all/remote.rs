//! The fleet through the binary: hosts (processes with their own cache roots and checkouts)
//! share one real `redis-server`, or one real S3 server (SeaweedFS), through `--remote`;
//! `stats` shows the remote counters.

use crate::support::{cli, kernel_text, real_nvcc, CountingCompiler};
use jit_cache_redis::test_server::RedisServer;
use jit_cache_s3::test_server::WeedServer;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server of this test's own (`jit_cache_redis::test_server`) in a temp dir.
struct Server {
    server: RedisServer,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("temp dir for redis");
        let server = RedisServer::start(dir.path(), &[]).unwrap_or_else(|e| panic!("{e}"));
        Server { server, _dir: dir }
    }

    /// Kills the server with SIGKILL and starts a fresh one on the same socket.
    fn restart(&mut self) {
        self.server.restart().unwrap_or_else(|e| panic!("{e}"));
    }

    fn url(&self) -> String {
        self.server.url()
    }
}

/// A host's checkout of the six kernels.
fn checkout(dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).expect("mkdir checkout");
    (0..6)
        .map(|n| {
            let path = dir.join(format!("k{n}.cu"));
            std::fs::write(&path, kernel_text(200 + n)).expect("write kernel");
            path
        })
        .collect()
}

fn stats_json(root: &Path, nvcc: &Path) -> serde_json::Value {
    let out = cli(root, nvcc)
        .args(["--json", "stats"])
        .output()
        .expect("run stats");
    assert!(out.status.success(), "stats: {out:?}");
    serde_json::from_slice(&out.stdout).expect("stats JSON")
}

/// A weed server of this test's own (`jit_cache_s3::test_server`) in a temp dir.
struct S3Server {
    weed: WeedServer,
    _dir: tempfile::TempDir,
}

impl S3Server {
    fn start() -> S3Server {
        let dir = tempfile::tempdir().expect("temp dir for weed");
        let weed = WeedServer::start(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        S3Server { weed, _dir: dir }
    }

    /// What a process needs to reach the server as its admin: `JIT_CACHE_REMOTE` and `AWS_*`.
    fn env(&self) -> Vec<(&'static str, String)> {
        self.weed.env(self.weed.admin())
    }
}

#[test]
fn heavy_a_fleet_of_four_hosts_compiles_each_kernel_once() {
    let server = Server::start();
    fleet_of_four_hosts(&server.url(), &[]);
}

#[test]
fn heavy_a_fleet_of_four_hosts_compiles_each_kernel_once_on_s3() {
    let server = S3Server::start();
    fleet_of_four_hosts(&server.weed.url(), &server.env());
    let audit = server.weed.admin_tier().audit().expect("audit the bucket");
    assert_eq!(
        (audit.manifests, audit.blobs, audit.variants_without_blob),
        (6, 6, 0),
        "six manifests, six blobs: {audit:?}"
    );
    assert!(audit.corrupt_blobs.is_empty() && audit.unreadable_manifests.is_empty());
    assert!(server.weed.keys("l").is_empty(), "every lease was released");
}

/// 4 hosts x 4 processes, each asking for the six kernels in the same order, all at once, with
/// `--remote url` and `env`: exactly six compiles, every artifact equal to an uncached compile.
fn fleet_of_four_hosts(url: &str, env: &[(&'static str, String)]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let counting = CountingCompiler::new(dir.path());
    // Each host has its own checkout, and builds in it by the names a build tree spells
    // (`k0.cu`): the same command on every host, whose answer is every host's (a source spelled
    // by another absolute path would be another command: `__FILE__` names it).
    let hosts: Vec<(PathBuf, PathBuf, Vec<PathBuf>)> = (0..4)
        .map(|h| {
            let root = dir.path().join(format!("host{h}/cache"));
            let tree = dir.path().join(format!("host{h}/checkout"));
            let sources = checkout(&tree)
                .iter()
                .map(|p| PathBuf::from(p.file_name().expect("a file name")))
                .collect();
            (root, tree, sources)
        })
        .collect();
    // 4 hosts x 4 processes, each asking for the six kernels in the same order, all at once.
    let running: Vec<_> = hosts
        .iter()
        .flat_map(|(root, tree, sources)| (0..4).map(move |_| (root, tree, sources)))
        .map(|(root, tree, sources)| {
            cli(root, &counting.path)
                .current_dir(tree)
                // This test is about single flight: timeouts generous enough for a loaded
                // 2-core machine (a slow remote is skipped by design, and tested elsewhere).
                .env("JIT_CACHE_REMOTE_CONNECT_TIMEOUT_MS", "2000")
                .env("JIT_CACHE_REMOTE_IO_TIMEOUT_MS", "10000")
                .envs(env.iter().map(|(k, v)| (k, v)))
                .args(["--json", "--remote", url, "build", "-j", "1"])
                .args(sources)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a host process")
        })
        .collect();
    let mut artifacts: Vec<Vec<Vec<u8>>> = Vec::new();
    for child in running {
        let out = child.wait_with_output().expect("host process");
        assert!(
            out.status.success(),
            "no build fails: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "no warning: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("build JSON");
        let results = json["results"].as_array().expect("results").clone();
        artifacts.push(
            results
                .iter()
                .map(|r| {
                    std::fs::read(r["path"].as_str().expect("artifact path")).expect("artifact")
                })
                .collect(),
        );
    }
    assert_eq!(
        counting.compiles(),
        6,
        "one compile per kernel in the whole fleet (ccache + Redis: 24)"
    );
    let expected: Vec<Vec<u8>> = (0..6)
        .map(|n| {
            let out = dir.path().join(format!("uncached{n}.cubin"));
            let status = Command::new(real_nvcc())
                .args(["-cubin", "-arch=sm_90", "-o"])
                .arg(&out)
                .arg(&hosts[0].2[n])
                .current_dir(&hosts[0].1)
                .status()
                .expect("uncached nvcc");
            assert!(status.success());
            std::fs::read(&out).expect("uncached cubin")
        })
        .collect();
    for (p, got) in artifacts.iter().enumerate() {
        assert!(
            got == &expected,
            "process {p}: every artifact equals an uncached compile"
        );
    }
    let mut compiles = 0;
    let mut fetched = 0;
    for (root, _, _) in &hosts {
        let stats = stats_json(root, &counting.path);
        compiles += stats["stats"]["builds_recorded"].as_u64().expect("builds");
        let remote = &stats["remote"];
        fetched += remote["hits"].as_u64().expect("remote hits");
        assert_eq!(remote["errors"], 0, "no remote fault: {remote}");
        assert_eq!(remote["rejected"], 0, "no unverifiable byte: {remote}");
    }
    assert_eq!(compiles, 6, "the roots' logs agree");
    assert_eq!(
        fetched, 18,
        "each host fetched what it did not compile (3 x 6)"
    );
    let text = cli(&hosts[0].0, &counting.path)
        .arg("stats")
        .output()
        .expect("stats");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("remote:"), "stats shows the remote: {text}");
}

#[test]
fn a_dead_remote_never_fails_the_command_and_warns_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!(
        "redis+unix://{}",
        dir.path().join("no-server.sock").display()
    );
    dead_remote_warns_once(dir.path(), &[("JIT_CACHE_REMOTE", url)]);
}

#[test]
fn a_dead_s3_remote_never_fails_the_command_and_warns_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = S3Server::start();
    let env = server.env();
    server.weed.kill();
    let stderr = dead_remote_warns_once(dir.path(), &env);
    assert!(
        stderr.contains("s3://"),
        "the warning names the remote: {stderr}"
    );
}

/// Three kernels through a remote configured by `env` that does not answer: the command
/// succeeds with one warning, which it returns.
fn dead_remote_warns_once(dir: &Path, env: &[(&'static str, String)]) -> String {
    let sources = checkout(&dir.join("checkout"));
    let out = cli(&dir.join("cache"), &real_nvcc())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["build", "-j", "1"])
        .args(&sources[..3])
        .output()
        .expect("build");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        stderr.matches("warning").count(),
        1,
        "one warning per process, never one per kernel: {stderr}"
    );
    stderr
}

#[test]
fn s3_settings_that_do_not_apply_are_refused_with_a_reason_and_the_build_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sources = checkout(&dir.path().join("checkout"));
    for (var, value, says) in [
        ("JIT_CACHE_REMOTE_TTL", "3600", "lifecycle rule"),
        ("JIT_CACHE_REMOTE_NAMESPACE", "ns", "s3://bucket/prefix"),
        ("AWS_ACCESS_KEY_ID", "", "AWS_ACCESS_KEY_ID"),
    ] {
        let out = cli(&dir.path().join("cache"), &real_nvcc())
            .env("JIT_CACHE_REMOTE", "s3://kernels/fleet")
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env("AWS_ACCESS_KEY_ID", "AK")
            .env("AWS_SECRET_ACCESS_KEY", "SK")
            .env(var, value)
            .args(["build", "-j", "1"])
            .arg(&sources[0])
            .output()
            .expect("build");
        assert!(out.status.success(), "{var}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no remote cache") && stderr.contains(says),
            "{var}: {stderr}"
        );
    }
}

#[test]
fn heavy_builders_and_the_server_killed_mid_run_leave_a_consistent_remote() {
    let mut server = Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // A compile slow enough to be killed while it holds the fleet's lease.
    let slow = dir.path().join("slow-nvcc");
    crate::support::write_executable(
        &slow,
        &format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" -dryrun \"*) ;; *) sleep 0.3 ;; esac\nexec '{}' \"$@\"\n",
            real_nvcc().display()
        ),
    );
    let sources = checkout(&dir.path().join("checkout"));
    // Seeded kill moments: a deterministic schedule, not synchronisation.
    let mut seed = 0x2545_f491_u64;
    let mut next = |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    let (mut killed, mut finished) = (0, 0);
    for round in 0..3 {
        let mut running: Vec<(Child, Option<Duration>)> = (0..8)
            .map(|p| {
                let root = dir.path().join(format!("round{round}/host{}", p % 4));
                let child = cli(&root, &slow)
                    .env("JIT_CACHE_REMOTE_LEASE_TTL_MS", "1000")
                    .env("JIT_CACHE_REMOTE_CONNECT_TIMEOUT_MS", "2000")
                    .env("JIT_CACHE_REMOTE_IO_TIMEOUT_MS", "10000")
                    .args(["--remote", &server.url(), "build", "-j", "1"])
                    .args(&sources)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("start a builder");
                // Half the builders are killed at a random moment of the first 2.5 s.
                let kill = (p % 2 == 0).then(|| Duration::from_millis(next(2500)));
                (child, kill)
            })
            .collect();
        let started = Instant::now();
        let mut server_killed = round != 1;
        while running.iter().any(|(_, kill)| kill.is_some()) || !server_killed {
            for (child, kill) in &mut running {
                if kill.is_some_and(|at| started.elapsed() >= at) {
                    let _ = child.kill();
                    *kill = None;
                    killed += 1;
                }
            }
            if !server_killed && started.elapsed() >= Duration::from_millis(1200) {
                // kill -9 of the server mid-run: its data is gone (no persistence).
                server.restart();
                server_killed = true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for (child, _) in running {
            let out = child.wait_with_output().expect("builder");
            if out.status.code().is_some() {
                finished += 1;
                assert!(
                    out.status.success(),
                    "a builder that was not killed never fails: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        // A new connection: the server of round 1 is another process.
        let tier =
            jit_cache_redis::RedisTier::open(&server.url(), Default::default()).expect("URL");
        let audit = tier.audit().expect("audit the store");
        eprintln!("round {round}: {audit:?}");
        assert!(
            audit.corrupt_blobs.is_empty() && audit.unreadable_manifests.is_empty(),
            "round {round}: every blob matches its digest, every manifest parses: {audit:?}"
        );
    }
    assert!(
        killed >= 6 && finished >= 6,
        "killed {killed}, finished {finished}"
    );
    eprintln!("killed {killed} builders, {finished} finished");
    // A fresh host after all that: every kernel, fetched or compiled, equals an uncached compile.
    let fresh = dir.path().join("fresh");
    let out = cli(&fresh, &real_nvcc())
        .args(["--json", "--remote", &server.url(), "build", "-j", "1"])
        .args(&sources)
        .output()
        .expect("fresh host");
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for (n, result) in json["results"]
        .as_array()
        .expect("results")
        .iter()
        .enumerate()
    {
        let got = std::fs::read(result["path"].as_str().expect("path")).expect("artifact");
        let reference = dir.path().join(format!("reference{n}.cubin"));
        let status = Command::new(real_nvcc())
            .args(["-cubin", "-arch=sm_90", "-o"])
            .arg(&reference)
            .arg(&sources[n])
            .status()
            .expect("uncached nvcc");
        assert!(status.success());
        assert!(
            got == std::fs::read(&reference).expect("reference"),
            "kernel {n} equals an uncached compile"
        );
    }
}

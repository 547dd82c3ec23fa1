//! `cargo xtask bench remote`: the Redis and S3 remote tiers against ccache + Redis, side by
//! side, each contender on its own server (`redis-server` on a Unix socket, persistence off;
//! SeaweedFS's `weed mini` on loopback ports; started and killed here).
//!
//! 1. Fleet warm-up: 4 hosts (own cache roots and checkouts), same order, 6 heavy kernels (a
//!    generated kernel of ~750 headers and a ~500 KB cubin), a process per kernel: compiles
//!    (counted by a wrapper around nvcc) and wall, jit-cache `--remote` on Redis and on S3
//!    against `ccache nvcc` with `remote_storage` on Redis. Then the same with two jobs per
//!    host, as a build system runs them: ccache's processes two at a time, one
//!    `jit-cache build -j 2`.
//! 2. A remote hit of one heavy kernel through the library: local miss, fetch, verify, publish.
//! 3. A remote that does not answer (a stopped server): the extra time of a `jit-cache build`
//!    process of three kernels, and the remote errors it counted.
//! 4. A local hit (`jit-cache build`, a process per call) with a remote configured and without.
//!
//! Options: `--runs N` (default 9), `--only fleet|hit|down|local`.

use jit_cache::{Cache, CacheOptions, KernelSpec, Outcome, Remote, RemoteMode};
use jit_cache_redis::test_server::RedisServer;
use jit_cache_s3::test_server::WeedServer;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const KERNELS: usize = 6;
const HOSTS: usize = 4;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(9usize);
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let want = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let nvcc =
        PathBuf::from(std::env::var_os("NVCC").expect("set NVCC (cargo xtask bench remote does)"));
    let dir = tempfile::Builder::new()
        .prefix("jit-cache-remote-bench-")
        .tempdir_in("/var/tmp")
        .expect("temp dir");
    // The counting wrappers' logs are their writes, not their answers: declared, as a user's
    // logging wrapper would, so that the cache still caches what they compile.
    std::env::set_var("JIT_CACHE_IGNORED_PATHS", dir.path().join("wrapper-log"));
    println!("remote bench ({runs} runs); nvcc {}", nvcc.display());
    if want("fleet") {
        fleet(dir.path(), &nvcc);
    }
    if want("hit") {
        remote_hit(dir.path(), &nvcc, runs);
    }
    if want("down") {
        remote_down(dir.path(), &nvcc, runs);
    }
    if want("local") {
        local_hit(dir.path(), &nvcc, runs);
    }
}

/// A redis-server of the bench's own (`jit_cache_redis::test_server`).
struct Server(RedisServer);

impl Server {
    fn start(dir: &Path) -> Server {
        Server(RedisServer::start(dir, &[]).unwrap_or_else(|e| panic!("{e}")))
    }

    fn url(&self) -> String {
        self.0.url()
    }

    fn socket(&self) -> &Path {
        self.0.socket()
    }
}

/// Which fleet tier jit-cache uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tier {
    Redis,
    S3,
}

impl Tier {
    fn name(self) -> &'static str {
        match self {
            Tier::Redis => "Redis",
            Tier::S3 => "S3",
        }
    }
}

/// A fleet tier's server of the bench's own.
enum Store {
    Redis(Server),
    S3(WeedServer),
}

impl Store {
    fn start(tier: Tier, dir: &Path) -> Store {
        match tier {
            Tier::Redis => Store::Redis(Server::start(dir)),
            Tier::S3 => Store::S3(WeedServer::start(dir).unwrap_or_else(|e| panic!("{e}"))),
        }
    }

    fn url(&self) -> String {
        match self {
            Store::Redis(server) => server.url(),
            Store::S3(weed) => weed.url(),
        }
    }

    /// What a `jit-cache` process needs besides `--remote URL` (S3's endpoint and key).
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Store::Redis(_) => Vec::new(),
            Store::S3(weed) => weed
                .env(weed.admin())
                .into_iter()
                .filter(|(k, _)| *k != "JIT_CACHE_REMOTE")
                .collect(),
        }
    }

    /// `jit-cache ... --remote URL` with its environment.
    fn configure<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.envs(self.env()).args(["--remote", &self.url()])
    }

    /// A library remote with the default options (the timeouts users get).
    fn remote(&self) -> Remote {
        match self {
            Store::Redis(server) => jit_cache_redis::remote(
                &server.url(),
                RemoteMode::ReadWrite,
                jit_cache_redis::RedisOptions::default(),
            )
            .expect("remote"),
            Store::S3(weed) => {
                jit_cache_s3::remote(weed.config(weed.admin()), RemoteMode::ReadWrite)
                    .expect("remote")
            }
        }
    }

    fn signal(&self, signal: rustix::process::Signal) {
        match self {
            Store::Redis(server) => server.0.signal(signal),
            Store::S3(weed) => weed.signal(signal),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A wrapper around nvcc that logs its arguments once per call (not for `--version`).
fn counting_nvcc(dir: &Path, nvcc: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("mkdir");
    // In the bench's declared log directory (see `main`), one log per wrapper, named by it.
    let logs = PathBuf::from(std::env::var_os("JIT_CACHE_IGNORED_PATHS").expect("set by main"));
    std::fs::create_dir_all(&logs).expect("mkdir");
    let name: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .collect();
    let (path, log) = (dir.join("nvcc"), logs.join(format!("{name}.log")));
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" -dryrun \"*) ;; *) echo \"$*\" >> '{}' ;; esac\nexec '{}' \"$@\"\n",
            log.display(),
            nvcc.display()
        ),
    )
    .expect("write wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (path, log)
}

/// Compiles in a wrapper's log: calls that are not a preprocessor run (ccache runs `nvcc -E`
/// first to compute its key; that is not a compile).
fn count_compiles(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| {
        s.lines()
            .filter(|l| !l.split(' ').any(|a| a == "-E"))
            .count()
    })
}

/// A checkout of the heavy kernels: 600 project headers (plus the toolkit's, ~750 in all) and
/// `KERNELS` sources of 64 kernels each (a ~500 KB cubin).
fn checkout(dir: &Path) -> Vec<PathBuf> {
    let inc = dir.join("include/gen");
    std::fs::create_dir_all(&inc).expect("mkdir");
    let mut includes = String::new();
    for i in 0..600 {
        std::fs::write(
            inc.join(format!("h{i}.cuh")),
            format!(
                "#pragma once\ntemplate <int N> __device__ __forceinline__ float g{i}(float x) {{ return x * (1.0f + N * 1e-6f) + {i}.0f; }}\n"
            ),
        )
        .expect("write header");
        includes.push_str(&format!("#include \"gen/h{i}.cuh\"\n"));
    }
    (0..KERNELS)
        .map(|n| {
            let mut src = includes.clone();
            src.push_str(&format!(
                "template <int N> struct Chain {{ __device__ __forceinline__ static float run(float x) {{ return Chain<N - 1>::run(g0<N>(x) * 0.999f + {n}.0f); }} }};\n\
                 template <> struct Chain<0> {{ __device__ __forceinline__ static float run(float x) {{ return x; }} }};\n"
            ));
            for k in 0..64 {
                src.push_str(&format!(
                    "extern \"C\" __global__ void heavy{k}(float* x) {{ float v = x[threadIdx.x]; v = Chain<190>::run(v + {k}.0f); x[threadIdx.x] = g{}<{k}>(v); }}\n",
                    k * 9
                ));
            }
            let path = dir.join(format!("heavy{n}.cu"));
            std::fs::write(&path, src).expect("write source");
            path
        })
        .collect()
}

fn jit_cache_cmd(root: &Path, nvcc: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jit-cache"));
    cmd.arg("--cache-dir").arg(root).env("NVCC", nvcc);
    cmd
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().expect("run");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How each simulated host builds its kernels.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Jobs {
    /// A process per kernel, one after another.
    One,
    /// Two at a time, as a build system with `-j 2` runs them: ccache's processes two at a
    /// time; for jit-cache one `jit-cache build -j 2` of them all (a batch, which puts off a
    /// kernel whose lease another host holds).
    Two,
}

/// 4 hosts in parallel, each running `host(h, its sources)`; the wall time of them all.
fn warm_fleet(sources: &[Vec<PathBuf>], host: &(dyn Fn(usize, &[PathBuf]) + Sync)) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for (h, host_sources) in sources.iter().enumerate() {
            s.spawn(move || host(h, host_sources));
        }
    });
    start.elapsed().as_secs_f64()
}

/// Runs `cmd` for every source, `jobs` at a time, in the sources' order.
fn each_source(sources: &[PathBuf], jobs: usize, cmd: &(dyn Fn(&Path) -> Command + Sync)) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(source) = sources.get(i) else {
                    break;
                };
                run_ok(&mut cmd(source));
            });
        }
    });
}

/// One fleet warm-up of every contender, each on a fresh server and fresh roots.
struct FleetRun {
    ccache_compiles: usize,
    ccache_preprocessor_runs: usize,
    ccache_wall: f64,
    /// jit-cache's compiles and wall on Redis, then on S3.
    ours: Vec<(Tier, usize, f64)>,
}

fn fleet_run(work: &Path, nvcc: &Path, jobs: Jobs) -> FleetRun {
    let sources: Vec<Vec<PathBuf>> = (0..HOSTS)
        .map(|h| checkout(&work.join(format!("host{h}/checkout"))))
        .collect();
    let width = if jobs == Jobs::Two { 2 } else { 1 };

    // ccache + Redis: each host its own ccache dir, one shared remote storage.
    let ccache_redis = Server::start(&work.join("redis-ccache"));
    let (ccache_nvcc, ccache_log) = counting_nvcc(&work.join("ccache-wrapper"), nvcc);
    let remote = format!("redis+unix:{}", ccache_redis.socket().display());
    let ccache_host = |h: usize, host_sources: &[PathBuf]| {
        each_source(host_sources, width, &|source| {
            let mut cmd = Command::new("ccache");
            cmd.arg(&ccache_nvcc)
                .args(["-Iinclude", "-arch=sm_90", "-c", "-cubin"])
                .arg(source.file_name().expect("name"))
                .arg("-o")
                .arg(source.with_extension("ccache.cubin"))
                .current_dir(source.parent().expect("checkout dir"))
                .env("CCACHE_DIR", work.join(format!("host{h}/ccache")))
                .env("CCACHE_REMOTE_STORAGE", &remote)
                .env("CCACHE_BASEDIR", work.join(format!("host{h}")));
            cmd
        });
    };
    let ccache_wall = warm_fleet(&sources, &ccache_host);
    let ccache_compiles = count_compiles(&ccache_log);
    let ccache_calls = std::fs::read_to_string(&ccache_log).map_or(0, |s| s.lines().count());
    drop(ccache_redis);

    let mut ours = Vec::new();
    for tier in [Tier::Redis, Tier::S3] {
        let name = tier.name();
        let store = Store::start(tier, &work.join(format!("store-{name}")));
        let (our_nvcc, our_log) = counting_nvcc(&work.join(format!("our-wrapper-{name}")), nvcc);
        // As a build tree spells them, like ccache's (relative names in each host's checkout):
        // the same command on every host.
        let our_cmd = |h: usize, host_sources: &[PathBuf]| {
            let mut cmd = jit_cache_cmd(&work.join(format!("host{h}/jit-cache-{name}")), &our_nvcc);
            store.configure(&mut cmd);
            cmd.args(["build", "-j", &width.to_string(), "-I", "include"])
                .current_dir(host_sources[0].parent().expect("checkout"));
            cmd
        };
        let file_name = |source: &Path| PathBuf::from(source.file_name().expect("name"));
        let our_host = |h: usize, host_sources: &[PathBuf]| match jobs {
            Jobs::One => each_source(host_sources, 1, &|source| {
                let mut cmd = our_cmd(h, host_sources);
                cmd.arg(file_name(source));
                cmd
            }),
            Jobs::Two => {
                run_ok(our_cmd(h, host_sources).args(host_sources.iter().map(|s| file_name(s))))
            }
        };
        let wall = warm_fleet(&sources, &our_host);
        ours.push((tier, count_compiles(&our_log), wall));
    }
    FleetRun {
        ccache_compiles,
        ccache_preprocessor_runs: ccache_calls - ccache_compiles,
        ccache_wall,
        ours,
    }
}

fn fleet(dir: &Path, nvcc: &Path) {
    println!("\n1. fleet warm-up: {HOSTS} hosts, same order, {KERNELS} heavy kernels");
    for (jobs, name, work) in [
        (Jobs::One, "a process per kernel, one at a time", "fleet"),
        (
            Jobs::Two,
            "two jobs per host (ccache's processes two at a time; one `jit-cache build -j 2`)",
            "fleet-two-jobs",
        ),
    ] {
        let run = fleet_run(&dir.join(work), nvcc, jobs);
        println!("   {name}");
        println!(
            "   {:<36} {:>4} compiles {:>8.1}s   ({} preprocessor runs besides)",
            "ccache + Redis", run.ccache_compiles, run.ccache_wall, run.ccache_preprocessor_runs
        );
        for (tier, compiles, wall) in &run.ours {
            println!(
                "   {:<36} {:>4} compiles {:>8.1}s   wall {:.2}x ccache's (goal: {KERNELS} compiles, <= 0.4x)",
                format!("jit-cache --remote ({})", tier.name()),
                compiles,
                wall,
                wall / run.ccache_wall
            );
        }
    }
}

fn options(nvcc: &Path) -> CacheOptions {
    CacheOptions::default().nvcc(nvcc::Nvcc::at(nvcc).expect("nvcc"))
}

fn remote_hit(dir: &Path, nvcc: &Path, runs: usize) {
    let work = dir.join("hit");
    let source = checkout(&work.join("checkout")).remove(0);
    // The same 64 kernels without the 600 project headers: only the fetch, the verification
    // and the publication are left to time.
    let text = std::fs::read_to_string(&source).expect("read source");
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("#include"))
        .map(|l| format!("{l}\n"))
        .collect();
    let g = "template <int N> __device__ __forceinline__ float g{i}(float x) { return x * (1.0f + N * 1e-6f) + {i}.0f; }\n";
    let helpers: String = (0..600).map(|i| g.replace("{i}", &i.to_string())).collect();
    let alone = KernelSpec::from_text("alone", "alone.cu", format!("{helpers}{body}"));
    let with_headers = KernelSpec::from_file(&source).include_dir(work.join("checkout/include"));
    println!(
        "\n2. remote hit: local miss, fetch, verify (size, blake3), publish; through the library"
    );
    for tier in [Tier::Redis, Tier::S3] {
        let store = Store::start(tier, &work.join(format!("store-{}", tier.name())));
        let goal = if tier == Tier::Redis { 5 } else { 15 };
        for (what, spec) in [
            ("self-contained kernel", &alone),
            ("kernel reading ~750 headers", &with_headers),
        ] {
            let (median_ms, size) = time_remote_hits(
                &work.join(format!("{}-{}", tier.name(), what.replace(' ', "-"))),
                nvcc,
                &store,
                spec,
                runs,
            );
            println!(
                "   {:<36} {:>9.2}ms   ({} KB cubin; goal <= {goal} ms on loopback)",
                format!("{}, {what}", tier.name()),
                median_ms,
                size / 1024
            );
        }
    }
    println!("   (each includes re-checking this handle's memo of the evicted entry: a stat per project header)");
}

fn time_remote_hits(
    work: &Path,
    nvcc: &Path,
    store: &Store,
    spec: &KernelSpec,
    runs: usize,
) -> (f64, usize) {
    let remote = || store.remote();
    let builder = Cache::open_with(work.join("builder"), options(nvcc).remote(remote()))
        .expect("open builder");
    let built = builder.get_or_build(spec).expect("build");
    let fetcher = Cache::open_with(work.join("fetcher"), options(nvcc).remote(remote()))
        .expect("open fetcher");
    let mut times = Vec::new();
    for _ in 0..runs.max(3) {
        // A local miss each time: the entry is evicted (the handle keeps its toolchain identity,
        // as a long-lived process would).
        fetcher.clear().expect("clear");
        let start = Instant::now();
        let answer = fetcher.get_or_build(spec).expect("fetch");
        times.push(ms(start.elapsed()));
        assert_eq!(answer.outcome, Outcome::Fetched, "a remote hit");
        assert!(answer.artifact.bytes() == built.artifact.bytes());
    }
    (median(times), built.artifact.bytes().len())
}

fn remote_down(dir: &Path, nvcc: &Path, runs: usize) {
    let work = dir.join("down");
    let sources: Vec<PathBuf> = (0..3)
        .map(|n| {
            let path = work.join(format!("small{n}.cu"));
            std::fs::create_dir_all(&work).expect("mkdir");
            std::fs::write(
                &path,
                format!(
                    "extern \"C\" __global__ void s{n}(float* x) {{ x[threadIdx.x] *= {n}.0f; }}\n"
                ),
            )
            .expect("write");
            path
        })
        .collect();
    println!("\n3. remote down (server stopped): a `jit-cache build` process of 3 local misses");
    for tier in [Tier::Redis, Tier::S3] {
        let store = Store::start(tier, &work.join(format!("store-{}", tier.name())));
        store.signal(rustix::process::Signal::STOP);
        let (mut with, mut without, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..runs {
            // Interleaved in alternating order, fresh roots: each process compiles the kernels.
            for remote in [r % 2 == 0, r % 2 == 1] {
                let root = work.join(format!("{}-run{r}-{remote}", tier.name()));
                let mut cmd = jit_cache_cmd(&root, nvcc);
                if remote {
                    store.configure(&mut cmd);
                }
                let start = Instant::now();
                run_ok(cmd.args(["build", "-j", "1"]).args(&sources));
                let took = ms(start.elapsed());
                if remote {
                    with.push(took);
                    errors.push(Cache::open(&root).expect("open").remote_stats().errors);
                } else {
                    without.push(took);
                }
            }
        }
        // The fault itself, without the compiles' noise: a fresh remote's first request (what
        // each process pays once).
        let first: Vec<f64> = (0..runs)
            .map(|_| {
                let remote = store.remote();
                let start = Instant::now();
                assert!(remote.health().is_err(), "a stopped server does not answer");
                ms(start.elapsed())
            })
            .collect();
        store.signal(rustix::process::Signal::CONT);
        let (with, without) = (median(with), median(without));
        println!("   {}", tier.name());
        println!("   {:<36} {:>9.1}ms", "no remote", without);
        println!(
            "   {:<36} {:>9.1}ms   (remote errors counted per process: {:?})",
            "stopped remote", with, errors
        );
        println!(
            "   {:<36} {:>9.1}ms   (goal <= 150 ms once, then 0 per kernel)",
            "extra per process",
            with - without
        );
        println!(
            "   {:<36} {:>9.1}ms   (a fresh remote's first request, timed alone)",
            "the fault itself",
            median(first)
        );
    }
}

fn local_hit(dir: &Path, nvcc: &Path, runs: usize) {
    let work = dir.join("local");
    let source = work.join("k.cu");
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::write(
        &source,
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n",
    )
    .expect("write");
    let root = work.join("cache");
    run_ok(jit_cache_cmd(&root, nvcc).arg("build").arg(&source));
    println!("\n4. local hit, `jit-cache build` (a process per call), interleaved");
    for tier in [Tier::Redis, Tier::S3] {
        let store = Store::start(tier, &work.join(format!("store-{}", tier.name())));
        let (mut with, mut without) = (Vec::new(), Vec::new());
        let mut ratios = Vec::new();
        for r in 0..runs.max(5) * 3 {
            // Alternating order: the second of two back-to-back processes is not favoured.
            let (mut plain, mut remote) = (0.0, 0.0);
            for with_remote in [r % 2 == 0, r % 2 == 1] {
                let mut cmd = jit_cache_cmd(&root, nvcc);
                if with_remote {
                    store.configure(&mut cmd);
                }
                let start = Instant::now();
                run_ok(cmd.arg("build").arg(&source));
                let took = ms(start.elapsed());
                if with_remote {
                    remote = took;
                } else {
                    plain = took;
                }
            }
            ratios.push(remote / plain);
            with.push(remote);
            without.push(plain);
        }
        let remote_stats = Cache::open(&root).expect("open").remote_stats();
        println!("   {:<36} {:>9.2}ms", "no remote", median(without));
        println!(
            "   {:<36} {:>9.2}ms",
            format!("remote configured ({})", tier.name()),
            median(with)
        );
        println!(
            "   {:<36} {:>9.3}    (goal <= 1.05; remote operations so far: {} hits, {} misses, {} errors)",
            "median paired ratio",
            median(ratios),
            remote_stats.hits,
            remote_stats.misses,
            remote_stats.errors
        );
    }
}

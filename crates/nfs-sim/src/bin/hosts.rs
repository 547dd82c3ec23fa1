//! Simulated hosts for tests in other languages (the Python package's): starts a [`Cluster`],
//! prints `root <path>` (where every host mounts the export) and `ready`, then runs the
//! processes it is asked for, each on its host, until its standard input closes.
//!
//! ```text
//! nfs-sim-hosts [--hosts N] [--actimeo SECS] [--locks shared|local]
//! ```
//! A request is one JSON line, `{"id": 1, "host": 0, "argv": [...], "env": {...},
//! "stdout": "<file>", "stderr": "<file>"}` (the process inherits this one's environment plus
//! `env`, and the host's identity in `DURABLE_FS_HOST_ID`); when it exits, one line
//! `{"id": 1, "code": 0}` (`"signal"` instead of `"code"` when it was killed) is printed, in the
//! order processes end. When stdin closes, processes still running are killed and the hosts
//! unmount.

use anyhow::{bail, Context, Result};
use nfs_sim::{Cluster, Locks, Options};
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn options() -> Result<Options> {
    let mut options = Options::default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().context(format!("{arg} needs a value"));
        match arg.as_str() {
            "--hosts" => options.hosts = value()?.parse().context("--hosts")?,
            "--actimeo" => {
                options.actimeo = Duration::from_secs_f64(value()?.parse().context("--actimeo")?)
            }
            "--locks" => {
                options.locks = match value()?.as_str() {
                    "shared" => Locks::Shared,
                    "local" => Locks::Local,
                    other => bail!("--locks shared|local, not {other}"),
                }
            }
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(options)
}

/// A file to send a child's output to, or nowhere.
fn output(path: Option<&Value>) -> Result<Stdio> {
    Ok(match path.and_then(Value::as_str) {
        Some(path) => {
            Stdio::from(std::fs::File::create(path).with_context(|| format!("create {path}"))?)
        }
        None => Stdio::null(),
    })
}

fn command(request: &Value) -> Result<(u64, usize, Command)> {
    let id = request["id"].as_u64().context("a request needs an id")?;
    let host = request["host"].as_u64().context("a request needs a host")? as usize;
    let argv: Vec<&str> = request["argv"]
        .as_array()
        .context("a request needs argv")?
        .iter()
        .map(|a| a.as_str().context("argv holds strings"))
        .collect::<Result<_>>()?;
    let (program, args) = argv.split_first().context("argv is empty")?;
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null());
    if let Some(env) = request["env"].as_object() {
        for (name, value) in env {
            command.env(name, value.as_str().context("env values are strings")?);
        }
    }
    command
        .stdout(output(request.get("stdout"))?)
        .stderr(output(request.get("stderr"))?);
    Ok((id, host, command))
}

fn main() -> Result<()> {
    let options = options()?;
    let cluster = Cluster::start(options).map_err(|s| anyhow::anyhow!("{s}"))?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say = |out: &Mutex<std::io::Stdout>, line: String| {
        let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    say(&out, format!("root {}", cluster.root().display()));
    say(&out, "ready".into());
    let running: Arc<Mutex<Vec<(u64, Child)>>> = Arc::default();
    let mut waiters = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("read a request")?;
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = serde_json::from_str(&line).context("parse a request")?;
        let (id, host, command) = command(&request)?;
        if host >= cluster.hosts() {
            bail!("host {host}: there are {}", cluster.hosts());
        }
        let child = cluster
            .spawn(host, command)
            .with_context(|| format!("start request {id} on host {host}"))?;
        let pid = child.id();
        running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, child));
        let (running, out) = (Arc::clone(&running), Arc::clone(&out));
        // One waiter per process: it waits on the pid alone (waitid leaves the status for the
        // `Child` to reap), then reaps and reports.
        waiters.push(std::thread::spawn(move || {
            let _ = rustix::process::waitid(
                rustix::process::WaitId::Pid(
                    rustix::process::Pid::from_raw(pid as i32).expect("a child's pid is positive"),
                ),
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
            );
            let mut list = running.lock().unwrap_or_else(|p| p.into_inner());
            let Some(at) = list.iter().position(|(i, _)| *i == id) else {
                return;
            };
            let (_, mut child) = list.remove(at);
            drop(list);
            let report = match child.wait() {
                Ok(status) => match status.code() {
                    Some(code) => json!({ "id": id, "code": code }),
                    None => json!({ "id": id, "signal": status.signal() }),
                },
                Err(e) => json!({ "id": id, "error": e.to_string() }),
            };
            say(&out, report.to_string());
        }));
    }
    for (_, child) in running.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
        let _ = child.kill();
    }
    for waiter in waiters {
        let _ = waiter.join();
    }
    drop(cluster);
    Ok(())
}

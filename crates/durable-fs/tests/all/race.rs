//! The seed 004 race, across real processes: each worker reuses the shared file if it is
//! complete, else writes it, then reads it; one process removes it now and then. Every read that
//! opens the file must see one whole version. The negative control runs the same workers with an
//! in-place writer (the seed's bug) and must see torn reads, which shows the check can fail.
//!
//! The test binary re-executes itself (`std::env::current_exe()`) as the child processes; the
//! environment variable `DFS_RACE_ROLE` selects the child's role.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use fs_testbed::{run_or_skip, FsKind};

const LEN: usize = 256 << 10;
const CHUNK: usize = 4 << 10;
const WORKERS: usize = 4;
const ROUNDS: usize = 40;
const FILE: &str = "shared.bin";

/// A version of the file: a 16-byte header (the seed twice) and a body generated from the seed.
fn contents(seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(LEN);
    out.extend_from_slice(&seed.to_le_bytes());
    out.extend_from_slice(&seed.to_le_bytes());
    let mut x = seed | 1;
    while out.len() < LEN {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(LEN);
    out
}

/// Whether `bytes` is exactly one whole version.
fn is_whole(bytes: &[u8]) -> bool {
    if bytes.len() != LEN {
        return false;
    }
    let seed = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    bytes == contents(seed).as_slice()
}

/// The seed's bug: truncate the shared path and write it in place, chunk by chunk.
fn write_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    for chunk in bytes.chunks(CHUNK) {
        f.write_all(chunk)?;
    }
    Ok(())
}

fn read_all(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)?.read_to_end(&mut v)?;
    Ok(v)
}

#[derive(Default, Debug)]
struct Tally {
    reads: usize,
    torn: usize,
    missing: usize,
}

impl Tally {
    /// Reads the file as a consumer would; a missing file is a miss, not a failure.
    fn check(&mut self, path: &Path) {
        match read_all(path) {
            Ok(bytes) => {
                self.reads += 1;
                if !is_whole(&bytes) {
                    self.torn += 1;
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => self.missing += 1,
            Err(e) => panic!("read {}: {e}", path.display()),
        }
    }
}

/// Runs a child role and exits the process if this process is a child; returns otherwise.
fn child_main_if_requested() {
    let Ok(role) = std::env::var("DFS_RACE_ROLE") else {
        return;
    };
    let dir = std::env::var_os("DFS_RACE_DIR").expect("DFS_RACE_DIR set for children");
    let path = Path::new(&dir).join(FILE);
    if role == "killed-writer" {
        // Put forever, announcing each finished put; the parent kills us with SIGKILL. With
        // DFS_KILL_MID_PUT set, the first put stops halfway through its write, says so, and waits
        // on stdin (which the parent never writes), so the kill lands with the temp open.
        let stop_mid_put = std::env::var_os("DFS_KILL_MID_PUT").is_some();
        for round in 0u64.. {
            let bytes = contents(round);
            durable_fs::put_with(&path, |f| {
                for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
                    f.write_all(chunk)?;
                    if stop_mid_put && i == LEN / CHUNK / 2 {
                        println!("writing {round}");
                        std::io::stdout().flush()?;
                        let mut byte = [0u8; 1];
                        std::io::stdin().read_exact(&mut byte)?;
                    }
                }
                Ok(())
            })
            .expect("durable put");
            println!("put {round}");
            std::io::stdout().flush().expect("flush stdout");
        }
    }
    let id: u64 = std::env::var("DFS_RACE_ID")
        .expect("DFS_RACE_ID set")
        .parse()
        .expect("numeric id");
    let in_place = std::env::var("DFS_RACE_WRITER").is_ok_and(|w| w == "inplace");
    let mut tally = Tally::default();
    for round in 0..ROUNDS as u64 {
        if role == "remover" {
            tally.check(&path);
            if round % 4 == 0 {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => panic!("remove {}: {e}", path.display()),
                }
            }
            continue;
        }
        // Reuse the file if it is complete, else write it (the seed's "reuse on length").
        let complete = std::fs::metadata(&path).is_ok_and(|m| m.len() == LEN as u64);
        if !complete || round % 3 == 0 {
            let bytes = contents(id << 32 | round);
            if in_place {
                write_in_place(&path, &bytes).expect("in-place write");
            } else {
                durable_fs::put(&path, &bytes).expect("durable put");
            }
        }
        tally.check(&path);
    }
    println!(
        "RESULT reads={} torn={} missing={}",
        tally.reads, tally.torn, tally.missing
    );
    std::process::exit(0);
}

/// Runs the workers and the remover as separate processes in `dir`; returns the summed tally.
fn run_processes(dir: &Path, test_name: &str, writer: &str) -> Tally {
    let exe = std::env::current_exe().expect("path of the test binary");
    let children: Vec<_> = (0..=WORKERS)
        .map(|i| {
            let role = if i == WORKERS { "remover" } else { "worker" };
            Command::new(&exe)
                .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
                .env("DFS_RACE_ROLE", role)
                .env("DFS_RACE_DIR", dir)
                .env("DFS_RACE_ID", i.to_string())
                .env("DFS_RACE_WRITER", writer)
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn a child process")
        })
        .collect();
    let mut total = Tally::default();
    for child in children {
        let out = child.wait_with_output().expect("wait for a child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}",
            out.status
        );
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
            .unwrap_or_else(|| panic!("no RESULT line from child: {stdout}"));
        for field in line.split(' ') {
            let (k, v) = field.split_once('=').expect("key=value");
            let v: usize = v.parse().expect("count");
            match k {
                "reads" => total.reads += v,
                "torn" => total.torn += v,
                "missing" => total.missing += v,
                other => panic!("unknown field {other}"),
            }
        }
    }
    total
}

fn assert_never_torn(dir: &Path, test_name: &str) {
    let tally = run_processes(dir, test_name, "durable");
    eprintln!("durable writer: {tally:?}");
    assert_eq!(
        tally.torn, 0,
        "a reader saw a partial or mixed file: {tally:?}"
    );
    assert!(
        tally.reads >= WORKERS * ROUNDS / 2,
        "the check read the file often enough to mean something: {tally:?}"
    );
}

#[test]
fn heavy_seed004_race_durable_put_is_never_torn() {
    child_main_if_requested();
    let dir = tempfile::tempdir().expect("temp dir");
    assert_never_torn(
        dir.path(),
        "race::heavy_seed004_race_durable_put_is_never_torn",
    );
    assert!(
        crate::common::temps(dir.path()).is_empty(),
        "no temp is left behind by the racing writers"
    );
}

#[test]
fn heavy_seed004_race_durable_put_is_never_torn_on_xfs() {
    child_main_if_requested();
    run_or_skip(FsKind::Xfs, |root| {
        assert_never_torn(
            root,
            "race::heavy_seed004_race_durable_put_is_never_torn_on_xfs",
        );
    });
}

#[test]
fn heavy_seed004_race_negative_control_in_place_writer_tears() {
    child_main_if_requested();
    // The interleaving is the scheduler's; a few attempts make a miss of the window vanishingly
    // unlikely without any timing in the test.
    let mut seen = Vec::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("temp dir");
        let tally = run_processes(
            dir.path(),
            "race::heavy_seed004_race_negative_control_in_place_writer_tears",
            "inplace",
        );
        eprintln!("in-place writer: {tally:?}");
        if tally.torn > 0 {
            return;
        }
        seen.push(tally);
    }
    panic!("the check never caught the in-place writer tearing reads: {seen:?}");
}

/// kill -9 in the middle of puts: the target is one whole version, at most one temp is left,
/// the dead writer's lock went with it, and a sweep reclaims the temp.
#[test]
fn heavy_kill_9_mid_put_leaves_whole_target_and_sweepable_temp() {
    child_main_if_requested();
    let dir = tempfile::tempdir().expect("temp dir");
    // An old version to keep: the first writer dies before its first put completes.
    durable_fs::put(dir.path().join(FILE), &contents(u64::MAX)).expect("put the old version");
    for attempt in 0..3u32 {
        // The first writer is killed in the middle of a put, the others between or during puts.
        let mid_put = attempt == 0;
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "race::heavy_kill_9_mid_put_leaves_whole_target_and_sweepable_temp",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("DFS_RACE_ROLE", "killed-writer")
            .env("DFS_RACE_DIR", dir.path())
            .env("DFS_RACE_ID", "0")
            .env(
                if mid_put {
                    "DFS_KILL_MID_PUT"
                } else {
                    "DFS_UNUSED"
                },
                "1",
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the writer");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        // Kill it mid-put (it announced the half-written temp) or after a few finished puts.
        let wanted = if mid_put { 1 } else { 2 + attempt as usize };
        let marker = if mid_put { "writing " } else { "put " };
        let mut seen = 0;
        while seen < wanted {
            let line = lines
                .next()
                .expect("writer alive")
                .expect("read writer output");
            if line.contains(marker) {
                seen += 1;
            }
        }
        child.kill().expect("SIGKILL the writer");
        child.wait().expect("reap the writer");
        let bytes = read_all(&dir.path().join(FILE)).expect("the target exists");
        assert!(
            is_whole(&bytes),
            "after kill -9 the target is one whole version"
        );
        let temps = crate::common::temps(dir.path());
        assert!(
            temps.len() <= 1,
            "at most the one in-flight temp: {temps:?}"
        );
        eprintln!(
            "attempt {attempt}: {} temp(s) left by the killed writer",
            temps.len()
        );
        if mid_put {
            assert_eq!(temps.len(), 1, "a writer killed mid-put leaves its temp");
            assert_eq!(
                bytes,
                contents(u64::MAX),
                "a put killed mid-write left the old version"
            );
        }
        let report = durable_fs::sweep(
            dir.path(),
            &durable_fs::SweepPolicy {
                max_age: std::time::Duration::ZERO,
            },
        )
        .expect("sweep");
        assert_eq!(
            report.skipped_live, 0,
            "a dead writer holds no lock: {report:?}"
        );
        assert_eq!(
            report.removed.len(),
            temps.len(),
            "the leftover temp is reclaimed"
        );
        assert!(
            crate::common::temps(dir.path()).is_empty(),
            "nothing left after the sweep"
        );
    }
}

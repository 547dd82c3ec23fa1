//! Through fake compilers (shell scripts written by the test): argv, timeouts, output checks.

use crate::support::{process_is_gone, process_is_gone_within, script, write};
use nvcc::{CompileJob, Error, Nvcc, OutputKind, ProcessRunner, RunOptions, Runner, Severity};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// A fake compiler that records its argv (NUL-separated) in `$ARGV_OUT`, then writes the `-o` file
/// (with `$OUT_TEXT`, default "x") and a depfile naming `dep.h`, and exits `$EXIT` (default 0).
const RECORDING: &str = r#"
for arg in "$@"; do printf '%s\0' "$arg"; done > "$ARGV_OUT"
prev=""; out=""; dep=""
for arg in "$@"; do
  [ "$prev" = "-o" ] && out="$arg"
  [ "$prev" = "-MF" ] && dep="$arg"
  case "$arg" in -Xcompiler=-MD,-MF,*) dep="${arg#-Xcompiler=-MD,-MF,}" ;; esac
  prev="$arg"
done
[ -n "$WRITE_OUTPUT" ] && printf '%s' "${OUT_TEXT-x}" > "$out"
printf '%s: src.cu dep.h\n' "$out" > "$dep"
printf '%s\n' "$FAKE_STDERR" >&2
exit "${EXIT:-0}"
"#;

fn recording_job(dir: &std::path::Path, write_output: bool) -> CompileJob {
    let job = CompileJob::new("src.cu", "out.cubin", OutputKind::Cubin)
        .working_dir(dir)
        .env("ARGV_OUT", dir.join("argv"));
    if write_output {
        job.env("WRITE_OUTPUT", "1")
    } else {
        job
    }
}

#[test]
fn flags_with_spaces_and_shell_metacharacters_arrive_intact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = Nvcc::at(script(dir.path(), "nvcc", RECORDING)).expect("fake is executable");
    let job = recording_job(dir.path(), true)
        .arch("sm_90")
        .include_dir("dir with spaces/and $(touch pwned)")
        .define(
            "MSG",
            Some("hello world; rm -rf / && `touch pwned` | cat > x"),
        )
        .define("FLAG", None)
        .flag("-Xcompiler=-DA=\"quoted value\"")
        .flag("'single' \"double\" * ? [a] ~ $HOME \\ \t tab")
        .flag("")
        .std("c++17");
    let compiled = fake.compile(&job).expect("the fake compiler succeeds");
    let recorded = std::fs::read(dir.path().join("argv")).expect("the fake recorded its argv");
    let got: Vec<OsString> = recorded
        .split(|b| *b == 0)
        .map(|a| OsString::from(std::ffi::OsStr::from_bytes(a)))
        .collect();
    let mut want = job.argv(&fake, std::path::Path::new("placeholder"));
    // The depfile name is chosen per compile; compare it by position, everything else verbatim.
    let mf = want
        .iter()
        .position(|a| a == "-MF" || a.to_string_lossy().starts_with("-Xcompiler=-MD,-MF,"))
        .expect("argv requests a depfile");
    let mf = if want[mf] == "-MF" { mf + 1 } else { mf };
    want[mf] = got[mf].clone();
    want.push(OsString::new()); // The trailing NUL leaves one empty field.
    assert_eq!(
        got, want,
        "every argument arrives as one argv entry, byte for byte"
    );
    assert!(
        !dir.path().join("pwned").exists(),
        "no shell ever ran our arguments"
    );
    assert_eq!(
        compiled.headers,
        vec![dir.path().join("dep.h")],
        "headers come from the depfile, relative names resolved, the source excluded"
    );
}

#[test]
fn exit_zero_without_output_is_missing_output_even_if_a_stale_file_was_there() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = Nvcc::at(script(dir.path(), "nvcc", RECORDING)).expect("fake is executable");
    write(dir.path(), "out.cubin", "stale cubin from an earlier build");
    let err = fake
        .compile(&recording_job(dir.path(), false))
        .expect_err("exit 0 without writing the output is not success");
    assert!(
        matches!(&err, Error::MissingOutput { path } if *path == dir.path().join("out.cubin")),
        "a stale file at the output path is not taken for fresh output: {err}"
    );
}

#[test]
fn exit_zero_with_empty_output_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = Nvcc::at(script(dir.path(), "nvcc", RECORDING)).expect("fake is executable");
    let job = recording_job(dir.path(), true).env("OUT_TEXT", "");
    let err = fake
        .compile(&job)
        .expect_err("an empty output is not success");
    assert!(
        matches!(err, Error::EmptyOutput { .. }),
        "empty output reported: {err}"
    );
}

#[test]
fn nonzero_exit_with_output_is_a_failure_with_parsed_diagnostics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fake = Nvcc::at(script(dir.path(), "nvcc", RECORDING)).expect("fake is executable");
    let job = recording_job(dir.path(), true).env("EXIT", "2").env(
        "FAKE_STDERR",
        "src.cu:7:3: error: host compiler says no\nsome noise",
    );
    let err = fake
        .compile(&job)
        .expect_err("exit 2 is a failure even though output exists");
    let failure = err.failure().expect("a failure report");
    assert_eq!(
        failure.status.and_then(|s| s.code()),
        Some(2),
        "the exit status is kept"
    );
    assert_eq!(failure.diagnostics.len(), 1, "one diagnostic parsed");
    assert_eq!(failure.diagnostics[0].line, Some(7), "with its line");
    assert_eq!(failure.diagnostics[0].column, Some(3), "and column");
    assert_eq!(
        failure.diagnostics[0].severity,
        Severity::Error,
        "and severity"
    );
    assert!(
        failure.stderr_tail.contains("some noise"),
        "the stderr tail is kept"
    );
    assert!(
        err.to_string().contains("host compiler says no"),
        "Display shows the diagnostic"
    );
}

#[test]
fn timeout_kills_the_compiler_and_its_children() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("child.pid");
    let body = format!(
        "sleep 1000 &\necho $! > '{}.tmp' && mv '{0}.tmp' '{0}'\nwait\n",
        pidfile.display()
    );
    let fake = Nvcc::at(script(dir.path(), "nvcc", &body)).expect("fake is executable");
    let job = CompileJob::new("src.cu", "out.cubin", OutputKind::Cubin)
        .working_dir(dir.path())
        .timeout(Duration::from_secs(2));
    let err = fake
        .compile(&job)
        .expect_err("a hanging compiler times out");
    let failure = match &err {
        Error::Timeout(failure) => failure,
        other => panic!("expected Error::Timeout, got {other}"),
    };
    assert!(failure.timed_out, "the report says it timed out");
    let child: u32 = std::fs::read_to_string(&pidfile)
        .expect("the fake wrote its child's pid before the timeout")
        .trim()
        .parse()
        .expect("a pid");
    // The child held the stdout/stderr pipes, and run() drains them to EOF before returning, so
    // by now it is exiting; it may not be a zombie yet on a loaded machine.
    assert!(
        process_is_gone_within(child, Duration::from_secs(10)),
        "the compiler's child {child} was killed with its group"
    );
}

#[test]
fn runner_bounds_captured_output_and_drains_the_rest() {
    let opts = RunOptions {
        output_limit: 1 << 20,
        ..RunOptions::default()
    };
    let args: Vec<OsString> = ["-c", "head -c 10000000 /dev/zero >&2; echo done"]
        .iter()
        .map(OsString::from)
        .collect();
    let out = ProcessRunner
        .run(std::path::Path::new("/bin/sh"), &args, &opts)
        .expect("sh runs");
    assert!(
        out.status.success(),
        "the child was never blocked on a full pipe"
    );
    assert_eq!(out.stderr.len(), 1 << 20, "stderr is cut at the limit");
    assert!(out.stderr_truncated, "and says so");
    assert_eq!(out.stdout, b"done\n", "stdout is captured independently");
    assert!(!out.stdout_truncated, "stdout fit");
}

#[test]
fn spawn_failure_names_the_program() {
    let err = ProcessRunner
        .run(
            std::path::Path::new("/nonexistent/nvcc"),
            &[],
            &RunOptions::default(),
        )
        .expect_err("no such program");
    assert!(
        matches!(&err, Error::Spawn { program, .. } if program == std::path::Path::new("/nonexistent/nvcc")),
        "the error names the program: {err}"
    );
}

/// Set in the child copy of this test binary that plays the builder.
const BUILDER_FIFO: &str = "NVCC_TEST_BUILDER_FIFO";

#[test]
fn heavy_a_killed_builder_takes_its_compiler_with_it() {
    if let Some(fifo) = std::env::var_os(BUILDER_FIFO) {
        // Builder role: run a "compiler" that reports its pid through the fifo, then hangs. The
        // test's other half kills this process while run() waits.
        let args: Vec<OsString> = vec!["-c".into(), "echo $$ > \"$FIFO\"; exec sleep 1000".into()];
        let opts = RunOptions {
            env: vec![("FIFO".into(), fifo)],
            ..RunOptions::default()
        };
        let _ = ProcessRunner.run(std::path::Path::new("/bin/sh"), &args, &opts);
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("pid.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo works");
    let mut builder = std::process::Command::new(std::env::current_exe().expect("own path"))
        .args([
            "--exact",
            "fake_compiler::heavy_a_killed_builder_takes_its_compiler_with_it",
            "--nocapture",
        ])
        .env(BUILDER_FIFO, &fifo)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the builder");
    // Opening the fifo for reading blocks until the compiler opens it for writing.
    let compiler: i32 = std::fs::read_to_string(&fifo)
        .expect("read the compiler's pid")
        .trim()
        .parse()
        .expect("a pid");
    let pidfd = open_pidfd(compiler);
    builder.kill().expect("SIGKILL the builder");
    builder.wait().expect("reap the builder");
    // The compiler is not our child; its pidfd turns readable when it exits. The bound only turns a
    // failure into a report instead of a hang.
    let mut poll = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, alive across the call.
    let ready = unsafe { libc::poll(&mut poll, 1, 30_000) };
    // SAFETY: closing the descriptor we opened; nothing else uses it.
    unsafe { libc::close(pidfd) };
    let gone = ready == 1 || process_is_gone(compiler as u32);
    if !gone {
        // SAFETY: kill only sends a signal, to the sleep this test started.
        unsafe { libc::kill(compiler, libc::SIGKILL) };
    }
    assert!(
        gone,
        "the compiler {compiler} died with its builder (PR_SET_PDEATHSIG)"
    );
}

fn open_pidfd(pid: i32) -> i32 {
    // SAFETY: pidfd_open takes a pid and flags and returns a descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    assert!(fd >= 0, "pidfd_open({pid}) works on this kernel");
    fd as i32
}

/// A [`Runner`] with no process at all: it plays the compiler by writing the `-o` and `-MF` files.
struct InProcessCompiler {
    exit_code: i32,
}

impl Runner for InProcessCompiler {
    fn run(
        &self,
        _program: &std::path::Path,
        args: &[OsString],
        opts: &RunOptions,
    ) -> Result<nvcc::RunOutput, Error> {
        use std::os::unix::process::ExitStatusExt;
        let after = |flag: &str| {
            let at = args.iter().position(|a| a == flag).expect("flag present");
            let dir = opts
                .working_dir
                .clone()
                .expect("the job sets a working dir");
            dir.join(&args[at + 1])
        };
        std::fs::write(after("-o"), b"cubin").expect("write output");
        let depfile = nvcc::requested_depfile(args).expect("argv requests a depfile");
        let depfile = opts
            .working_dir
            .clone()
            .expect("the job sets a working dir")
            .join(depfile);
        std::fs::write(depfile, b"out: in.cu a.h\n").expect("write depfile");
        Ok(nvcc::RunOutput {
            status: std::process::ExitStatus::from_raw(self.exit_code << 8),
            stdout: Vec::new(),
            stderr: b"in.cu(1): warning #1-D: careful\n".to_vec(),
            stdout_truncated: false,
            stderr_truncated: false,
            timed_out: false,
            duration: Duration::from_millis(1),
            trace: None,
            trace_unavailable: None,
        })
    }
}

#[test]
fn the_runner_seam_takes_a_fake_and_the_status_still_decides() {
    let dir = tempfile::tempdir().expect("temp dir");
    let nvcc = Nvcc::at(script(dir.path(), "nvcc", "exit 99\n")).expect("placeholder binary");
    let job = CompileJob::new("in.cu", "out", OutputKind::Cubin).working_dir(dir.path());
    let ok = nvcc
        .compile_with(&job, &InProcessCompiler { exit_code: 0 })
        .expect("the fake runner's success is a success");
    assert_eq!(
        ok.headers,
        vec![dir.path().join("a.h")],
        "headers from the fake's depfile"
    );
    assert_eq!(
        ok.diagnostics[0].severity,
        Severity::Warning,
        "warnings are parsed on success"
    );
    let err = nvcc
        .compile_with(&job, &InProcessCompiler { exit_code: 1 })
        .expect_err("exit 1 fails even though output and depfile were written");
    assert!(
        matches!(err, Error::Failed(_)),
        "a failed status is a failure: {err}"
    );
}

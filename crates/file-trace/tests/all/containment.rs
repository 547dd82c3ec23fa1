//! Nothing escapes the trace: io_uring is refused, foreign ABIs are killed.

use crate::support::{exerciser, run_traced, tracer};
use std::process::Command;

#[test]
fn io_uring_setup_is_refused_inside_a_trace_only() {
    let Some(tracer) = tracer() else { return };
    let (output, trace) = run_traced(&tracer, Command::new(exerciser()).arg("io-uring"));
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("io_uring_setup {}", libc::ENOSYS),
        "the filter fails io_uring_setup with ENOSYS, so programs fall back to plain calls"
    );
    assert!(trace.is_complete());
    let untraced = Command::new(exerciser())
        .arg("io-uring")
        .output()
        .expect("run untraced");
    let untraced = String::from_utf8_lossy(&untraced.stdout);
    eprintln!("untraced: {untraced}");
    if std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").is_ok_and(|v| v.trim() == "0")
    {
        assert_eq!(
            untraced.trim(),
            "io_uring_setup 0",
            "outside a trace io_uring works here"
        );
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn an_i386_call_through_int_0x80_kills_the_tracee() {
    let Some(tracer) = tracer() else { return };
    let untraced = Command::new(exerciser())
        .arg("int80")
        .output()
        .expect("run untraced");
    assert!(
        untraced.status.success(),
        "this kernel runs i386 calls outside a trace (IA32 emulation): {:?}",
        untraced.status
    );
    use std::os::unix::process::ExitStatusExt;
    let (output, trace) = run_traced(&tracer, Command::new(exerciser()).arg("int80"));
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGSYS),
        "a foreign-ABI call is killed, not run untraced: {:?} {}",
        output.status,
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(trace.is_complete(), "the trace still ends normally");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn an_x32_call_kills_the_tracee() {
    let Some(tracer) = tracer() else { return };
    use std::os::unix::process::ExitStatusExt;
    let (output, _) = run_traced(&tracer, Command::new(exerciser()).arg("x32"));
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGSYS),
        "{:?}",
        output.status
    );
}

#[test]
fn a_call_numbered_minus_one_is_left_to_the_kernel() {
    let Some(tracer) = tracer() else { return };
    let (output, _) = run_traced(&tracer, Command::new(exerciser()).arg("minus-one"));
    assert!(output.status.success(), "not killed: {:?}", output.status);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("minus-one {}", libc::ENOSYS),
        "syscall(-1) fails with ENOSYS, as without a filter"
    );
}

//! Find and drive the CUDA compiler: compile jobs, dependency files and structured diagnostics.
//!
//! [`Nvcc::locate`] finds nvcc (environment, `PATH`, `/usr/local/cuda`, pip venvs);
//! [`CompileJob`] describes one compile; [`Nvcc::compile`] runs it as a child process and returns
//! the output path, every header the compile read and its warnings, or a [`CompileFailure`] with
//! the command line, exit status and parsed [`Diagnostic`]s. [`compile_many`] runs jobs in
//! parallel with a bound. [`Nvcc::identity_inputs`] gathers what a cache key needs to cover.
//!
//! # Guarantees
//! - Success means all of: the compiler exited with status 0, it was not killed at a timeout, the
//!   output exists (it was removed before the compile, so it is fresh) and is non-empty, and the
//!   dependency file was read and parsed.
//! - Every compile requests a dependency file (`-MD -MF`) and [`CompileOutput::headers`] lists
//!   what it names. With nvcc 13.5 (checked by this crate's tests) that file is the union over all
//!   passes: host, and device for every target architecture, so a header included only under
//!   `#if __CUDA_ARCH__ >= 900` is listed when (and only when) a target is sm_90 or newer, and
//!   host-only headers (`#ifndef __CUDA_ARCH__`) are listed for `-cubin` and `-ptx` too. No extra
//!   preprocessing pass is needed. An older nvcc that misses device-only includes would fail the
//!   test `depfile_lists_user_include_dir_and_device_only_headers`.
//! - Processes get argv only, never a shell, and stdin from `/dev/null`. Each compiler runs in its
//!   own process group; at its timeout, and again when it exits, the whole group gets `SIGKILL`,
//!   so cicc, ptxas or the host compiler cannot outlive it. stdout and stderr are captured up to
//!   4 MiB each (the rest is drained and dropped).
//! - The compiler gets `PR_SET_PDEATHSIG(SIGKILL)`: if the builder dies, so does nvcc.
//!
//! # Limitations
//! - Linux only (pidfd, `prctl`, `killpg`).
//! - `PR_SET_PDEATHSIG` reaches nvcc only, not the helpers it started: if the builder is killed,
//!   nvcc dies at once but a running cicc or ptxas finishes its current step (it writes only into
//!   nvcc's temporary directory) before exiting.
//! - `PR_SET_PDEATHSIG` fires when the spawning *thread* exits; [`compile_many`] and
//!   [`Nvcc::compile`] wait on the thread that spawned, so this only matters if you run compiles
//!   from threads you end early.
//! - Arguments arrive at nvcc intact, but nvcc itself runs some sub-steps through `sh`: nvcc 13.5
//!   lets the shell expand `$(...)` and backquotes inside `-D` values. Do not pass untrusted text
//!   in flags or defines.
//! - gcc's `#pragma once` takes byte-identical headers with equal mtimes for one file, so only
//!   the first one included is compiled and listed (seen with nvcc 13.5 and g++ 12). Hash header
//!   contents, not only their paths, when deciding freshness.
//! - Header paths are as nvcc wrote them (relative ones resolved against the working directory);
//!   they are not canonicalised.
//!
//! # Example
//! ```
//! use nvcc::{parse_depfile, parse_diagnostics, CompileJob, Nvcc, OutputKind, Severity};
//!
//! let diagnostics = parse_diagnostics("k.cu(3): error: expected a \";\"\n");
//! assert_eq!(diagnostics[0].line, Some(3));
//! assert_eq!(diagnostics[0].severity, Severity::Error);
//! let headers = parse_depfile("k.cubin : k.cu \\\n  my\\ header.h\n").expect("valid depfile");
//! assert_eq!(headers[1], std::path::Path::new("my header.h"));
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let Ok(nvcc) = Nvcc::locate() else { return Ok(()) }; // No CUDA compiler on this machine.
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("k.cu"), "extern \"C\" __global__ void k(float* x) { *x = 1; }\n")?;
//! let job = CompileJob::new(dir.path().join("k.cu"), dir.path().join("k.cubin"), OutputKind::Cubin)
//!     .arch("sm_90");
//! let compiled = nvcc.compile(&job)?;
//! assert!(std::fs::metadata(&compiled.output)?.len() > 0);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod cmdline;
mod compile;
mod depfile;
mod diagnostics;
mod error;
pub mod host_options;
mod identity;
mod job;
mod locate;
pub mod options;
pub mod release;
mod runner;
mod toolchain;

pub use compile::{compile_many, compile_many_with, CompileOutput};
pub use depfile::{parse_depfile, DepfileError};
pub use diagnostics::{parse_diagnostics, Diagnostic, Severity};
pub use error::{CompileFailure, Error, STDERR_TAIL_BYTES};
pub use identity::{
    host_compiler, host_compiler_version, relevant_env_values, IdentityInputs, RELEVANT_ENV,
};
pub use job::{requested_depfile, CompileJob, OutputKind, Target};
pub use locate::{LocateError, SearchAttempt};
pub use runner::{
    ProcessRunner, RunOptions, RunOutput, Runner, TraceUnavailable, DEFAULT_OUTPUT_LIMIT,
};
pub use toolchain::Nvcc;

//! kill -9 fault injection and a multi-process race harness for `jit-cache`
//! (`cargo xtask crash-test`).
//!
//! The `crash-harness` binary runs worker processes against one cache root (builds through a
//! slow fake compiler, durable puts, staged directory commits, `gc`, `verify`), kills them with
//! SIGKILL on a seeded schedule and at named failpoints, and has a separate checker process
//! verify the root after every few kills. This library holds what those processes share: the
//! workload's deterministic contents ([`expected_artifact`], [`put_contents`], [`dir_files`]),
//! the seeded generator ([`Rng`]), the event log's rules ([`parse`], [`analyze`]) and the
//! checker's report ([`CheckReport`]).
//!
//! # Guarantees
//! - **Same seed, same schedule**: the kill delays, the victims and which launches arm a
//!   failpoint come from [`Rng`] seeded with the printed seed.
//! - **The right bytes are known**: the fake compiler's output is a pure function of the source
//!   text ([`expected_artifact`]), puts and staged files are self-describing, so a checker tells
//!   whole from torn without trusting anything the cache wrote.
//! - **The rules never flag a correct protocol**: they read the event log in append order, and
//!   every line is written on the lenient side of the act it records (see [`analyze`]).
//!
//! # Limitations
//! - Linux only; it needs the `failpoints` build of `jit-cache`.
//! - SIGKILL tests process crashes, not power loss: unsynced data survives in the page cache.
//!   Power loss is `powercut-fs`'s job (`cargo xtask crash-test --power-loss`).
//! - A kill between an entry's rename and the `published` line makes the double-compile rule
//!   lenient for that key once (the protocol would not recompile there anyway).
//!
//! # Example
//! ```
//! use crash_harness::{analyze, parse};
//! use std::collections::HashMap;
//!
//! // Two processes hold one lock file at once: the rule reports it.
//! let log = "1 1 100 acquire aa /c/v1/locks/aa.lock\n2 2 200 acquire aa /c/v1/locks/aa.lock\n";
//! let findings = analyze(&parse(log), &HashMap::new(), "/c");
//! assert_eq!(findings.lock_overlaps.len(), 1);
//! ```
#![deny(missing_docs)]

mod content;
mod report;
mod rng;
mod trace;

pub use content::{
    check_put, dir_files, expected_artifact, fnv1a, kernel_index_of_name, kernel_index_of_text,
    kernel_name, kernel_text, put_contents, store_index_of_key, store_key, stored_files,
    PUT_HEADER, STORE_NAMESPACE,
};
pub use report::CheckReport;
pub use rng::Rng;
pub use trace::{analyze, analyze_across_hosts, parse, Event, TraceFindings};

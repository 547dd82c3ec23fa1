//! Running the library's blocking calls off the Python thread, so that Ctrl-C gets through.
//!
//! A compile or a lock wait inside `Cache.get_or_build` can take minutes, and Python runs its
//! signal handlers only on the main thread between bytecodes. So the call runs on a helper
//! thread while the Python thread waits with the GIL released, in slices of [`SLICE`], and
//! checks for signals between them. On `KeyboardInterrupt` the call is abandoned, not killed:
//! the library has no way to stop a compile half-way, and it needs none to stay correct. The
//! helper finishes the compile and publishes it by the library's own protocol (a whole,
//! fsynced entry or nothing), and whatever it returns (an answer's pin) is dropped at once.
//!
//! Each helper thread is the only worker of a rayon pool of its own (`use_current_thread`),
//! so the fingerprint crate's parallel hashing never touches rayon's global pool: in a forked
//! child that pool's threads do not exist, and a job given to it would wait forever. The
//! helpers themselves are per process ([`PerProcess`]): a child starts its own.

use crate::process::PerProcess;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

/// How long the Python thread waits before it looks for a signal again.
pub(crate) const SLICE: Duration = Duration::from_millis(100);

type Job = Box<dyn FnOnce() + Send>;

/// This process's idle helpers, each a sender to one helper thread.
static IDLE: PerProcess<Mutex<Vec<mpsc::Sender<Job>>>> = PerProcess::new();

fn idle() -> &'static Mutex<Vec<mpsc::Sender<Job>>> {
    match IDLE.get_or_try_init(|| Ok::<_, std::convert::Infallible>(Mutex::new(Vec::new()))) {
        Ok(idle) => idle,
        Err(never) => match never {},
    }
}

/// Starts a helper thread; returns the sender of its jobs.
fn start_helper() -> PyResult<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    let back = tx.clone();
    std::thread::Builder::new()
        .name("jit-cache-py".into())
        .spawn(move || {
            // This thread becomes its pool's one worker: every rayon call made on it runs here.
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .use_current_thread()
                .build();
            let _pool = pool;
            // A hit takes tens of microseconds: a helper that has just answered waits a little
            // for the next job awake, sparing the futex wake-up (most of a hit's overhead).
            while let Some(job) = next_job(&rx) {
                job();
                // Idle again. The list is this process's (threads do not cross a fork).
                idle()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(back.clone());
            }
        })
        .map_err(|e| PyRuntimeError::new_err(format!("jit_cache: start a helper thread: {e}")))?;
    Ok(tx)
}

/// How long a thread spins for a message before it sleeps on the channel.
const SPIN: Duration = Duration::from_micros(100);

/// The next message of `rx`: spun for during [`SPIN`], then waited for; `None` once closed.
fn next_job(rx: &mpsc::Receiver<Job>) -> Option<Job> {
    let started = std::time::Instant::now();
    while started.elapsed() < SPIN {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    rx.recv().ok()
}

/// Runs `work` on a helper thread and waits for it with the GIL released, raising
/// `KeyboardInterrupt` (or whatever a signal handler raises) within [`SLICE`] of the signal.
pub(crate) fn run<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    let (result_tx, result_rx) = mpsc::sync_channel(1);
    let mut job: Job = Box::new(move || {
        let result = std::panic::catch_unwind(AssertUnwindSafe(work));
        // The caller may have gone (interrupted): the result is then dropped here.
        let _ = result_tx.send(result);
    });
    loop {
        let helper = idle().lock().unwrap_or_else(|p| p.into_inner()).pop();
        let helper = match helper {
            Some(helper) => helper,
            None => start_helper()?,
        };
        match helper.send(job) {
            Ok(()) => break,
            // A helper that is gone hands the job back: try another.
            Err(mpsc::SendError(returned)) => job = returned,
        }
    }
    let mut result_rx = result_rx;
    loop {
        // The receiver travels into the GIL-free closure and back (it is `Send`, not `Sync`).
        let (rx, received) = py.detach(move || {
            // Spin briefly first: a hit answers within it, without a sleep and a wake-up.
            let started = std::time::Instant::now();
            while started.elapsed() < SPIN {
                match result_rx.try_recv() {
                    Ok(value) => return (result_rx, Ok(value)),
                    Err(mpsc::TryRecvError::Disconnected) => {
                        return (result_rx, Err(mpsc::RecvTimeoutError::Disconnected))
                    }
                    Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
                }
            }
            let received = result_rx.recv_timeout(SLICE);
            (result_rx, received)
        });
        result_rx = rx;
        match received {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(_panic)) => {
                return Err(PyRuntimeError::new_err(
                    "jit_cache: the library panicked (a bug: please report it with the traceback above)",
                ))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "jit_cache: a helper thread ended without an answer",
                ))
            }
        }
    }
}

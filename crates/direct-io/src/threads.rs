//! The thread-pool engine: workers that each issue `pread` for one request at a time.

use crate::op::{Done, Op};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A fixed pool of reader threads fed through a channel.
pub(crate) struct ThreadPool {
    jobs: Option<Sender<Op>>,
    done: Receiver<Done>,
    workers: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    pub(crate) fn new(threads: usize) -> std::io::Result<ThreadPool> {
        let (jobs, job_rx) = channel::<Op>();
        let (done_tx, done) = channel::<Done>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let rx = Arc::clone(&job_rx);
            let tx = done_tx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("direct-io-{i}"))
                .spawn(move || worker(&rx, &tx))?;
            workers.push(handle);
        }
        Ok(ThreadPool {
            jobs: Some(jobs),
            done,
            workers,
        })
    }

    /// Queues `op`; its buffer must stay valid until its completion is returned.
    pub(crate) fn submit(&mut self, op: Op) -> std::io::Result<()> {
        self.jobs
            .as_ref()
            .and_then(|j| j.send(op).ok())
            .ok_or_else(|| std::io::Error::other("the reader threads have exited"))
    }

    /// Blocks for the next completion.
    pub(crate) fn complete(&mut self) -> std::io::Result<Done> {
        self.done
            .recv()
            .map_err(|_| std::io::Error::other("the reader threads have exited"))
    }

    /// Returns a completion if one is ready.
    pub(crate) fn try_complete(&mut self) -> Option<Done> {
        self.done.try_recv().ok()
    }
}

fn worker(rx: &Mutex<Receiver<Op>>, tx: &Sender<Done>) {
    loop {
        // A poisoned lock means another worker panicked while receiving; keep serving.
        let op = match rx.lock() {
            Ok(guard) => guard.recv(),
            Err(poisoned) => poisoned.into_inner().recv(),
        };
        let Ok(op) = op else { return };
        let result = loop {
            // SAFETY: the submitter guarantees op.buf is valid for op.len bytes and not accessed
            // by anyone else until this op's completion is received (see Op).
            let n = unsafe { libc::pread(op.fd, op.buf.cast(), op.len, op.offset as libc::off_t) };
            if n >= 0 {
                break Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                break Err(e);
            }
        };
        if tx
            .send(Done {
                tag: op.tag,
                result,
            })
            .is_err()
        {
            return;
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        // Closing the job channel ends every worker's loop.
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

//! The io_uring engine: a ring of `queue_depth` entries, optional registered buffers, and a
//! thread pool for operations the ring does not support (EOPNOTSUPP).

use crate::op::{Done, Op};
use crate::threads::ThreadPool;
use io_uring::{opcode, types, IoUring};
use std::collections::HashMap;

pub(crate) struct UringBackend {
    ring: IoUring,
    /// Operations in the ring, by tag, kept so one can be resubmitted on the pool.
    in_ring: HashMap<usize, Op>,
    /// Submission entries queued but not yet passed to the kernel.
    unsubmitted: usize,
    pool: Option<ThreadPool>,
    pool_inflight: usize,
    pool_threads: usize,
    registered: bool,
    /// Operations resubmitted on the pool after EOPNOTSUPP.
    pub(crate) resubmitted_on_pool: u64,
    /// For tests: pretend the next N ring completions failed with EOPNOTSUPP.
    #[cfg(test)]
    pub(crate) inject_eopnotsupp: usize,
}

impl UringBackend {
    pub(crate) fn new(queue_depth: u32, pool_threads: usize) -> std::io::Result<UringBackend> {
        let ring = IoUring::new(queue_depth.max(1))?;
        Ok(UringBackend {
            ring,
            in_ring: HashMap::new(),
            unsubmitted: 0,
            pool: None,
            pool_inflight: 0,
            pool_threads,
            registered: false,
            resubmitted_on_pool: 0,
            #[cfg(test)]
            inject_eopnotsupp: 0,
        })
    }

    /// Registers `bufs` as fixed buffers. The caller keeps them alive until `unregister`.
    pub(crate) fn register(&mut self, bufs: &[(*mut u8, usize)]) -> std::io::Result<()> {
        let iov: Vec<libc::iovec> = bufs
            .iter()
            .map(|&(p, l)| libc::iovec {
                iov_base: p.cast(),
                iov_len: l,
            })
            .collect();
        // SAFETY: the stream keeps every buffer alive and unmoved until it calls unregister,
        // which it does before freeing them (also when unwinding).
        unsafe { self.ring.submitter().register_buffers(&iov)? };
        self.registered = true;
        Ok(())
    }

    pub(crate) fn unregister(&mut self) {
        if self.registered {
            // An error leaves the registration to die with the ring; nothing reads it again.
            let _ = self.ring.submitter().unregister_buffers();
            self.registered = false;
        }
    }

    pub(crate) fn submit(&mut self, op: Op) -> std::io::Result<()> {
        let entry = match op.fixed {
            Some(index) if self.registered => {
                opcode::ReadFixed::new(types::Fd(op.fd), op.buf, op.len as u32, index)
                    .offset(op.offset)
                    .build()
            }
            _ => opcode::Read::new(types::Fd(op.fd), op.buf, op.len as u32)
                .offset(op.offset)
                .build(),
        }
        .user_data(op.tag as u64);
        loop {
            // SAFETY: the entry's buffer stays valid until its completion is reaped (see Op).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                break;
            }
            // The submission queue is full: hand the queued entries to the kernel.
            self.ring.submit()?;
            self.unsubmitted = 0;
        }
        self.unsubmitted += 1;
        self.in_ring.insert(op.tag, op);
        Ok(())
    }

    pub(crate) fn complete(&mut self) -> std::io::Result<Done> {
        // Hand queued entries to the kernel before reaping, so refills go out while earlier
        // completions are handled and the queue depth stays full.
        if self.unsubmitted > 0 {
            self.ring.submit()?;
            self.unsubmitted = 0;
        }
        loop {
            if let Some(done) = self.pool.as_mut().and_then(|p| p.try_complete()) {
                self.pool_inflight -= 1;
                return Ok(done);
            }
            let cqe = self.ring.completion().next();
            if let Some(cqe) = cqe {
                let tag = cqe.user_data() as usize;
                if let Some(done) = self.on_completion(tag, cqe.result())? {
                    return Ok(done);
                }
                continue;
            }
            if self.in_ring.is_empty() {
                if self.pool_inflight > 0 {
                    let pool = self
                        .pool
                        .as_mut()
                        .ok_or_else(|| std::io::Error::other("pool vanished"))?;
                    let done = pool.complete()?;
                    self.pool_inflight -= 1;
                    return Ok(done);
                }
                return Err(std::io::Error::other("no read in flight to wait for"));
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => self.unsubmitted = 0,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Turns a ring completion into a result, or resubmits the operation (on the pool after
    /// EOPNOTSUPP, on the ring after EAGAIN or EINTR) and returns None.
    fn on_completion(&mut self, tag: usize, res: i32) -> std::io::Result<Option<Done>> {
        #[cfg(test)]
        let res = if self.inject_eopnotsupp > 0 {
            self.inject_eopnotsupp -= 1;
            -libc::EOPNOTSUPP
        } else {
            res
        };
        let Some(op) = self.in_ring.remove(&tag) else {
            return Err(std::io::Error::other(format!(
                "completion for unknown request {tag}"
            )));
        };
        if res >= 0 {
            return Ok(Some(Done {
                tag,
                result: Ok(res as usize),
            }));
        }
        match -res {
            libc::EOPNOTSUPP => {
                if self.pool.is_none() {
                    self.pool = Some(ThreadPool::new(self.pool_threads)?);
                }
                if let Some(pool) = self.pool.as_mut() {
                    pool.submit(op)?;
                    self.pool_inflight += 1;
                    self.resubmitted_on_pool += 1;
                }
                Ok(None)
            }
            libc::EAGAIN | libc::EINTR => {
                self.submit(op)?;
                Ok(None)
            }
            errno => Ok(Some(Done {
                tag,
                result: Err(std::io::Error::from_raw_os_error(errno)),
            })),
        }
    }
}

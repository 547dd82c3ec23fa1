//! Building many kernels at once, with a bound on parallelism and a progress callback.
//!
//! Each kernel goes through the same path as [`Cache::get_or_build`], which holds at most one key
//! lock at a time, so a batch never holds two locks at once and cannot deadlock against another
//! batch. Every spec is resolved once, before any build starts, against the working directory of
//! that moment. The stat cache is saved once, when the batch ends.

use crate::build::request::Request;
use crate::build::spec::KernelSpec;
use crate::cache::{Answer, Cache};
use crate::error::Result;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// One finished kernel, reported to the progress callback.
#[derive(Debug)]
pub struct Progress<'a> {
    /// How many kernels are finished, this one included.
    pub done: usize,
    /// How many there are.
    pub total: usize,
    /// The kernel's spec.
    pub spec: &'a KernelSpec,
    /// Its result.
    pub result: &'a Result<Answer>,
}

impl Cache {
    /// Builds `specs` with at most `parallelism` compiles at once (default: the available
    /// parallelism), calling `progress` as each finishes. Results come back in the order of
    /// `specs`; each failure stays with its own spec.
    pub fn build_many(
        &self,
        specs: &[KernelSpec],
        parallelism: Option<usize>,
        progress: &(dyn Fn(Progress<'_>) + Sync),
    ) -> Vec<Result<Answer>> {
        let requests: Vec<Result<Request>> = specs.iter().map(Request::resolve).collect();
        let answer = |i: usize| match &requests[i] {
            Ok(request) => self.answer(request),
            Err(e) => Err(crate::error::Error::InvalidSpec {
                name: specs[i].name.clone(),
                reason: e.to_string(),
            }),
        };
        self.cx
            .batch_depth
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let results = self.build_resolved(specs, &requests, &answer, parallelism, progress);
        self.cx
            .batch_depth
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.cx.save_stat_cache();
        results
    }

    fn build_resolved(
        &self,
        specs: &[KernelSpec],
        requests: &[Result<Request>],
        answer: &(dyn Fn(usize) -> Result<Answer> + Sync),
        parallelism: Option<usize>,
        progress: &(dyn Fn(Progress<'_>) + Sync),
    ) -> Vec<Result<Answer>> {
        if specs.len() == 1 {
            // One kernel: no thread to start (a CLI hit is a few milliseconds in all).
            let result = answer(0);
            progress(Progress {
                done: 1,
                total: 1,
                spec: &specs[0],
                result: &result,
            });
            return vec![result];
        }
        let workers = parallelism
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            })
            .clamp(1, specs.len().max(1));
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        // Kernels another process is compiling right now are put off until the rest are done, so
        // that processes asking for the same batch spread over it instead of queueing in step.
        let deferred: Mutex<Vec<usize>> = Mutex::new(Vec::new());
        let results: Mutex<Vec<Option<Result<Answer>>>> =
            Mutex::new((0..specs.len()).map(|_| None).collect());
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let i = if i < specs.len() {
                        let busy = requests[i]
                            .as_ref()
                            .is_ok_and(|r| self.key_is_being_built(r));
                        if busy {
                            deferred.lock().unwrap_or_else(|p| p.into_inner()).push(i);
                            continue;
                        }
                        i
                    } else {
                        match deferred.lock().unwrap_or_else(|p| p.into_inner()).pop() {
                            Some(i) => i,
                            None => break,
                        }
                    };
                    let spec = &specs[i];
                    let result = answer(i);
                    let finished = done.fetch_add(1, Ordering::SeqCst) + 1;
                    progress(Progress {
                        done: finished,
                        total: specs.len(),
                        spec,
                        result: &result,
                    });
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(result);
                });
            }
        });
        results
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(crate::error::ToolchainError::WorkerStopped.into())))
            .collect()
    }
}

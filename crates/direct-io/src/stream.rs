//! Streaming byte ranges through a ring of slot buffers into a sink whose copies may finish
//! later (device copies): a slot is refilled only after the sink says its copy finished.

use crate::engine::{Engine, EngineKind};
use crate::file::{DirectFile, ReadMode};
use crate::op::Op;
use crate::plan::{plan, ByteRange, Window};
use crate::{AlignedBuf, Error, SinkError};
use std::collections::VecDeque;

/// The ring of slot buffers a stream reads into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    /// Number of slots: at most this many reads are in flight plus copies pending.
    pub slots: usize,
    /// Bytes per slot, rounded up to the file's alignment.
    pub slot_size: usize,
}

impl Default for RingConfig {
    /// Eight slots of 4 MiB.
    fn default() -> Self {
        RingConfig {
            slots: 8,
            slot_size: 4 << 20,
        }
    }
}

/// Where streamed bytes go. The stream calls [`Sink::copy`] for each piece of a range that a
/// slot read holds, then, before it reads into that slot again (and before it returns or frees
/// the slot), [`Sink::wait`] for the slot.
///
/// The bytes passed to `copy` stay valid and unchanged until `wait` for that slot returns, so
/// a sink may start an asynchronous copy from them (a DMA from pinned memory) and finish it in
/// `wait`.
pub trait Sink {
    /// Called once per stream with every slot's memory before any read, for sinks that pin it
    /// (`cuMemHostRegister`). The memory stays at these addresses until [`Sink::detach_slots`].
    fn attach_slots(&mut self, slots: &[&[u8]]) -> Result<(), SinkError> {
        let _ = slots;
        Ok(())
    }

    /// Starts copying `bytes`, which are bytes `offset_in_range..offset_in_range+bytes.len()`
    /// of range number `range`, out of slot `slot`.
    fn copy(
        &mut self,
        slot: usize,
        range: usize,
        offset_in_range: u64,
        bytes: &[u8],
    ) -> Result<(), SinkError>;

    /// Returns once every copy started from `slot` has finished reading the slot.
    fn wait(&mut self, slot: usize) -> Result<(), SinkError>;

    /// Called once at the end of a stream after every wait, before the slots are freed.
    fn detach_slots(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Whether io_uring registered buffers were used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisteredBuffers {
    /// The slots were registered and read with `READ_FIXED`.
    Used,
    /// Not applicable (thread engine) or disabled in the config.
    NotUsed,
    /// Registration failed (ENOMEM when over `RLIMIT_MEMLOCK`); plain reads were used.
    Refused(String),
}

/// What a stream did.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamReport {
    /// The engine that ran the reads.
    pub engine: EngineKind,
    /// O_DIRECT or buffered, and why.
    pub mode: ReadMode,
    /// Bytes handed to the sink.
    pub bytes_delivered: u64,
    /// Slot reads planned (each may take more than one request at a short read).
    pub slot_reads: u64,
    /// Read requests submitted to the engine.
    pub read_calls: u64,
    /// Whether registered buffers were used.
    pub registered_buffers: RegisteredBuffers,
}

/// Holds the slots and the engine while reads are in flight. Dropping it (also while unwinding
/// from a panicking sink) first drains every read in flight, then frees the slots only if every
/// copy was waited for; otherwise it leaks them, because a device may still be reading them.
struct Running<'e> {
    engine: &'e mut Engine,
    slots: Vec<AlignedBuf>,
    inflight: usize,
    registered: bool,
    safe_to_free: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        while self.inflight > 0 {
            match self.engine.complete() {
                Ok(_) => self.inflight -= 1,
                Err(_) => {
                    self.engine.poison();
                    break;
                }
            }
        }
        if self.inflight == 0 && self.registered {
            self.engine.unregister();
        }
        if self.inflight > 0 || !self.safe_to_free {
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

impl Engine {
    /// Streams `ranges` of `file` into `sink` through a ring of `ring.slots` slot buffers.
    ///
    /// Before any read, every range is checked against the file's size (the smaller of the size
    /// at open and now): a range past the end is [`Error::EndOfFile`] naming it, and nothing is
    /// read or copied. A file shortened during the stream also ends in [`Error::EndOfFile`];
    /// a slot read that comes back short is never handed to the sink.
    ///
    /// Any error stops new reads; reads in flight are drained and every slot that has copies
    /// is waited for before the error is returned, so no slot is reused or freed early.
    pub fn stream(
        &mut self,
        file: &DirectFile,
        ranges: &[ByteRange],
        ring: RingConfig,
        sink: &mut dyn Sink,
    ) -> Result<StreamReport, Error> {
        let path = file.path();
        if self.is_poisoned() {
            return Err(Error::EngineSetup {
                engine: self.kind().name(),
                reason: "an earlier stream could not drain its reads; create a new engine".into(),
            });
        }
        let align = file.alignment();
        if ring.slots == 0 || ring.slot_size == 0 || ring.slots > u16::MAX as usize {
            return Err(Error::Config {
                path: path.to_path_buf(),
                reason: format!(
                    "ring of {} slots of {} bytes: need 1..=65535 slots of at least 1 byte",
                    ring.slots, ring.slot_size
                ),
            });
        }
        let slot_size = align.up(ring.slot_size as u64);
        let limit = file.size().min(file.current_size()?);
        #[cfg(all(test, not(loom)))]
        let ranges_to_check = if tests::SKIP_SIZE_CHECK.with(|c| c.get()) {
            &[][..]
        } else {
            ranges
        };
        #[cfg(not(all(test, not(loom))))]
        let ranges_to_check = ranges;
        for r in ranges_to_check {
            if r.offset.checked_add(r.len).is_none_or(|end| end > limit) {
                return Err(Error::EndOfFile {
                    path: path.to_path_buf(),
                    offset: r.offset,
                    wanted: r.len,
                    available: limit.saturating_sub(r.offset),
                });
            }
        }
        let windows = plan(ranges, slot_size, &align);
        let nslots = ring.slots.min(windows.len().max(1));
        let mut slots = Vec::with_capacity(nslots);
        for _ in 0..nslots {
            slots.push(
                AlignedBuf::new(slot_size as usize, align.buffer()).ok_or_else(|| {
                    Error::Config {
                        path: path.to_path_buf(),
                        reason: format!("alignment {} is not a power of two", align.buffer()),
                    }
                })?,
            );
        }
        let mut run = Running {
            engine: self,
            slots,
            inflight: 0,
            registered: false,
            safe_to_free: false,
        };
        let sink_err = |op, source| Error::Sink {
            op,
            path: path.to_path_buf(),
            source,
        };

        let views: Vec<(*mut u8, usize)> = run
            .slots
            .iter_mut()
            .map(|s| (s.as_mut_ptr(), s.len()))
            .collect();
        let registered_buffers = match run.engine.register(&views) {
            Ok(true) => {
                run.registered = true;
                RegisteredBuffers::Used
            }
            Ok(false) => RegisteredBuffers::NotUsed,
            Err(e) => RegisteredBuffers::Refused(e.to_string()),
        };
        {
            let shared: Vec<&[u8]> = run.slots.iter().map(|s| s.as_slice()).collect();
            sink.attach_slots(&shared)
                .map_err(|e| sink_err("attach slots", e))?;
        }

        let calls_before = file.read_calls();
        let mut free: Vec<usize> = (0..nslots).rev().collect();
        let mut copying: VecDeque<usize> = VecDeque::new();
        let mut window_of = vec![0usize; nslots];
        let mut pos = vec![0u64; nslots];
        let mut at = vec![0u64; nslots];
        let mut next = 0usize;
        let mut delivered = 0u64;
        let mut err: Option<Error> = None;
        let direct = file.mode().is_direct();

        let submit = |run: &mut Running<'_>,
                      slot: usize,
                      w: &Window,
                      from: u64,
                      at: &mut [u64]|
         -> Result<(), Error> {
            let start = if direct { align.down(from) } else { from };
            let offset_in_slot = (start - w.start) as usize;
            let len = (w.start + w.len - start) as usize;
            let buf = run.slots[slot].as_mut_slice()[offset_in_slot..].as_mut_ptr();
            at[slot] = start;
            file.count_read();
            run.engine
                .submit(Op {
                    fd: file.raw_fd(),
                    offset: start,
                    buf,
                    len,
                    tag: slot,
                    fixed: run.registered.then_some(slot as u16),
                })
                .map_err(|e| Error::Engine {
                    op: "submit read",
                    path: path.to_path_buf(),
                    engine: run.engine.kind().name(),
                    source: e,
                })?;
            run.inflight += 1;
            Ok(())
        };

        loop {
            while err.is_none() && next < windows.len() {
                let slot = if let Some(s) = free.pop() {
                    s
                } else if let Some(s) = copying.pop_front() {
                    if let Err(e) = sink.wait(s) {
                        // The slot's copy state is unknown: it is never reused or freed.
                        err = Some(sink_err("wait", e));
                        break;
                    }
                    s
                } else {
                    break;
                };
                let w = &windows[next];
                window_of[slot] = next;
                pos[slot] = w.start.max(
                    w.pieces
                        .first()
                        .map_or(w.start, |p| w.start + p.offset_in_slot as u64),
                );
                if let Err(e) = submit(&mut run, slot, w, pos[slot], &mut at) {
                    free.push(slot);
                    err = Some(e);
                    break;
                }
                next += 1;
            }
            if run.inflight == 0 {
                break;
            }
            let done = match run.engine.complete() {
                Ok(d) => d,
                Err(e) => {
                    run.engine.poison();
                    return Err(Error::Engine {
                        op: "wait for a read",
                        path: path.to_path_buf(),
                        engine: run.engine.kind().name(),
                        source: e,
                    });
                }
            };
            run.inflight -= 1;
            let slot = done.tag;
            let n = match done.result {
                Ok(n) => n,
                Err(e) => {
                    free.push(slot);
                    err.get_or_insert(Error::Io {
                        op: if direct { "read O_DIRECT" } else { "read" },
                        path: path.to_path_buf(),
                        source: e,
                    });
                    continue;
                }
            };
            if err.is_some() {
                free.push(slot);
                continue;
            }
            let w = &windows[window_of[slot]];
            let reached = at[slot] + n as u64;
            if reached <= pos[slot] {
                // No progress: the file ends at pos[slot] (it shrank after the size check). The
                // first range not wholly in the slot names the end of file; nothing of this
                // slot is copied.
                free.push(slot);
                let valid = pos[slot];
                let p = w
                    .pieces
                    .iter()
                    .find(|p| w.start + p.offset_in_slot as u64 + p.len > valid)
                    .or(w.pieces.first());
                if let Some(p) = p {
                    let r = ranges[p.range];
                    err = Some(Error::EndOfFile {
                        path: path.to_path_buf(),
                        offset: r.offset,
                        wanted: r.len,
                        available: valid.saturating_sub(r.offset),
                    });
                }
                continue;
            }
            pos[slot] = reached;
            if reached < w.needed_end {
                if let Err(e) = submit(&mut run, slot, w, reached, &mut at) {
                    free.push(slot);
                    err = Some(e);
                }
                continue;
            }
            let bytes = run.slots[slot].as_slice();
            for p in &w.pieces {
                let piece = &bytes[p.offset_in_slot..p.offset_in_slot + p.len as usize];
                if let Err(e) = sink.copy(slot, p.range, p.offset_in_range, piece) {
                    err = Some(sink_err("copy", e));
                    break;
                }
                delivered += p.len;
            }
            copying.push_back(slot);
        }

        // Every read has completed. Wait for every slot with copies before anything is freed.
        let mut all_waited = true;
        while let Some(s) = copying.pop_front() {
            if let Err(e) = sink.wait(s) {
                all_waited = false;
                err.get_or_insert(sink_err("wait", e));
            }
        }
        if all_waited {
            if let Err(e) = sink.detach_slots() {
                err.get_or_insert(sink_err("detach slots", e));
            } else {
                run.safe_to_free = true;
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        Ok(StreamReport {
            engine: run.engine.kind(),
            mode: file.mode().clone(),
            bytes_delivered: delivered,
            slot_reads: windows.len() as u64,
            read_calls: file.read_calls() - calls_before,
            registered_buffers,
        })
    }
}

/// A sink that copies every range into its own `Vec<u8>` in host memory, synchronously.
#[derive(Debug, Clone, Default)]
pub struct HostSink {
    buffers: Vec<Vec<u8>>,
}

impl HostSink {
    /// A sink with one zeroed buffer per range, sized to it.
    pub fn for_ranges(ranges: &[ByteRange]) -> HostSink {
        HostSink::with_lengths(ranges.iter().map(|r| r.len))
    }

    /// A sink with one zeroed buffer per length.
    pub fn with_lengths(lens: impl IntoIterator<Item = u64>) -> HostSink {
        HostSink {
            buffers: lens.into_iter().map(|l| vec![0u8; l as usize]).collect(),
        }
    }

    /// The buffers, one per range.
    pub fn buffers(&self) -> &[Vec<u8>] {
        &self.buffers
    }

    /// Takes the buffers.
    pub fn into_buffers(self) -> Vec<Vec<u8>> {
        self.buffers
    }
}

impl Sink for HostSink {
    fn copy(
        &mut self,
        _slot: usize,
        range: usize,
        offset_in_range: u64,
        bytes: &[u8],
    ) -> Result<(), SinkError> {
        let dst = self
            .buffers
            .get_mut(range)
            .and_then(|b| {
                let from = offset_in_range as usize;
                b.get_mut(from..from.checked_add(bytes.len())?)
            })
            .ok_or_else(|| {
                SinkError::new(format!(
                    "piece of range {range} at {offset_in_range} (+{}) does not fit its buffer",
                    bytes.len()
                ))
            })?;
        dst.copy_from_slice(bytes);
        Ok(())
    }

    fn wait(&mut self, _slot: usize) -> Result<(), SinkError> {
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{EngineChoice, EngineConfig};
    use std::cell::Cell;

    thread_local! {
        /// Lets a test reach the read-time end-of-file path the up-front size check guards.
        pub(super) static SKIP_SIZE_CHECK: Cell<bool> = const { Cell::new(false) };
    }

    /// Records which ranges were copied.
    struct Recorder(Vec<usize>);

    impl Sink for Recorder {
        fn copy(&mut self, _: usize, range: usize, _: u64, _: &[u8]) -> Result<(), SinkError> {
            self.0.push(range);
            Ok(())
        }
        fn wait(&mut self, _: usize) -> Result<(), SinkError> {
            Ok(())
        }
    }

    /// A file shortened while streaming (here: after open, with the size check skipped) ends in
    /// EndOfFile through the no-progress rule of the reads, and the cut range is never copied.
    #[test]
    fn a_file_shortened_mid_stream_is_end_of_file_with_the_cut_range_not_copied() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 40_000]).expect("write");
        for choice in [EngineChoice::IoUring, EngineChoice::Threads] {
            for policy in [crate::CachePolicy::Direct, crate::CachePolicy::Buffered] {
                std::fs::write(&path, vec![7u8; 40_000]).expect("rewrite");
                let file = DirectFile::open_with(&path, policy).expect("open");
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_len(30_001))
                    .expect("shorten");
                let ranges = [
                    ByteRange {
                        offset: 1,
                        len: 9000,
                    },
                    ByteRange {
                        offset: 29_000,
                        len: 2000,
                    },
                ];
                let mut engine = Engine::new(choice, EngineConfig::default()).expect("engine");
                let mut rec = Recorder(Vec::new());
                SKIP_SIZE_CHECK.with(|c| c.set(true));
                let res = engine.stream(&file, &ranges, RingConfig::default(), &mut rec);
                SKIP_SIZE_CHECK.with(|c| c.set(false));
                match res {
                    Err(Error::EndOfFile {
                        offset,
                        wanted,
                        available,
                        ..
                    }) => {
                        assert_eq!((offset, wanted, available), (29_000, 2000, 1001));
                    }
                    other => panic!("{choice:?}/{policy:?}: wanted EndOfFile, got {other:?}"),
                }
                assert!(!rec.0.contains(&1), "the cut range was not copied");
                assert!(
                    file.read_calls() <= 4,
                    "the reads ended: {}",
                    file.read_calls()
                );
            }
        }
    }

    /// io_uring completions that fail with EOPNOTSUPP are resubmitted on the thread pool and
    /// still deliver the file's bytes.
    #[test]
    fn eopnotsupp_from_io_uring_is_resubmitted_on_the_pool() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&path, &data).expect("write");
        let file = DirectFile::open(&path).expect("open");
        let mut engine =
            Engine::new(EngineChoice::IoUring, EngineConfig::default()).expect("io_uring");
        engine.inject_eopnotsupp(3);
        let ranges = [ByteRange {
            offset: 5,
            len: 49_990,
        }];
        let mut sink = HostSink::for_ranges(&ranges);
        let ring = RingConfig {
            slots: 2,
            slot_size: 8192,
        };
        engine
            .stream(&file, &ranges, ring, &mut sink)
            .expect("stream with three operations refused by the ring");
        assert_eq!(
            engine.resubmitted_on_pool(),
            3,
            "three reads went to the pool"
        );
        assert!(
            sink.buffers()[0] == data[5..49_995],
            "bytes equal the file's"
        );
    }
}

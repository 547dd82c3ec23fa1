//! Seed 003's test: a checkpoint streamed into a fake device that logs every copy and wait and
//! performs a copy only when it is waited for, so a slot refilled before its wait shows up as
//! wrong device bytes. Two shards, unaligned tensors, one split over several slot reads, more
//! tensors than slots, both engines, O_DIRECT and buffered.

use crate::common::byte_at;
use direct_io::{
    CachePolicy, Checkpoint, Engine, EngineChoice, EngineConfig, EngineKind, Error, RingConfig,
    Sink, SinkError,
};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Attach(usize),
    Copy {
        slot: usize,
        range: usize,
        offset: u64,
        len: usize,
    },
    Wait(usize),
    Detach,
}

struct Pending {
    src: *const u8,
    len: usize,
    range: usize,
    offset: u64,
}

/// A fake device: copies are queued at `copy` and performed at `wait`, like a DMA that reads
/// the slot later.
struct FakeDevice {
    memory: Vec<Vec<u8>>,
    slots: Vec<(usize, usize)>,
    pending: Vec<Vec<Pending>>,
    log: Vec<Event>,
}

impl FakeDevice {
    fn new(lengths: impl IntoIterator<Item = u64>) -> FakeDevice {
        FakeDevice {
            memory: lengths.into_iter().map(|l| vec![0u8; l as usize]).collect(),
            slots: Vec::new(),
            pending: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Every copy was followed by a wait on its slot, and nothing is left pending.
    fn assert_every_copy_waited(&self) {
        for (i, e) in self.log.iter().enumerate() {
            if let Event::Copy { slot, .. } = e {
                assert!(
                    self.log[i..].contains(&Event::Wait(*slot)),
                    "copy {e:?} (event {i}) was never waited for"
                );
            }
        }
        assert!(
            self.pending.iter().all(Vec::is_empty),
            "copies left pending at the end"
        );
    }
}

impl Sink for FakeDevice {
    fn attach_slots(&mut self, slots: &[&[u8]]) -> Result<(), SinkError> {
        self.slots = slots
            .iter()
            .map(|s| (s.as_ptr() as usize, s.len()))
            .collect();
        self.pending = slots.iter().map(|_| Vec::new()).collect();
        self.log.push(Event::Attach(slots.len()));
        Ok(())
    }

    fn copy(
        &mut self,
        slot: usize,
        range: usize,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), SinkError> {
        let (base, len) = self.slots[slot];
        let p = bytes.as_ptr() as usize;
        assert!(
            p >= base && p + bytes.len() <= base + len,
            "copy source lies in slot {slot}"
        );
        self.pending[slot].push(Pending {
            src: bytes.as_ptr(),
            len: bytes.len(),
            range,
            offset,
        });
        self.log.push(Event::Copy {
            slot,
            range,
            offset,
            len: bytes.len(),
        });
        Ok(())
    }

    fn wait(&mut self, slot: usize) -> Result<(), SinkError> {
        for p in self.pending[slot].drain(..) {
            // SAFETY: the Sink contract keeps a slot's bytes valid and unchanged until wait for
            // that slot returns; this test exists to check the stream honours it.
            let src = unsafe { std::slice::from_raw_parts(p.src, p.len) };
            let o = p.offset as usize;
            self.memory[p.range][o..o + p.len].copy_from_slice(src);
        }
        self.log.push(Event::Wait(slot));
        Ok(())
    }

    fn detach_slots(&mut self) -> Result<(), SinkError> {
        self.log.push(Event::Detach);
        Ok(())
    }
}

/// Writes a safetensors file whose header is padded to `pad` extra spaces (so the data area
/// starts unaligned) with tensors of the given element counts (U8, F16 or F32).
pub fn write_safetensors(path: &Path, tensors: &[(&str, &str, u64)], pad: usize, seed: u64) {
    let mut entries = Vec::new();
    let mut off = 0u64;
    for (name, dtype, n) in tensors {
        let size = direct_io::dtype_size(dtype).expect("known dtype");
        entries.push(format!(
            "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{n}],\"data_offsets\":[{off},{}]}}",
            off + n * size
        ));
        off += n * size;
    }
    let mut header = format!(
        "{{\"__metadata__\":{{\"format\":\"pt\"}},{}}}",
        entries.join(",")
    );
    header.push_str(&" ".repeat(pad));
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend((0..off).map(|i| byte_at(i + seed)));
    std::fs::write(path, bytes).expect("write the safetensors file");
}

fn two_shards(dir: &Path) -> PathBuf {
    // Shard 1: small tensors at odd sizes and one of 30,001 bytes that spans several 8 KiB
    // slots. Shard 2: more tensors than slots, odd sizes.
    write_safetensors(
        &dir.join("model-00001-of-00002.safetensors"),
        &[
            ("a", "U8", 1),
            ("b", "F16", 1501),
            ("big", "U8", 30_001),
            ("c", "F32", 3),
            ("d", "U8", 4097),
        ],
        3,
        11,
    );
    write_safetensors(
        &dir.join("model-00002-of-00002.safetensors"),
        &[
            ("e", "U8", 13),
            ("f", "F16", 2049),
            ("g", "U8", 511),
            ("h", "F32", 1025),
            ("i", "U8", 9000),
            ("j", "U8", 7),
        ],
        5,
        99,
    );
    let mut map = Vec::new();
    for n in ["a", "b", "big", "c", "d"] {
        map.push(format!("\"{n}\":\"model-00001-of-00002.safetensors\""));
    }
    for n in ["e", "f", "g", "h", "i", "j"] {
        map.push(format!("\"{n}\":\"model-00002-of-00002.safetensors\""));
    }
    let index = dir.join("model.safetensors.index.json");
    std::fs::write(
        &index,
        format!(
            "{{\"metadata\":{{\"total_size\":0}},\"weight_map\":{{{}}}}}",
            map.join(",")
        ),
    )
    .expect("write the index");
    index
}

const RING: RingConfig = RingConfig {
    slots: 2,
    slot_size: 8192,
};

fn engine(choice: EngineChoice) -> Engine {
    let e = Engine::new(choice, EngineConfig::default()).expect("engine");
    let want = if choice == EngineChoice::IoUring {
        EngineKind::IoUring
    } else {
        EngineKind::Threads
    };
    assert_eq!(e.kind(), want, "the forced engine runs");
    e
}

#[test]
fn seed_003_every_device_byte_is_the_files_and_every_copy_waited_for() {
    let dir = tempfile::tempdir().expect("temp dir");
    let index = two_shards(dir.path());
    let ckpt = Checkpoint::open(dir.path()).expect("open the sharded checkpoint");
    assert_eq!(ckpt.shards().len(), 2);
    assert_eq!(ckpt.tensors().len(), 11);
    assert_eq!(ckpt, Checkpoint::open(&index).expect("open by index path"));
    assert!(
        ckpt.tensors().iter().any(|t| t.offset % 4096 != 0),
        "tensors sit at unaligned offsets"
    );
    for choice in [EngineChoice::IoUring, EngineChoice::Threads] {
        for policy in [CachePolicy::Direct, CachePolicy::Buffered] {
            let mut e = engine(choice);
            let mut dev = FakeDevice::new(ckpt.tensor_lengths());
            let report = ckpt
                .load(&mut e, policy, RING, &mut dev)
                .unwrap_or_else(|err| panic!("{choice:?}/{policy:?}: {err}"));
            assert!(report.shards.iter().all(|s| s.engine == e.kind()));
            assert_eq!(
                report.shards[0].mode.is_direct(),
                policy == CachePolicy::Direct,
                "the read mode asked for is used"
            );
            for (i, t) in ckpt.tensors().iter().enumerate() {
                let file = std::fs::read(&ckpt.shards()[t.shard]).expect("read the shard");
                let want = &file[t.offset as usize..(t.offset + t.len) as usize];
                assert!(
                    dev.memory[i] == want,
                    "{choice:?}/{policy:?}: device bytes of {} are the file's",
                    t.name
                );
            }
            dev.assert_every_copy_waited();
            let big = ckpt
                .tensors()
                .iter()
                .position(|t| t.name == "big")
                .expect("big tensor");
            let big_copies = dev
                .log
                .iter()
                .filter(|e| matches!(e, Event::Copy { range, .. } if *range == big))
                .count();
            assert!(big_copies >= 2, "the big tensor is split over slot reads");
            let waits = dev
                .log
                .iter()
                .filter(|e| matches!(e, Event::Wait(_)))
                .count();
            assert!(
                waits > RING.slots,
                "slots were reused (more copies than slots)"
            );
        }
    }
}

#[test]
fn seed_003_a_shard_shortened_after_open_is_end_of_file_with_nothing_copied_for_it() {
    for choice in [EngineChoice::IoUring, EngineChoice::Threads] {
        for policy in [CachePolicy::Direct, CachePolicy::Buffered] {
            let dir = tempfile::tempdir().expect("temp dir");
            two_shards(dir.path());
            let ckpt = Checkpoint::open(dir.path()).expect("open");
            let shard2 = ckpt.shards()[1].clone();
            let last = ckpt
                .tensors()
                .iter()
                .rposition(|t| t.shard == 1)
                .expect("a tensor");
            let t = &ckpt.tensors()[last];
            // Cut the shard in the middle of its last tensor.
            std::fs::OpenOptions::new()
                .write(true)
                .open(&shard2)
                .and_then(|f| f.set_len(t.offset + t.len / 2))
                .expect("shorten shard 2");
            let mut e = engine(choice);
            let mut dev = FakeDevice::new(ckpt.tensor_lengths());
            match ckpt.load(&mut e, policy, RING, &mut dev) {
                Err(Error::EndOfFile {
                    path,
                    offset,
                    wanted,
                    ..
                }) => {
                    assert_eq!(path, shard2, "names the shortened shard");
                    assert_eq!(
                        (offset, wanted),
                        (t.offset, t.len),
                        "names the tensor's bytes"
                    );
                }
                other => panic!("{choice:?}/{policy:?}: wanted EndOfFile, got {other:?}"),
            }
            assert!(
                !dev.log
                    .iter()
                    .any(|e| matches!(e, Event::Copy { range, .. } if *range == last)),
                "nothing copied for the cut tensor"
            );
            dev.assert_every_copy_waited();
        }
    }
}

#[test]
fn heavy_checkpoint_loads_on_xfs_with_4096_byte_sectors() {
    fs_testbed::run_or_skip(fs_testbed::FsKind::Xfs4k, |root| {
        two_shards(root);
        let ckpt = Checkpoint::open(root).expect("open");
        for choice in [EngineChoice::IoUring, EngineChoice::Threads] {
            let mut e = engine(choice);
            let mut dev = FakeDevice::new(ckpt.tensor_lengths());
            let r = ckpt
                .load(&mut e, CachePolicy::Direct, RING, &mut dev)
                .expect("load");
            assert!(r.shards[0].mode.is_direct(), "O_DIRECT on xfs");
            for (i, t) in ckpt.tensors().iter().enumerate() {
                let file = std::fs::read(&ckpt.shards()[t.shard]).expect("read the shard");
                assert!(dev.memory[i] == file[t.offset as usize..(t.offset + t.len) as usize]);
            }
            dev.assert_every_copy_waited();
        }
    });
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_sink_without_libcuda_is_a_clear_error_not_a_panic() {
    match direct_io::CudaSink::new(0, [16u64]) {
        Ok(_) => eprintln!("libcuda present: the sink was created"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("CUDA"), "the error names CUDA: {msg}");
        }
    }
}

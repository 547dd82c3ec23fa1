//! Loading a safetensors checkpoint, one file or sharded through
//! `model.safetensors.index.json`, into a sink.

use crate::safetensors::{read_safetensors_header, Entries, TensorInfo};
use crate::{
    ByteRange, CachePolicy, DirectFile, Engine, Error, HeaderRule, RingConfig, Sink, SinkError,
    StreamReport,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// A checkpoint whose headers have been read and validated: its shards and tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    shards: Vec<PathBuf>,
    tensors: Vec<TensorInfo>,
}

/// What loading a checkpoint did, one stream per shard.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    /// Each shard's stream, in shard order.
    pub shards: Vec<StreamReport>,
    /// Bytes handed to the sink in all.
    pub bytes: u64,
}

impl Checkpoint {
    /// Opens a checkpoint: a `.safetensors` file, a `model.safetensors.index.json`, or a
    /// directory holding one of those (the index first).
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint, Error> {
        let path = path.as_ref();
        if path.is_dir() {
            let index = path.join("model.safetensors.index.json");
            if index.exists() {
                return Checkpoint::open_index(&index);
            }
            return Checkpoint::open_file(path.join("model.safetensors"));
        }
        if path.extension().is_some_and(|e| e == "json") {
            return Checkpoint::open_index(path);
        }
        Checkpoint::open_file(path)
    }

    /// Opens a single `.safetensors` file.
    pub fn open_file(path: impl AsRef<Path>) -> Result<Checkpoint, Error> {
        let path = path.as_ref();
        let file = DirectFile::open_with(path, CachePolicy::Buffered)?;
        let header = read_safetensors_header(&file)?;
        Ok(Checkpoint {
            shards: vec![path.to_path_buf()],
            tensors: header.tensors,
        })
    }

    /// Opens a sharded checkpoint from its index: `{"weight_map": {tensor: shard file}}`. Shard
    /// names must be plain file names in the index's directory. Every tensor the index names
    /// must be in its shard's header; tensors a shard holds but the index does not name are not
    /// loaded.
    pub fn open_index(index: impl AsRef<Path>) -> Result<Checkpoint, Error> {
        let index = index.as_ref();
        let bad = |tensor: Option<String>, msg: String| Error::Header {
            path: index.to_path_buf(),
            tensor,
            rule: HeaderRule::Index(msg),
        };
        let text = std::fs::read(index).map_err(|e| Error::io("read index", index, e))?;
        let top: Entries =
            serde_json::from_slice(&text).map_err(|e| bad(None, format!("not JSON: {e}")))?;
        let map = top
            .items
            .into_iter()
            .find(|(k, _)| k == "weight_map")
            .map(|(_, v)| v)
            .ok_or_else(|| bad(None, "no weight_map".into()))?;
        let map: Entries = serde_json::from_value(map)
            .map_err(|e| bad(None, format!("weight_map is not an object: {e}")))?;
        if let Some(dup) = map.duplicate {
            return Err(bad(Some(dup), "named twice in weight_map".into()));
        }
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut by_shard: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, v) in map.items {
            let Some(shard) = v.as_str() else {
                return Err(bad(Some(name), "its shard is not a string".into()));
            };
            let plain = Path::new(shard)
                .file_name()
                .is_some_and(|f| f == std::ffi::OsStr::new(shard));
            if !plain || shard == "." || shard == ".." {
                return Err(bad(
                    Some(name),
                    format!("shard {shard:?} is not a plain file name in the index's directory"),
                ));
            }
            by_shard.entry(shard.to_string()).or_default().push(name);
        }
        let mut shards = Vec::new();
        let mut tensors = Vec::new();
        for (i, (shard, names)) in by_shard.into_iter().enumerate() {
            let path = dir.join(&shard);
            let file = DirectFile::open_with(&path, CachePolicy::Buffered)?;
            let header = read_safetensors_header(&file)?;
            let mut held: HashMap<String, TensorInfo> = header
                .tensors
                .into_iter()
                .map(|t| (t.name.clone(), t))
                .collect();
            let mut mine = Vec::new();
            for name in names {
                let Some(mut t) = held.remove(&name) else {
                    return Err(Error::Header {
                        path: index.to_path_buf(),
                        tensor: Some(name),
                        rule: HeaderRule::MissingInShard { shard },
                    });
                };
                t.shard = i;
                mine.push(t);
            }
            mine.sort_by_key(|t| t.offset);
            tensors.extend(mine);
            shards.push(path);
        }
        Ok(Checkpoint { shards, tensors })
    }

    /// The shard files, in load order.
    pub fn shards(&self) -> &[PathBuf] {
        &self.shards
    }

    /// The tensors, by shard then file offset. A sink sees tensor `i` as range `i`.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The byte length of each tensor, for sizing a sink ([`crate::HostSink::with_lengths`]).
    pub fn tensor_lengths(&self) -> impl Iterator<Item = u64> + '_ {
        self.tensors.iter().map(|t| t.len)
    }

    /// Streams every tensor into `sink`, shard by shard, with `engine`. The sink sees tensor
    /// `i` of [`Checkpoint::tensors`] as range `i`. A shard shortened since it was opened gives
    /// [`Error::EndOfFile`] before anything of that shard is copied.
    pub fn load(
        &self,
        engine: &mut Engine,
        policy: CachePolicy,
        ring: RingConfig,
        sink: &mut dyn Sink,
    ) -> Result<LoadReport, Error> {
        let mut report = LoadReport {
            shards: Vec::new(),
            bytes: 0,
        };
        for (i, path) in self.shards.iter().enumerate() {
            let file = DirectFile::open_with(path, policy)?;
            let ids: Vec<usize> = (0..self.tensors.len())
                .filter(|&t| self.tensors[t].shard == i)
                .collect();
            let ranges: Vec<ByteRange> = ids
                .iter()
                .map(|&t| ByteRange {
                    offset: self.tensors[t].offset,
                    len: self.tensors[t].len,
                })
                .collect();
            let mut shard_sink = ShardSink {
                inner: &mut *sink,
                ids: &ids,
            };
            let r = engine.stream(&file, &ranges, ring, &mut shard_sink)?;
            report.bytes += r.bytes_delivered;
            report.shards.push(r);
        }
        Ok(report)
    }
}

/// Renumbers a shard's ranges as checkpoint-wide tensor indices.
struct ShardSink<'a> {
    inner: &'a mut dyn Sink,
    ids: &'a [usize],
}

impl Sink for ShardSink<'_> {
    fn attach_slots(&mut self, slots: &[&[u8]]) -> Result<(), SinkError> {
        self.inner.attach_slots(slots)
    }

    fn copy(
        &mut self,
        slot: usize,
        range: usize,
        offset_in_range: u64,
        bytes: &[u8],
    ) -> Result<(), SinkError> {
        let id = *self.ids.get(range).ok_or_else(|| {
            SinkError::new(format!("range {range} is not a tensor of this shard"))
        })?;
        self.inner.copy(slot, id, offset_in_range, bytes)
    }

    fn wait(&mut self, slot: usize) -> Result<(), SinkError> {
        self.inner.wait(slot)
    }

    fn detach_slots(&mut self) -> Result<(), SinkError> {
        self.inner.detach_slots()
    }
}

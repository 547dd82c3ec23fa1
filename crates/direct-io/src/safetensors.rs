//! Parsing and validating a safetensors header before any tensor byte is read.

use crate::{DirectFile, Error, HeaderRule};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;

/// The largest header accepted, as the `safetensors` crate does (100 MB).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name.
    pub name: String,
    /// The dtype as written in the header (`F16`, `BF16`, ...).
    pub dtype: String,
    /// The shape.
    pub shape: Vec<u64>,
    /// Which shard holds it (index into [`crate::Checkpoint::shards`]; 0 for a single file).
    pub shard: usize,
    /// The file offset of its first byte (past the header).
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// A validated safetensors header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetensorsHeader {
    /// The JSON header's length (the 8-byte prefix's value).
    pub header_len: u64,
    /// The file offset where the data area starts (`8 + header_len`).
    pub data_start: u64,
    /// The tensors, in file order.
    pub tensors: Vec<TensorInfo>,
    /// The `__metadata__` map, when present.
    pub metadata: Option<BTreeMap<String, String>>,
}

/// The size in bytes of one element of `dtype`, for the byte-sized dtypes safetensors defines.
pub fn dtype_size(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" | "C64" => 8,
        _ => return None,
    })
}

/// Reads and validates the header of the safetensors file `file`.
pub fn read_safetensors_header(file: &DirectFile) -> Result<SafetensorsHeader, Error> {
    let path = file.path();
    let size = file.size();
    let rule = |rule| Error::Header {
        path: path.to_path_buf(),
        tensor: None,
        rule,
    };
    if size < 8 {
        return Err(rule(HeaderRule::MissingLengthPrefix { file_size: size }));
    }
    let mut prefix = [0u8; 8];
    file.read_exact_at(0, &mut prefix)?;
    let header_len = u64::from_le_bytes(prefix);
    let limit = (size - 8).min(MAX_HEADER_LEN);
    if header_len > limit {
        return Err(rule(HeaderRule::HeaderLength {
            declared: header_len,
            limit,
        }));
    }
    let mut json = vec![0u8; header_len as usize];
    file.read_exact_at(8, &mut json)?;
    parse_safetensors_header(path, &json, size)
}

/// Validates the JSON header `json` of a safetensors file of `file_size` bytes (the header's
/// length is `json.len()`): offsets inside the data area, no overlaps, no duplicate names,
/// dtype size times element count equal to the byte length. Pure: reads nothing.
pub fn parse_safetensors_header(
    path: &Path,
    json: &[u8],
    file_size: u64,
) -> Result<SafetensorsHeader, Error> {
    let header_len = json.len() as u64;
    let err = |tensor: Option<&str>, rule| Error::Header {
        path: path.to_path_buf(),
        tensor: tensor.map(str::to_string),
        rule,
    };
    let limit = file_size.saturating_sub(8).min(MAX_HEADER_LEN);
    if file_size < 8 || header_len > limit {
        return Err(err(
            None,
            HeaderRule::HeaderLength {
                declared: header_len,
                limit,
            },
        ));
    }
    let data_start = 8 + header_len;
    let data_len = file_size - data_start;
    let entries: Entries =
        serde_json::from_slice(json).map_err(|e| err(None, HeaderRule::Json(e.to_string())))?;
    if let Some(dup) = entries.duplicate {
        return Err(err(Some(&dup), HeaderRule::DuplicateName));
    }
    let mut metadata = None;
    let mut tensors = Vec::new();
    for (name, value) in entries.items {
        if name == "__metadata__" {
            let m: BTreeMap<String, String> = serde_json::from_value(value).map_err(|e| {
                err(
                    None,
                    HeaderRule::Json(format!("__metadata__ must map strings to strings: {e}")),
                )
            })?;
            metadata = Some(m);
            continue;
        }
        let raw: RawTensor = serde_json::from_value(value)
            .map_err(|e| err(Some(&name), HeaderRule::Json(e.to_string())))?;
        let Some(size) = dtype_size(&raw.dtype) else {
            return Err(err(Some(&name), HeaderRule::UnknownDtype(raw.dtype)));
        };
        let [begin, end] = raw.data_offsets;
        if begin > end {
            return Err(err(Some(&name), HeaderRule::BadOffsets { begin, end }));
        }
        if end > data_len {
            return Err(err(Some(&name), HeaderRule::OutOfBounds { end, data_len }));
        }
        let expected = raw
            .shape
            .iter()
            .try_fold(size, |acc, &d| acc.checked_mul(d));
        if expected != Some(end - begin) {
            return Err(err(
                Some(&name),
                HeaderRule::SizeMismatch {
                    expected,
                    actual: end - begin,
                },
            ));
        }
        tensors.push(TensorInfo {
            name,
            dtype: raw.dtype,
            shape: raw.shape,
            shard: 0,
            offset: data_start + begin,
            len: end - begin,
        });
    }
    tensors.sort_by_key(|a| (a.offset, a.len));
    let mut furthest: Option<&TensorInfo> = None;
    for t in tensors.iter().filter(|t| t.len > 0) {
        if let Some(prev) = furthest {
            if t.offset < prev.offset + prev.len {
                return Err(err(
                    Some(&t.name),
                    HeaderRule::Overlap {
                        other: prev.name.clone(),
                    },
                ));
            }
        }
        if furthest.is_none_or(|p| t.offset + t.len > p.offset + p.len) {
            furthest = Some(t);
        }
    }
    Ok(SafetensorsHeader {
        header_len,
        data_start,
        tensors,
        metadata,
    })
}

#[derive(Deserialize)]
struct RawTensor {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// A JSON object's entries in order, with the first duplicate key noticed (serde_json's maps
/// keep the last value silently).
pub(crate) struct Entries {
    pub(crate) items: Vec<(String, serde_json::Value)>,
    pub(crate) duplicate: Option<String>,
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut seen = HashSet::new();
                let mut items = Vec::new();
                let mut duplicate = None;
                while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
                    if !seen.insert(k.clone()) && duplicate.is_none() {
                        duplicate = Some(k.clone());
                    }
                    items.push((k, v));
                }
                Ok(Entries { items, duplicate })
            }
        }
        d.deserialize_map(V)
    }
}

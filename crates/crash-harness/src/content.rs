//! What the workload writes, and how a checker knows the right bytes: kernels and the fake
//! compiler's output for each, and self-describing put files and staged directories.

use crate::rng::Rng;

/// The source text of kernel `index`: distinct per index, so each is its own cache key.
pub fn kernel_text(index: usize) -> String {
    format!(
        "// crash-harness kernel {index}\nextern \"C\" __global__ void k{index}(float* x) {{ x[threadIdx.x] = x[threadIdx.x] * {index}.0f + 1.0f; }}\n"
    )
}

/// The kernel's name (and its source file is `<name>.cu`).
pub fn kernel_name(index: usize) -> String {
    format!("k{index}")
}

/// The kernel index a source text or a kernel name belongs to.
pub fn kernel_index_of_name(name: &str) -> Option<usize> {
    name.strip_prefix('k')?.parse().ok()
}

/// The kernel index named in a source text's first line.
pub fn kernel_index_of_text(text: &str) -> Option<usize> {
    text.lines()
        .next()?
        .strip_prefix("// crash-harness kernel ")?
        .trim()
        .parse()
        .ok()
}

/// The bytes the fake compiler produces for a source text: deterministic, 96-224 KiB, starting
/// with an ELF magic. Anything else found in an entry is corrupt.
pub fn expected_artifact(source_text: &str) -> Vec<u8> {
    let seed = fnv1a(source_text.as_bytes());
    let mut rng = Rng::new(seed);
    let len = (96 << 10) + (rng.next_u64() % (128 << 10)) as usize;
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes);
    bytes[..4].copy_from_slice(b"\x7fELF");
    bytes
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Length of the header of a put file: magic, sequence number, total length.
pub const PUT_HEADER: usize = 24;

/// The whole contents of the put with sequence number `seq` and length `len` (at least
/// [`PUT_HEADER`]): a header naming both, then bytes drawn from `seq`.
pub fn put_contents(seq: u64, len: usize) -> Vec<u8> {
    let len = len.max(PUT_HEADER);
    let mut bytes = vec![0u8; len];
    bytes[..8].copy_from_slice(b"CHPUT001");
    bytes[8..16].copy_from_slice(&seq.to_le_bytes());
    bytes[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    Rng::derive(seq, 0x5054).fill(&mut bytes[PUT_HEADER..]);
    bytes
}

/// What a put file holds: its sequence number when it is whole and exactly what
/// [`put_contents`] wrote for it, else why not.
pub fn check_put(bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() < PUT_HEADER || &bytes[..8] != b"CHPUT001" {
        return Err(format!("no put header ({} bytes)", bytes.len()));
    }
    let seq = u64::from_le_bytes(
        bytes[8..16]
            .try_into()
            .map_err(|_| "short header".to_string())?,
    );
    let len = u64::from_le_bytes(
        bytes[16..24]
            .try_into()
            .map_err(|_| "short header".to_string())?,
    );
    if len != bytes.len() as u64 {
        return Err(format!(
            "put {seq} is {} bytes, its header says {len}",
            bytes.len()
        ));
    }
    if put_contents(seq, bytes.len()) != bytes {
        return Err(format!("put {seq} has the right length but wrong bytes"));
    }
    Ok(seq)
}

/// The files of the staged directory with sequence number `seq`: names and contents.
pub fn dir_files(seq: u64) -> Vec<(String, Vec<u8>)> {
    (0..3u64)
        .map(|i| {
            let mut rng = Rng::derive(seq, 0x4449_5200 + i);
            let len = 16_384 + (rng.next_u64() % 49_152) as usize;
            let mut bytes = vec![0u8; len];
            rng.fill(&mut bytes);
            (format!("f{i}"), bytes)
        })
        .collect()
}

/// The namespace of the workload's stored entries (`jit_cache::store`).
pub const STORE_NAMESPACE: &str = "crash-triton";

/// The caller's key of stored entry `index`.
pub fn store_key(index: usize) -> String {
    format!("triton-{index:03}")
}

/// The stored entry index a caller's key belongs to.
pub fn store_index_of_key(key: &str) -> Option<usize> {
    key.strip_prefix("triton-")?.parse().ok()
}

/// The files of stored entry `index`, as a Triton-like producer writes them (`.ttir`, `.ptx`,
/// `.cubin`, `.json`): names and contents, a pure function of the index, 8-40 KiB each.
pub fn stored_files(index: usize) -> Vec<(String, Vec<u8>)> {
    ["ttir", "ptx", "cubin", "json"]
        .iter()
        .enumerate()
        .map(|(i, ext)| {
            let mut rng = Rng::derive(0x5354_4f52_0000 + index as u64, i as u64);
            let len = 8192 + (rng.next_u64() % 32_768) as usize;
            let mut bytes = vec![0u8; len];
            rng.fill(&mut bytes);
            let header = format!("{ext}:{index}:");
            let n = header.len().min(len);
            bytes[..n].copy_from_slice(&header.as_bytes()[..n]);
            (format!("kernel.{ext}"), bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_are_deterministic_and_distinct_per_kernel() {
        assert_eq!(
            expected_artifact(&kernel_text(1)),
            expected_artifact(&kernel_text(1))
        );
        assert_ne!(
            expected_artifact(&kernel_text(1)),
            expected_artifact(&kernel_text(2))
        );
        assert_eq!(kernel_index_of_text(&kernel_text(12)), Some(12));
        assert_eq!(kernel_index_of_name(&kernel_name(3)), Some(3));
    }

    #[test]
    fn stored_files_are_deterministic_and_distinct_per_key() {
        assert_eq!(stored_files(3), stored_files(3));
        assert_ne!(stored_files(3), stored_files(4));
        assert_eq!(stored_files(3).len(), 4, "four files per stored entry");
        assert_eq!(store_index_of_key(&store_key(17)), Some(17));
    }

    #[test]
    fn a_put_file_checks_whole_and_fails_torn() {
        let bytes = put_contents(42, 5000);
        assert_eq!(check_put(&bytes), Ok(42));
        assert!(
            check_put(&bytes[..4000]).is_err(),
            "a truncated put is caught"
        );
        let mut flipped = bytes.clone();
        flipped[4999] ^= 1;
        assert!(check_put(&flipped).is_err(), "a changed byte is caught");
    }
}

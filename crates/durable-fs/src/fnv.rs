//! FNV-1a, 64 bits: a stable, dependency-free hash of a few bytes, for the host id, the random
//! fallback of temp names and lock buckets; never for content identity.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over `bytes`, continuing from `state`.
pub(crate) fn fnv1a(bytes: &[u8], state: u64) -> u64 {
    bytes.iter().fold(state, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// FNV-1a over `bytes` from the standard offset basis.
pub(crate) fn fnv1a_fresh(bytes: &[u8]) -> u64 {
    fnv1a(bytes, FNV_OFFSET)
}

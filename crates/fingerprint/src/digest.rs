//! The 32-byte blake3 digest type and the format version that every hash input mixes in.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Version of every hash layout in this crate: tree walks, manifests, tool identities, wheel rows.
///
/// The rule (sccache's `CACHE_VERSION`): **if you change any input to a hash, or the way it is
/// framed, bump this version.** Manifests mix it into [`crate::Manifest::digest`] and store it, so
/// a cache written by an older layout is seen as stale, with the reason, instead of matching by
/// accident.
pub const FORMAT_VERSION: u32 = 1;

/// A blake3 digest (32 bytes).
///
/// It serialises as a 64-character lowercase hex string so that `meta.json` files stay readable;
/// [`fmt::Display`] prints the full hex and [`Digest::short`] an abbreviation for messages.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The blake3 digest of `bytes` (no domain separation: this is what `b3sum` prints).
    pub fn of_bytes(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The full lowercase hex form (64 characters).
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }

    /// The first four hex digits and `..`, for dirty reasons ("1f2e..").
    pub fn short(&self) -> String {
        let mut s = self.to_hex();
        s.truncate(4);
        s.push_str("..");
        s
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl From<blake3::Hash> for Digest {
    fn from(h: blake3::Hash) -> Self {
        Digest(*h.as_bytes())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

/// Why a string is not a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse digest {input:?}: expected 64 hex digits")]
pub struct ParseDigestError {
    input: String,
}

impl FromStr for Digest {
    type Err = ParseDigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseDigestError {
            input: s.chars().take(80).collect(),
        };
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(err());
        }
        let mut out = [0u8; 32];
        // A table lookup per digit, the validity of all 64 checked once at the end: a cache hit
        // parses hundreds of digests (one per header its kernel read).
        let mut invalid = 0u8;
        for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            let (hi, lo) = (HEX_VALUE[pair[0] as usize], HEX_VALUE[pair[1] as usize]);
            invalid |= hi | lo;
            *byte = (hi << 4) | (lo & 0x0F);
        }
        if invalid & INVALID != 0 {
            return Err(err());
        }
        Ok(Digest(out))
    }
}

/// Marks a byte that is not a hex digit in [`HEX_VALUE`].
const INVALID: u8 = 0x80;

/// Each byte's value as a hex digit (either case), or [`INVALID`].
static HEX_VALUE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A blake3 hasher whose every input is framed, so that no two different input sequences can
/// produce the same byte stream (the domain-separation rule).
pub(crate) struct Framed(blake3::Hasher);

impl Framed {
    /// Starts a hash for `domain`, mixing in [`FORMAT_VERSION`].
    pub(crate) fn new(domain: &str) -> Self {
        let mut h = blake3::Hasher::new();
        h.update(b"fingerprint\0");
        h.update(&FORMAT_VERSION.to_le_bytes());
        let mut f = Framed(h);
        f.bytes(domain.as_bytes());
        f
    }

    /// Adds a length-prefixed byte string.
    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }

    /// Adds a fixed-size digest.
    pub(crate) fn digest(&mut self, d: &Digest) -> &mut Self {
        self.0.update(&d.0);
        self
    }

    /// Adds an integer.
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.update(&v.to_le_bytes());
        self
    }

    /// Finishes the hash.
    pub(crate) fn finish(&self) -> Digest {
        Digest::from(self.0.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_short_is_four_digits() {
        let d = Digest::of_bytes(b"x");
        let parsed: Digest = d.to_hex().parse().expect("own hex output must parse");
        assert_eq!(parsed, d, "hex must round-trip");
        assert_eq!(d.short().len(), 6, "short form is 4 hex digits and `..`");
        assert!("zz".parse::<Digest>().is_err(), "garbage must not parse");
        assert_eq!(
            d.to_hex().to_uppercase().parse::<Digest>().ok(),
            Some(d),
            "upper-case hex parses to the same digest"
        );
        for at in 0..64 {
            for bad in [b'g', b'G', b'/', b':', b'@', b'`', b' ', 0xC3] {
                let mut text = d.to_hex().into_bytes();
                text[at] = bad;
                if let Ok(text) = String::from_utf8(text) {
                    assert!(text.parse::<Digest>().is_err(), "`{text}` must not parse");
                }
            }
        }
        let json = serde_json::to_string(&d).expect("digest serialises");
        assert_eq!(
            json,
            format!("\"{d}\""),
            "digest serialises as a hex string"
        );
    }
}

//! A stored entry's address: its namespace and key, checked, and the key directory's digest
//! that names it under the root.

use crate::error::{Error, Result};
use fingerprint::Digest;
use std::path::PathBuf;

/// The longest caller's key the store accepts, in bytes.
pub const MAX_KEY_LEN: usize = 4096;

/// A namespace of keys: what keeps one JIT's keys from ever meeting another's (a Triton key
/// never names an nvcc kernel, nor an Inductor graph).
///
/// 1 to 64 bytes of lowercase ASCII letters, digits, `-`, `_` and `.`, starting with a letter
/// or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Namespace(String);

impl Namespace {
    /// Checks and wraps a namespace name.
    pub fn new(name: &str) -> Result<Namespace> {
        let invalid = |reason| Error::InvalidStoreKey {
            what: format!("namespace {name:?}"),
            reason,
        };
        if name.is_empty() || name.len() > 64 {
            return Err(invalid("a namespace is 1 to 64 bytes"));
        }
        let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
        if !name.bytes().all(allowed) {
            return Err(invalid(
                "a namespace is lowercase ASCII letters, digits, `-`, `_` and `.`",
            ));
        }
        if !name.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(invalid("a namespace starts with a letter or digit"));
        }
        Ok(Namespace(name.to_string()))
    }

    /// The namespace's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The key directory's digest of a stored entry: the namespace and the caller's key, in a
/// preimage no kernel key has (those begin with another domain string).
pub(crate) fn entry_digest(namespace: &Namespace, key: &str) -> Digest {
    let mut text = b"jit-cache stored entry 1\0".to_vec();
    text.extend_from_slice(namespace.0.as_bytes());
    text.push(0);
    text.extend_from_slice(key.as_bytes());
    Digest::of_bytes(&text)
}

/// The one variant a stored entry has: the caller's key names its content.
pub(crate) fn stored_variant() -> Digest {
    Digest::of_bytes(b"jit-cache stored entry variant")
}

pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidStoreKey {
            what: format!("key {:?}", truncated(key)),
            reason: "a key is 1 to 4096 bytes",
        });
    }
    Ok(())
}

/// A key as messages show it: at most 80 characters.
pub(crate) fn truncated(key: &str) -> String {
    match key.char_indices().nth(80) {
        Some((end, _)) => format!("{}...", &key[..end]),
        None => key.to_string(),
    }
}

/// One stored entry's address: what every step needs to name it.
#[derive(Debug, Clone)]
pub(crate) struct Address {
    pub(crate) namespace: Namespace,
    pub(crate) key: String,
    pub(crate) digest: Digest,
    pub(crate) dir: PathBuf,
}

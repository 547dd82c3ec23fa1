//! A lossless text form of path bytes, for relative paths in tree listings and cache keys.
//!
//! UTF-8 names are kept as they are except that `\` is written `\\`; each byte that is not part of
//! valid UTF-8 is written `\xNN`. The mapping is injective, so two different byte strings never
//! share a text form. Hashes always use the raw bytes, never this text.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The lossless text form of `bytes`.
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    // The common case, valid UTF-8 without a backslash, is the text itself: one copy, no
    // per-character work (a warm tree revalidation escapes every path).
    if !bytes.contains(&b'\\') {
        if let Ok(text) = std::str::from_utf8(bytes) {
            return text.to_owned();
        }
    }
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The lossless text form of a path.
pub(crate) fn escape_path(path: &Path) -> String {
    escape_bytes(path.as_os_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_injective_on_tricky_inputs() {
        let inputs: [&[u8]; 5] = [b"a\\xff", b"a\xff", b"a\\\\xff", b"plain.cuh", b"\xc3"];
        let outs: Vec<String> = inputs.iter().map(|b| escape_bytes(b)).collect();
        for i in 0..outs.len() {
            for j in 0..i {
                assert_ne!(
                    outs[i], outs[j],
                    "distinct byte strings must escape differently"
                );
            }
        }
        assert_eq!(
            outs[3], "plain.cuh",
            "plain UTF-8 names are kept as they are"
        );
        assert_eq!(outs[1], "a\\xff", "an invalid byte is written as \\xNN");
    }
}

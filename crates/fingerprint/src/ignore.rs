//! Glob-lite matching of names: tree ignore rules, and any caller that selects by name.

/// Whether `name` matches `pattern`, where `*` matches any run of bytes (including none), `?`
/// matches one byte, and every other byte matches itself (`/` too: a tree's ignore rules apply
/// it to one path component, a pack filter to a stored entry's `namespace/key`).
pub fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    // Iterative matcher with single-star backtracking: linear in practice, no recursion.
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == name[n]) && pattern[p] != b'*'
        {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn default_patterns_match_what_they_should() {
        let cases: &[(&str, &str, bool)] = &[
            ("*.pyc", "mod.cpython-311.pyc", true),
            ("*.pyc", "mod.py", false),
            ("*~", "tile.cuh~", true),
            (".*.swp", ".tile.cuh.swp", true),
            (".*.swp", "tile.swp", false),
            ("#*#", "#tile.cuh#", true),
            ("#*#", "#tile.cuh", false),
            (".git", ".git", true),
            (".git", ".github", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*", "", true),
            ("*_fp16*", "gemm_fp16_v2", true),
            ("triton/*", "triton/abc", true),
        ];
        for &(p, n, want) in cases {
            assert_eq!(
                glob_match(p.as_bytes(), n.as_bytes()),
                want,
                "pattern {p} on {n}"
            );
        }
    }
}

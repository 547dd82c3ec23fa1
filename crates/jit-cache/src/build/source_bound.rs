//! Whether a compile's output depends on where its source is: the proof that lets one entry
//! serve the same kernel written into another directory (DeepGEMM writes every kernel into a
//! fresh `<cache>/tmp/<uuid>/kernel.cu`).
//!
//! The key leaves the source's path out only where the output cannot name it before the compile
//! is even looked at ([`keyed_by_path`]): no debug information in any spelling (line tables name
//! files), and a device-only output, a cubin or PTX (a host object names its temporary files and
//! the module's id; a fatbin may hold its images compressed, so its bytes cannot be read for a
//! name). For the rest, a compile proves independence after the fact, and a variant that cannot
//! is bound to its source ([`SourceBinding`]): served only to a request that spells the same
//! source at the same real path. The proof has three parts, each conservative:
//! - **The text** (scanned by `inputs.rs` through [`PathTokens`]): `__FILE__` and the builtins
//!   behind `std::source_location` expand to the file they are written in, so a use of them, or of
//!   a macro whose body reaches them (`assert`), in the source or in a header found through the
//!   source's directory binds; a use of `__BASE_FILE__`, `__builtin_FILE` or
//!   `__builtin_source_location` (or of a macro reaching them) anywhere binds (the first always
//!   names the source, the others are default arguments evaluated where a call is written). A
//!   directive line uses nothing: `#if __has_builtin(__builtin_FILE)` probes, and a `#define`
//!   is followed through the uses of its name.
//! - **The output** ([`output_names_source`]): nvcc names entities of internal linkage (an
//!   anonymous namespace, libcu++'s `cuda::std::ignore`, `-rdc` statics) after a module id it
//!   derives from the source's real path (symlinks and `..` resolved),
//!   `_<hash>_<length>_<file name mangled>_<hash>`; the id, its usual markers, or the source's
//!   path or directory in the bytes (raw, or as PTX's decimal string arrays) bind.
//! - **What the compile printed and read**: diagnostics that name the source (its path or
//!   directory, or the module id, checked as the output is) and a dependency file that names a
//!   header found beside it bind; diagnostics that name neither (GCC's `-Wno-abi` note, which
//!   DeepGEMM's flags print on every compile) are the same for every directory.
//!
//! Lookups in the source's directory are recorded relative to it already (`Base::SourceDir`), so
//! an unbound variant is checked against the directory of each request that reaches it.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The source a bound variant was compiled from: served only to a request for the same spelling
/// at the same place.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct SourceBinding {
    /// The source as the compiler was given it.
    pub(crate) spelled: String,
    /// Where it is: its real path (symlinks and `..` resolved), from which nvcc derives the
    /// module id.
    pub(crate) absolute: String,
}

impl SourceBinding {
    /// The binding a request would need, for a file source whose paths are UTF-8 (a name that is
    /// not is kept in the key instead: see [`keyed_by_path`]).
    pub(crate) fn of(spelled: Option<&Path>, absolute: Option<&Path>) -> Option<SourceBinding> {
        Some(SourceBinding {
            spelled: spelled?.to_str()?.to_string(),
            absolute: absolute?.to_str()?.to_string(),
        })
    }
}

/// Whether the source's spelled path enters the key itself: where the output may name it before
/// any proof (debug information, a host or packaged output), or where a binding could not be
/// written (a name that is not UTF-8).
pub(crate) fn keyed_by_path(
    debug: bool,
    kind: nvcc::OutputKind,
    spelled: Option<&Path>,
    absolute: Option<&Path>,
) -> bool {
    let device_only = matches!(kind, nvcc::OutputKind::Cubin | nvcc::OutputKind::Ptx);
    let utf8 = spelled.is_none_or(|p| p.to_str().is_some())
        && absolute.is_none_or(|p| p.to_str().is_some());
    debug || !device_only || !utf8
}

/// Identifiers that expand to the name of the file they are written in.
const CURRENT_FILE: &[&[u8]] = &[b"__FILE__"];

/// Identifiers that name the source wherever they are written: the main file's name, and the
/// builtins `std::source_location` and `cuda::std::source_location` use, whose default
/// arguments are evaluated where the call is written.
const ANY_FILE: &[&[u8]] = &[
    b"__BASE_FILE__",
    b"__builtin_FILE",
    b"__builtin_source_location",
];

/// What the scan of the files a compile read found about path spellings. Directive lines are
/// no use of what they name (`#if __has_builtin(__builtin_FILE)` probes, `#define` defines):
/// a definition's body is followed through every use of its name, and a use is a word on any
/// other line.
#[derive(Debug, Default)]
pub(crate) struct PathTokens {
    /// The files scanned, in order; the maps below name them by index.
    files: Vec<PathBuf>,
    /// Each macro defined anywhere, with the identifiers of its bodies (every definition).
    defines: HashMap<Vec<u8>, HashSet<Vec<u8>>>,
    /// The files whose own spelling derives from the source's, with the words they use.
    source_files: Vec<(usize, HashSet<Vec<u8>>)>,
    /// The words used anywhere, each with the first file that uses it.
    used: HashMap<Vec<u8>, usize>,
}

impl PathTokens {
    /// Scans one file the compile read. `near_source`: the source itself, or a header found
    /// through the source's directory (its `__FILE__` spells the source's directory).
    pub(crate) fn add_file(&mut self, path: &Path, text: &[u8], near_source: bool) {
        let file = self.files.len();
        self.files.push(path.to_path_buf());
        let mut words = HashSet::new();
        let mut rest = text;
        while !rest.is_empty() {
            let (line, next) = crate::base::scan::whole_logical_line(rest);
            rest = next;
            if let Some(directive) = crate::base::scan::blanks(&line).strip_prefix(b"#") {
                if let Some((name, body)) = definition(directive) {
                    self.defines.entry(name).or_default().extend(body);
                }
                continue;
            }
            for (_, word) in identifiers(&line) {
                if !self.used.contains_key(word) {
                    self.used.insert(word.to_vec(), file);
                }
                if near_source && !words.contains(word) {
                    words.insert(word.to_vec());
                }
            }
        }
        if near_source {
            self.source_files.push((file, words));
        }
    }

    /// The first file whose text may make the output name the source, if any.
    pub(crate) fn binding_file(&self) -> Option<PathBuf> {
        let anywhere = self.reaching(ANY_FILE);
        let used_anywhere = anywhere
            .iter()
            .filter_map(|word| self.used.get(*word))
            .min();
        let tokens: Vec<&[u8]> = CURRENT_FILE.iter().chain(ANY_FILE).copied().collect();
        let naming = self.reaching(&tokens);
        let near_source = || {
            self.source_files
                .iter()
                .find(|(_, words)| words.iter().any(|w| naming.contains(w.as_slice())))
                .map(|(file, _)| file)
        };
        used_anywhere
            .or_else(near_source)
            .map(|file| self.files[*file].clone())
    }

    /// `tokens` and every macro whose expansion reaches one of them, to a fixed point.
    fn reaching<'a>(&'a self, tokens: &[&'a [u8]]) -> HashSet<&'a [u8]> {
        let mut naming: HashSet<&[u8]> = tokens.iter().copied().collect();
        loop {
            let before = naming.len();
            for (name, body) in &self.defines {
                if !naming.contains(name.as_slice())
                    && body.iter().any(|word| naming.contains(word.as_slice()))
                {
                    naming.insert(name.as_slice());
                }
            }
            if naming.len() == before {
                return naming;
            }
        }
    }
}

/// The name and body words of a `define` directive (the text after its `#`).
fn definition(directive: &[u8]) -> Option<(Vec<u8>, HashSet<Vec<u8>>)> {
    let rest =
        crate::base::scan::blanks(crate::base::scan::blanks(directive).strip_prefix(b"define")?);
    let name_len = rest.iter().take_while(|b| is_ident(**b)).count();
    if name_len == 0 {
        return None;
    }
    let body = identifiers(&rest[name_len..])
        .map(|(_, w)| w.to_vec())
        .collect();
    Some((rest[..name_len].to_vec(), body))
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every identifier-shaped word of `text`, with its offset. Comments and string literals are not
/// skipped: a word there counts as a use, which can only bind more.
fn identifiers(text: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < text.len() {
            let b = text[at];
            if is_ident(b) {
                let start = at;
                while at < text.len() && is_ident(text[at]) {
                    at += 1;
                }
                // A number's digits and suffixes are no identifier.
                if !b.is_ascii_digit() {
                    return Some((start, &text[start..at]));
                }
            } else {
                at += 1;
            }
        }
        None
    })
}

/// Markers of nvcc's names for entities of internal linkage, which carry the module id.
const MODULE_ID_MARKERS: &[&[u8]] = &[b"_GLOBAL__N__", b"_INTERNAL_", b"__nv_static_"];

/// Whether an output's bytes may name its source: the module id nvcc derives from the source's
/// absolute path (by its markers, or by the mangled file name every id carries), or the source's
/// path or directory, spelled or absolute, raw or as PTX writes strings.
pub(crate) fn output_names_source(bytes: &[u8], binding: &SourceBinding) -> bool {
    let find = |needle: &[u8]| !needle.is_empty() && memchr::memmem::find(bytes, needle).is_some();
    if MODULE_ID_MARKERS.iter().any(|m| find(m)) {
        return true;
    }
    let absolute = Path::new(&binding.absolute);
    if let Some(name) = absolute.file_name().and_then(|n| n.to_str()) {
        let mangled: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if find(format!("_{}_{mangled}_", mangled.len()).as_bytes()) {
            return true;
        }
    }
    let spelled = Path::new(&binding.spelled);
    let mut places: Vec<&str> = vec![&binding.absolute];
    if spelled.parent().is_some_and(|p| !p.as_os_str().is_empty()) {
        places.push(&binding.spelled);
        places.extend(spelled.parent().and_then(Path::to_str));
    }
    places.extend(
        absolute
            .parent()
            .and_then(Path::to_str)
            .filter(|p| *p != "/"),
    );
    places.iter().any(|place| {
        let decimal = |sep: &str| {
            place
                .bytes()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(sep)
        };
        find(place.as_bytes()) || find(decimal(", ").as_bytes()) || find(decimal(",").as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding_of(files: &[(&str, &str, bool)]) -> Option<PathBuf> {
        let mut tokens = PathTokens::default();
        for (path, text, near) in files {
            tokens.add_file(Path::new(path), text.as_bytes(), *near);
        }
        tokens.binding_file()
    }

    #[test]
    fn a_header_that_uses_file_in_its_own_macros_binds_nothing() {
        let header = "#define DG_ASSERT(c) do { if (!(c)) printf(\"%s\", __FILE__); } while (0)\n\
                      template <int N> __global__ void k(int *p) { DG_ASSERT(p); }\n";
        let source = "#include <dg/k.cuh>\nstatic void i() { auto p = (void*)&k<3>; }\n";
        assert_eq!(
            binding_of(&[
                ("/lib/dg/k.cuh", header, false),
                ("/t/u/kernel.cu", source, true)
            ]),
            None,
            "__FILE__ in a header expands to the header's own name, which the key holds"
        );
    }

    #[test]
    fn the_source_using_a_macro_that_reaches_file_binds() {
        let assert_h = "# define assert(expr) \\\n  ((expr) ? (void)0 : __assert_fail (#expr, __FILE__, __LINE__))\n\
                        #define CHECK(x) assert(x)\n";
        let source = "__global__ void k(int *p) { CHECK(p != 0); }\n";
        assert_eq!(
            binding_of(&[
                ("/usr/include/assert.h", assert_h, false),
                ("/t/k.cu", source, true)
            ]),
            Some(PathBuf::from("/t/k.cu")),
            "CHECK reaches __FILE__ through assert"
        );
        assert_eq!(
            binding_of(&[("/t/k.cu", "const char *f = __FILE__;", true)]),
            Some(PathBuf::from("/t/k.cu"))
        );
    }

    #[test]
    fn source_location_binds_wherever_it_is_used_but_a_probe_of_it_does_not() {
        let probe = "#if __has_builtin(__builtin_source_location)\n# define __cpp_lib_source_location 1\n#endif\n";
        assert_eq!(binding_of(&[("/usr/include/version", probe, false)]), None);
        let user = "void f(const char *file = __builtin_FILE());\n";
        assert_eq!(
            binding_of(&[("/lib/log.h", user, false)]),
            Some(PathBuf::from("/lib/log.h"))
        );
        assert!(binding_of(&[("/lib/x.h", "const char *s = __BASE_FILE__;", false)]).is_some());
    }

    fn binding() -> SourceBinding {
        SourceBinding {
            spelled: "/cache/tmp/1f2e/kernel.cu".into(),
            absolute: "/cache/tmp/1f2e/kernel.cu".into(),
        }
    }

    #[test]
    fn an_output_with_the_module_id_or_the_path_names_its_source() {
        let b = binding();
        assert!(!output_names_source(b"\x7fELF .text._Z2kkPi", &b));
        assert!(output_names_source(
            b".text._ZN37_GLOBAL__N__a02c61fc_5_k3_cu_4536d6f12kkEPi",
            &b
        ));
        assert!(output_names_source(b"_ZN9_x_9_kernel_cu_ffa04dc3E", &b));
        assert!(output_names_source(
            b"assert at /cache/tmp/1f2e/kernel.cu:3",
            &b
        ));
        let ptx: String = "/cache/tmp/1f2e"
            .bytes()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        assert!(output_names_source(
            format!(".b8 $str[9] = {{{ptx}, 0}};").as_bytes(),
            &b
        ));
    }

    #[test]
    fn only_device_outputs_without_debug_information_leave_the_path_out_of_the_key() {
        let p = Some(Path::new("/t/k.cu"));
        assert!(!keyed_by_path(false, nvcc::OutputKind::Cubin, p, p));
        assert!(!keyed_by_path(false, nvcc::OutputKind::Ptx, p, p));
        assert!(keyed_by_path(true, nvcc::OutputKind::Cubin, p, p));
        assert!(keyed_by_path(false, nvcc::OutputKind::Fatbin, p, p));
        assert!(keyed_by_path(false, nvcc::OutputKind::Object, p, p));
    }
}

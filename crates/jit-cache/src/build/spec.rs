//! What a caller asks for: a kernel spec, and its validation.

use crate::error::{Error, Result};
use nvcc::OutputKind;
use std::path::PathBuf;
use std::time::Duration;

/// The longest kernel name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Where a kernel's source comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// A file; quoted includes resolve relative to its directory, as nvcc does.
    File(PathBuf),
    /// Source text, compiled from a private copy named `file_name` (quoted includes then resolve
    /// only through the include directories).
    Text {
        /// The file name the text is compiled as (for diagnostics), such as `kernel.cu`.
        file_name: String,
        /// The CUDA source.
        text: String,
    },
}

/// An input the caller adds to the key: anything that changes the artifact but that the cache
/// cannot see in the source, flags or toolchain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Extra {
    /// A named value, such as a library version (`extra:mylib` = `1.4.2`).
    Value {
        /// Component name.
        name: String,
        /// Its value.
        value: String,
    },
    /// An environment variable, by name; unset and empty differ.
    Env(String),
    /// A file's content.
    File {
        /// Component name.
        name: String,
        /// The file.
        path: PathBuf,
    },
    /// An installed Python distribution, by its `RECORD` (or its source tree when editable).
    Wheel {
        /// The `site-packages` directory.
        site_packages: PathBuf,
        /// The distribution's name.
        distribution: String,
    },
}

/// A kernel to compile and cache; made with [`KernelSpec::from_file`] or
/// [`KernelSpec::from_text`] and the builder methods.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct KernelSpec {
    /// The stable name: with the kind and arch list it names the cache's slot for this kernel.
    pub name: String,
    /// The source.
    pub source: Source,
    /// What to produce.
    pub kind: OutputKind,
    /// Target architectures such as `sm_90` (one `-arch`, or one `-gencode` each for fatbins).
    /// Empty: the flags name the targets (`-arch`, `-gencode`, ...), or nvcc's default applies.
    pub arches: Vec<String>,
    /// `-I` directories, in search order.
    pub include_dirs: Vec<PathBuf>,
    /// `-D` definitions.
    pub defines: Vec<(String, Option<String>)>,
    /// Further compiler flags, passed as given (argv, never a shell).
    pub flags: Vec<String>,
    /// The caller's own key components.
    pub extras: Vec<Extra>,
    /// A compile timeout (the compiler's process group is killed when it expires).
    pub timeout: Option<Duration>,
    /// The file name the caller gives the artifact (`kernel.cubin` of `-o dir/kernel.cubin`).
    /// A cubin built with device debug information names its own file (ptxas records its `-o`
    /// in the cubin): with debug information asked for, a cubin is compiled under this name and
    /// the name enters the key, so its bytes say what a bare nvcc's would. Otherwise unused.
    /// `None`: the cache's own name for the artifact.
    pub output_name: Option<String>,
}

impl KernelSpec {
    /// A spec for a source file, named after the file's stem, producing a cubin for `sm_90`.
    pub fn from_file(path: impl Into<PathBuf>) -> KernelSpec {
        let path = path.into();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        KernelSpec::new(name, Source::File(path))
    }

    /// A spec for source text.
    pub fn from_text(
        name: impl Into<String>,
        file_name: impl Into<String>,
        text: impl Into<String>,
    ) -> KernelSpec {
        KernelSpec::new(
            name.into(),
            Source::Text {
                file_name: file_name.into(),
                text: text.into(),
            },
        )
    }

    fn new(name: String, source: Source) -> KernelSpec {
        KernelSpec {
            name,
            source,
            kind: OutputKind::Cubin,
            arches: vec!["sm_90".to_string()],
            include_dirs: Vec::new(),
            defines: Vec::new(),
            flags: Vec::new(),
            extras: Vec::new(),
            timeout: None,
            output_name: None,
        }
    }

    /// Sets the name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Sets the output kind.
    pub fn kind(mut self, kind: OutputKind) -> Self {
        self.kind = kind;
        self
    }

    /// Replaces the arch list.
    pub fn arches<I: IntoIterator<Item = S>, S: Into<String>>(mut self, arches: I) -> Self {
        self.arches = arches.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an include directory.
    pub fn include_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }

    /// Adds a definition.
    pub fn define(mut self, name: impl Into<String>, value: Option<&str>) -> Self {
        self.defines.push((name.into(), value.map(str::to_string)));
        self
    }

    /// Adds a flag.
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.flags.push(flag.into());
        self
    }

    /// Adds a key component of the caller's.
    pub fn extra(mut self, extra: Extra) -> Self {
        self.extras.push(extra);
        self
    }

    /// Sets the compile timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the artifact's file name as the caller will write it ([`KernelSpec::output_name`]).
    pub fn output_name(mut self, name: impl Into<String>) -> Self {
        self.output_name = Some(name.into());
        self
    }

    /// The source's file name, for display and for the key's component name.
    pub(crate) fn source_file_name(&self) -> String {
        match &self.source {
            Source::File(path) => path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Source::Text { file_name, .. } => file_name.clone(),
        }
    }

    /// The rule every arch follows (`sm_90`, `sm_90a`, `compute_90`): a spec's, and a pack
    /// filter's, which would otherwise match nothing. The reason, when `arch` breaks it.
    pub fn check_arch(arch: &str) -> std::result::Result<(), String> {
        let ok = arch.len() <= 32
            && (arch.starts_with("sm_") || arch.starts_with("compute_"))
            && arch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if ok {
            Ok(())
        } else {
            Err(format!(
                "arch `{arch}` is not of the form sm_NN or compute_NN"
            ))
        }
    }

    /// Checks every rule a hostile or mistaken spec could break, before anything touches disk.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Error::InvalidSpec {
            name: self.name.clone(),
            reason,
        };
        validate_name(&self.name).map_err(bad)?;
        for arch in &self.arches {
            KernelSpec::check_arch(arch).map_err(bad)?;
        }
        if self.kind != OutputKind::Fatbin && self.arches.len() > 1 {
            return Err(bad("several arches need --kind fatbin".into()));
        }
        let has_nul = |s: &str| s.contains('\0');
        if self.flags.iter().any(|f| has_nul(f))
            || self
                .defines
                .iter()
                .any(|(n, v)| has_nul(n) || v.as_deref().is_some_and(has_nul))
        {
            return Err(bad("a flag or define contains NUL".into()));
        }
        if let Source::Text { file_name, .. } = &self.source {
            validate_name(file_name).map_err(|r| bad(format!("source file name: {r}")))?;
        }
        if let Source::File(path) = &self.source {
            if path.file_name().is_none() {
                return Err(bad(format!("source path {} names no file", path.display())));
            }
        }
        if let Some(name) = &self.output_name {
            validate_output_name(name).map_err(|r| bad(format!("output name: {r}")))?;
        }
        Ok(())
    }
}

/// An output name is one file name (the compile writes it in a staging directory), of any
/// spelling a user may give nvcc's `-o`.
fn validate_output_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("`{name}` names no file"));
    }
    if name.len() > 255 {
        return Err("the name is longer than 255 bytes".into());
    }
    if name.contains('/') || name.contains('\0') {
        return Err("the name contains `/` or NUL".into());
    }
    Ok(())
}

/// A name becomes part of paths inside the cache, so it must be a single harmless component.
pub(crate) fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!("the name is longer than {MAX_NAME_LEN} bytes"));
    }
    if name.contains('/') || name.contains('\0') || name.contains('\\') {
        return Err("the name contains `/`, `\\` or NUL".into());
    }
    if name == "." || name == ".." || name.contains("..") {
        return Err("the name contains `..`".into());
    }
    if name.starts_with('.') || name.starts_with('-') {
        return Err("the name starts with `.` or `-`".into());
    }
    if name.chars().any(char::is_control) {
        return Err("the name contains control characters".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_refused() {
        for name in [
            "",
            "..",
            "a/b",
            "../x",
            "a\0b",
            ".hidden",
            "-rf",
            "a..b",
            &"x".repeat(200),
            "tab\there",
        ] {
            assert!(validate_name(name).is_err(), "`{name:?}` must be refused");
        }
        for name in ["vector_add", "gemm-f16.v2", "k1"] {
            assert!(validate_name(name).is_ok(), "`{name}` is a fine name");
        }
    }

    #[test]
    fn an_output_name_is_one_file_name() {
        let spec = KernelSpec::from_text("k", "k.cu", "");
        for name in ["", ".", "..", "out/k.cubin", "k\0.cubin", &"x".repeat(256)] {
            assert!(
                spec.clone().output_name(name).validate().is_err(),
                "`{name:?}` must be refused"
            );
        }
        // nvcc takes any spelling of `-o`'s file name: a leading dash or dot, spaces.
        for name in [
            "kernel.cubin",
            "-k.cubin",
            ".k",
            "a b.cubin",
            "artifact.cubin",
        ] {
            assert!(
                spec.clone().output_name(name).validate().is_ok(),
                "`{name}`"
            );
        }
    }

    #[test]
    fn specs_with_bad_arches_or_flags_are_refused() {
        let spec = KernelSpec::from_text("k", "k.cu", "");
        assert!(spec.clone().arches(["sm_90; rm -rf /"]).validate().is_err());
        assert!(
            spec.clone().arches(Vec::<String>::new()).validate().is_ok(),
            "an empty arch list leaves the targets to the flags"
        );
        assert!(spec.clone().flag("a\0b").validate().is_err());
        assert!(
            spec.clone().arches(["sm_80", "sm_90"]).validate().is_err(),
            "several arches need a fatbin"
        );
        assert!(spec
            .kind(OutputKind::Fatbin)
            .arches(["sm_80", "sm_90"])
            .validate()
            .is_ok());
    }
}

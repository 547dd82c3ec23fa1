//! The two levels of identity: a *slot* names what is asked for, a *key* covers every input known
//! before compiling. (The third level, a variant, is named by the headers a compile read: see
//! `headers.rs`.)
//!
//! Rule: if you change any input to the key, or how one is hashed, bump [`CACHE_FORMAT`].

use crate::error::{Error, Result};
use crate::headers::{normalize, SearchPath};
use crate::spec::{Extra, KernelSpec, Source};
use crate::toolchain::Toolchain;
use fingerprint::{Component, Digest, Manifest};
use std::path::PathBuf;

/// The version of the key's inputs and of the entry format, mixed into every key.
pub const CACHE_FORMAT: u32 = 1;

/// Flags that make the compiler embed paths in its output: with them, absolute paths join the key.
const PATH_EMBEDDING_FLAGS: &[&str] = &[
    "-G",
    "-g",
    "--device-debug",
    "--debug",
    "-lineinfo",
    "--generate-line-info",
];

/// Everything computed about a spec before looking in the cache.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) key: Digest,
    pub(crate) slot: Digest,
    /// The key's components (not yet the headers').
    pub(crate) manifest: Manifest,
    pub(crate) search: SearchPath,
    /// The absolute source path, for file sources.
    pub(crate) source_path: Option<PathBuf>,
    /// The source's digest, and its stamp when settled (a repeated request then needs one `stat`).
    pub(crate) source_digest: Digest,
    pub(crate) source_stamp: Option<crate::headers::StatStamp>,
}

/// The output kind's name as stored and displayed.
pub(crate) fn kind_name(kind: nvcc::OutputKind) -> String {
    format!("{kind:?}").to_lowercase()
}

/// Computes the slot, the key and the key's manifest for a validated spec.
pub(crate) fn prepare(
    spec: &KernelSpec,
    toolchain: &Toolchain,
    hash_extra_file: &dyn Fn(&std::path::Path) -> Result<Digest>,
) -> Result<Prepared> {
    let mut manifest = Manifest::new();
    manifest.insert_value(
        "format",
        &format!(
            "jit-cache {CACHE_FORMAT}, fingerprint {}",
            fingerprint::FORMAT_VERSION
        ),
    );
    let (source_digest, source_stamp, source_path) = match &spec.source {
        Source::File(path) => {
            let path = normalize(path);
            let (digest, stamp) = crate::headers::hash_direct_with_stamp(&path)?;
            (digest, stamp, Some(path))
        }
        Source::Text { text, .. } => (Digest::of_bytes(text.as_bytes()), None, None),
    };
    manifest.insert(
        format!("source:{}", spec.source_file_name()),
        Component {
            digest: source_digest,
            value: None,
        },
    );
    manifest.insert_value("kind", &kind_name(spec.kind));
    manifest.insert_list("arch", &spec.arches);
    manifest.insert_list("flags", &spec.flags);
    let defines: Vec<String> = spec
        .defines
        .iter()
        .map(|(n, v)| v.as_ref().map_or_else(|| n.clone(), |v| format!("{n}={v}")))
        .collect();
    manifest.insert_list("defines", &defines);
    // Include directories enter as the headers found in them (per variant), never as paths; only
    // their number matters here, since a header's record names its directory by index.
    manifest.insert_value("include-dirs", &spec.include_dirs.len().to_string());
    manifest.insert(
        "toolchain:nvcc",
        Component {
            digest: toolchain.identity.digest,
            value: Some(toolchain.version.clone()),
        },
    );
    manifest.insert_value("toolchain:host-compiler", &toolchain.host_compiler);
    for var in nvcc::RELEVANT_ENV {
        manifest.insert_env(var);
    }
    for extra in &spec.extras {
        match extra {
            Extra::Value { name, value } => manifest.insert_value(format!("extra:{name}"), value),
            Extra::Env(var) => manifest.insert_env(var),
            Extra::File { name, path } => manifest.insert(
                format!("file:{name}"),
                Component {
                    digest: hash_extra_file(path)?,
                    value: Some(path.display().to_string()),
                },
            ),
            Extra::Wheel {
                site_packages,
                distribution,
            } => {
                let wheel = fingerprint::wheel_identity(site_packages, distribution)?;
                manifest.insert(
                    format!("wheel:{distribution}"),
                    Component {
                        digest: wheel.digest,
                        value: Some(wheel.version.clone()),
                    },
                );
            }
        }
    }
    let include_dirs: Vec<PathBuf> = spec.include_dirs.iter().map(|d| normalize(d)).collect();
    if spec
        .flags
        .iter()
        .any(|f| PATH_EMBEDDING_FLAGS.contains(&f.as_str()))
    {
        // Debug information embeds absolute paths: a relocated tree must not share the artifact.
        let mut paths: Vec<String> = source_path
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        paths.extend(include_dirs.iter().map(|d| d.display().to_string()));
        manifest.insert_list("paths", &paths);
    }
    let key = manifest.digest();
    let slot = slot_of(spec);
    let search = SearchPath {
        source_dir: source_path
            .as_ref()
            .and_then(|p| p.parent().map(PathBuf::from)),
        include_dirs,
        toolkit_root: toolchain.toolkit_root.clone(),
    };
    Ok(Prepared {
        key,
        slot,
        manifest,
        search,
        source_path,
        source_digest,
        source_stamp,
    })
}

/// The slot: the stable name of what is asked for (name, output kind, arch list).
pub(crate) fn slot_of(spec: &KernelSpec) -> Digest {
    let mut text = format!(
        "jit-cache slot {CACHE_FORMAT}\0{}\0{}",
        spec.name,
        kind_name(spec.kind)
    );
    for arch in &spec.arches {
        text.push('\0');
        text.push_str(arch);
    }
    Digest::of_bytes(text.as_bytes())
}

/// Fails early, with the path, when a file source cannot be read at all.
pub(crate) fn check_source_readable(spec: &KernelSpec) -> Result<()> {
    if let Source::File(path) = &spec.source {
        std::fs::metadata(path).map_err(|e| Error::io("read kernel source", path, e))?;
    }
    Ok(())
}

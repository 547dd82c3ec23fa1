//! The two levels of identity: a *slot* names what is asked for, a *key* covers every input known
//! before compiling. (The third level, a variant, is named by the headers a compile read: see
//! `headers.rs`.)
//!
//! Rule: if you change any input to the key, or how one is hashed, bump [`CACHE_FORMAT`].

use crate::error::{Error, Result};
use crate::headers::StatStamp;
use crate::request::Request;
use crate::search::SearchPath;
use crate::spec::{Extra, KernelSpec, Source};
use crate::toolchain::{HostCompiler, Toolchain};
use fingerprint::{Component, Digest, Manifest};
use std::path::PathBuf;

/// The version of the key's inputs and of the entry format, mixed into every key.
pub const CACHE_FORMAT: u32 = 2;

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
    pub(crate) source_stamp: Option<StatStamp>,
}

/// Computes the slot, the key and the key's manifest for a resolved request.
pub(crate) fn prepare(
    request: &Request,
    toolchain: &Toolchain,
    host: &HostCompiler,
    hash_extra_file: &dyn Fn(&std::path::Path) -> Result<Digest>,
) -> Result<Prepared> {
    let spec = &request.spec;
    let mut manifest = Manifest::new();
    manifest.insert_value(
        "format",
        &format!(
            "jit-cache {CACHE_FORMAT}, fingerprint {}",
            fingerprint::FORMAT_VERSION
        ),
    );
    let (source_digest, source_stamp) = match (&spec.source, &request.source_path) {
        (Source::File(_), Some(path)) => crate::headers::hash_direct_with_stamp(path)?,
        (Source::Text { text, .. }, _) => (Digest::of_bytes(text.as_bytes()), None),
        (Source::File(path), None) => {
            return Err(Error::io(
                "resolve kernel source",
                path,
                std::io::Error::other("not resolved"),
            ))
        }
    };
    manifest.insert(
        format!("source:{}", spec.source_file_name()),
        Component {
            digest: source_digest,
            value: None,
        },
    );
    manifest.insert_value("kind", spec.kind.name());
    manifest.insert_list("arch", &spec.arches);
    manifest.insert_list("flags", &request.key_flags);
    let defines: Vec<String> = spec
        .defines
        .iter()
        .map(|(n, v)| v.as_ref().map_or_else(|| n.clone(), |v| format!("{n}={v}")))
        .collect();
    manifest.insert_list("defines", &defines);
    // Search directories enter as the headers found in them (per variant), never as paths; only
    // their numbers matter here, since a header's record names its directory by index.
    let user = &request.search;
    manifest.insert_value(
        "search-path",
        &format!(
            "{} -iquote, {} -I, {} -isystem, {} -include",
            user.quote.len(),
            user.include.len(),
            user.system.len(),
            user.forced.len()
        ),
    );
    manifest.insert(
        "toolchain:nvcc",
        Component {
            digest: toolchain.identity.digest,
            value: Some(toolchain.version.clone()),
        },
    );
    manifest.insert_value("toolchain:host-compiler", &host.identity);
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
    if spec
        .flags
        .iter()
        .any(|f| PATH_EMBEDDING_FLAGS.contains(&f.as_str()))
    {
        // Debug information embeds absolute paths: a relocated tree must not share the artifact.
        let mut paths: Vec<String> = request
            .source_path
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        for dir in user.quote.iter().chain(&user.include).chain(&user.system) {
            paths.push(dir.display().to_string());
        }
        paths.push(request.working_dir.display().to_string());
        manifest.insert_list("paths", &paths);
    }
    let key = manifest.digest();
    let slot = slot_of(spec);
    let search = SearchPath {
        working_dir: request.working_dir.clone(),
        source_dir: request
            .source_path
            .as_ref()
            .and_then(|p| p.parent().map(PathBuf::from)),
        quote: user.quote.clone(),
        include: user.include.clone(),
        system: user.system.clone(),
        forced: user.forced.clone(),
        dirs: std::sync::Arc::clone(&host.dirs),
    };
    Ok(Prepared {
        key,
        slot,
        manifest,
        search,
        source_path: request.source_path.clone(),
        source_digest,
        source_stamp,
    })
}

/// The slot: the stable name of what is asked for (name, output kind, arch list).
pub(crate) fn slot_of(spec: &KernelSpec) -> Digest {
    let mut text = format!(
        "jit-cache slot {CACHE_FORMAT}\0{}\0{}",
        spec.name,
        spec.kind.name()
    );
    for arch in &spec.arches {
        text.push('\0');
        text.push_str(arch);
    }
    Digest::of_bytes(text.as_bytes())
}

/// Fails early, with the path, when a file source cannot be read at all.
pub(crate) fn check_source_readable(
    spec: &KernelSpec,
    resolved: Option<&std::path::Path>,
) -> Result<()> {
    if let (Source::File(given), Some(path)) = (&spec.source, resolved) {
        std::fs::metadata(path).map_err(|e| Error::io("read kernel source", given, e))?;
    }
    Ok(())
}

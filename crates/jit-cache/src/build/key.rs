//! The two levels of identity: a *slot* names what is asked for, a *key* covers every input known
//! before compiling. (The third level, a variant, is named by the headers a compile read: see
//! `headers.rs`.)
//!
//! Rule: if you change any input to the key, or how one is hashed, bump [`CACHE_FORMAT`].

use crate::build::headers::{Mismatch, StatStamp};
use crate::build::request::Request;
use crate::build::search::SearchPath;
use crate::build::source_bound::SourceBinding;
use crate::build::spec::{Extra, KernelSpec, Source};
use crate::build::toolchain::{HostCompiler, Toolchain};
use crate::error::{Error, Result};
use fingerprint::{Component, Digest, Manifest};
use std::path::PathBuf;

/// The version of the key's inputs and of the entry format, mixed into every key.
/// Version 3: the source and every directory enter as spelled (the compiler is given them so),
/// with what GCC's merge of the search chains did with each directory, and the working
/// directory when debug information is asked for. Version 4: the source's spelled path enters
/// only where the output may name it before any proof (`source_bound.rs`); elsewhere a variant
/// whose compile could not prove independence is bound to its source. Version 5: absence
/// groups record directories found (`%/name`). Version 6: and symlinks found, with their
/// targets (`%>name%>target`), which an earlier reader would refuse as corrupt.
pub const CACHE_FORMAT: u32 = 6;

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
    /// The source as a bound variant must name it, when the key leaves the source's path out
    /// (`source_bound.rs`); None when the key holds it (or the source is text).
    pub(crate) binding: Option<SourceBinding>,
}

impl Prepared {
    /// Whether a variant bound to `source` (None: bound to nothing) may serve this request.
    pub(crate) fn serves_source(
        &self,
        source: Option<&SourceBinding>,
    ) -> std::result::Result<(), Box<Mismatch>> {
        match source {
            Some(bound) if Some(bound) != self.binding.as_ref() => {
                Err(Box::new(Mismatch::OtherSource {
                    source: PathBuf::from(&bound.spelled),
                }))
            }
            _ => Ok(()),
        }
    }
}

/// Computes the slot, the key and the key's manifest for a resolved request.
pub(crate) fn prepare(
    request: &Request,
    toolchain: &Toolchain,
    host: &HostCompiler,
    hash_extra_file: &dyn Fn(&std::path::Path) -> Result<Digest>,
) -> Result<Prepared> {
    let spec = &request.spec;
    // The table is nvcc 13.5's; the release that runs the command may lack an option it knows.
    if let Some(release) = &toolchain.options {
        let missing = request
            .options
            .iter()
            .find(|name| release.lacks(name))
            .and_then(|name| nvcc::options::find(name));
        if let Some(missing) = missing {
            return Err(Error::InvalidSpec {
                name: spec.name.clone(),
                reason: format!(
                    "nvcc {} has no option `{}`: not cached",
                    toolchain.version,
                    missing.long_or_short()
                ),
            });
        }
    }
    let mut manifest = Manifest::new();
    manifest.insert_value(
        "format",
        &format!(
            "jit-cache {CACHE_FORMAT}, fingerprint {}",
            fingerprint::FORMAT_VERSION
        ),
    );
    let (source_digest, source_stamp) = match (&spec.source, &request.source_path) {
        (Source::File(_), Some(path)) => crate::build::headers::hash_direct_with_stamp(path)?,
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
    // What the output may embed: `__FILE__`, `assert` and diagnostics name the source and every
    // header by the spelling the compiler is given, debug information the working directory,
    // and nvcc's module id the source's absolute path. Where the output cannot name the path
    // before the compile is looked at, the key leaves it out and the compile proves it
    // (`source_bound.rs`).
    let keyed = crate::build::source_bound::keyed_by_path(
        request.debug,
        spec.kind,
        request.source_spelled.as_deref(),
        request.source_path.as_deref(),
    );
    // nvcc's module id is derived from the source's real path (a symlinked or `..`-spelled
    // directory gives the same id): a binding names the source by it. Resolved only where the
    // key leaves the path out (a `realpath` costs a lookup per component).
    let bound = if keyed {
        None
    } else {
        let real = request
            .source_path
            .as_deref()
            .and_then(|p| std::fs::canonicalize(p).ok());
        SourceBinding::of(request.source_spelled.as_deref(), real.as_deref())
    };
    let binding = match (bound, &request.source_spelled) {
        (Some(bound), _) => Some(bound),
        // Keyed by path, or a file source whose binding could not be written: the path is in
        // the key.
        (None, Some(spelled)) => {
            manifest.insert_value("source-path", &spelled.to_string_lossy());
            None
        }
        (None, None) => None,
    };
    manifest.insert_value("kind", spec.kind.name());
    if let Some(name) = request.embedded_output_name() {
        manifest.insert_value("output-name", name);
    }
    manifest.insert_list("arch", &spec.arches);
    manifest.insert_list("flags", &request.key_flags);
    let defines: Vec<String> = spec
        .defines
        .iter()
        .map(|(n, v)| v.as_ref().map_or_else(|| n.clone(), |v| format!("{n}={v}")))
        .collect();
    manifest.insert_list("defines", &defines);
    let user = &request.search;
    let spelled = |list: &[crate::build::request::SearchDir]| -> Vec<String> {
        list.iter()
            .map(|d| d.spelled.to_string_lossy().into_owned())
            .collect()
    };
    manifest.insert_list("search:quote", &spelled(&user.quote));
    manifest.insert_list("search:bracket", &spelled(&user.bracket));
    manifest.insert_list("search:system", &spelled(&user.system));
    manifest.insert_list("search:after", &spelled(&user.after));
    let forced: Vec<String> = user
        .imacros
        .iter()
        .chain(&user.host_include)
        .chain(&user.include)
        .map(|f| f.to_string_lossy().into_owned())
        .collect();
    manifest.insert_list("search:forced", &forced);
    let search = SearchPath::new(
        &request.working_dir,
        request
            .source_path
            .as_ref()
            .and_then(|p| p.parent().map(PathBuf::from)),
        user,
        std::sync::Arc::clone(&host.dirs),
    );
    // Which directories GCC's merge kept, dropped as missing, or dropped as duplicates: the
    // order the compiler searches.
    manifest.insert_value("search:shape", &search.shape);
    if request.debug {
        // Debug information names the working directory.
        manifest.insert_value("working-dir", &request.working_dir.to_string_lossy());
    }
    manifest.insert(
        "toolchain:nvcc",
        Component {
            digest: toolchain.identity.digest,
            value: Some(toolchain.version.clone()),
        },
    );
    manifest.insert_value("toolchain:host-compiler", &host.identity);
    // The toolkit's and the host compiler's directories as the compiler spells them (nvcc's
    // from the path it is run by).
    let mut toolchain_dirs = vec![host.dirs.toolkit_top.to_string_lossy().into_owned()];
    toolchain_dirs.extend(
        host.dirs
            .installed
            .iter()
            .map(|d| d.path.to_string_lossy().into_owned()),
    );
    manifest.insert_list("toolchain:dirs", &toolchain_dirs);
    for var in nvcc::RELEVANT_ENV {
        match *var {
            // nvcc reads an empty (or blank) value as no flags at all: one key for both.
            "NVCC_PREPEND_FLAGS" | "NVCC_APPEND_FLAGS" => {
                let value = std::env::var_os(var).unwrap_or_default();
                let words: Vec<String> = value
                    .to_string_lossy()
                    .split_ascii_whitespace()
                    .map(str::to_string)
                    .collect();
                manifest.insert_list(format!("env:{var}"), &words);
            }
            _ => manifest.insert_env(var),
        }
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
    let key = key_of(&manifest);
    let slot = slot_of(spec);
    Ok(Prepared {
        key,
        slot,
        manifest,
        search,
        source_path: request.source_path.clone(),
        source_digest,
        source_stamp,
        binding,
    })
}

/// The key a manifest names (its digest): what a build computes, and what a pack's import
/// checks a recorded key against.
pub(crate) fn key_of(manifest: &Manifest) -> Digest {
    manifest.digest()
}

/// The slot: the stable name of what is asked for (name, output kind, arch list).
pub(crate) fn slot_of(spec: &KernelSpec) -> Digest {
    slot_of_parts(&spec.name, spec.kind, &spec.arches)
}

/// The slot of a kernel named `name` of output `kind` for `arches`, as [`slot_of`] computes it
/// (a pack's import checks a recorded slot with it).
pub(crate) fn slot_of_parts(name: &str, kind: nvcc::OutputKind, arches: &[String]) -> Digest {
    let mut text = format!("jit-cache slot {CACHE_FORMAT}\0{}\0{}", name, kind.name());
    for arch in arches {
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

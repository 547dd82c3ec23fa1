//! `jit_cache.Source` and `jit_cache.KernelSpec`: what a kernel request names.
//!
//! A request's keyword arguments (`include_dirs`, `defines`, `flags`, `arch`, `kind`, `name`,
//! `timeout`) are read in one place, [`options`]: `KernelSpec(...)`, `Cache.get_or_build`,
//! `Cache.retry`, `Cache.explain` and `Cache.build_many`'s dict requests all take them as
//! `**options` and hand them here, so the list cannot drift between them
//! (`KernelOptions` in `_types.py` is its one typed copy).

use crate::convert::strings;
use jit_cache::OutputKind;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use std::path::PathBuf;
use std::time::Duration;

/// Where a kernel's source comes from: a file, or text compiled from a private copy.
#[pyclass(module = "jit_cache._native", frozen)]
#[derive(Clone)]
pub(crate) struct Source {
    source: SourceKind,
}

#[derive(Clone)]
enum SourceKind {
    File(PathBuf),
    Text { file_name: String, text: String },
}

#[pymethods]
impl Source {
    /// Source text compiled as a file named `name` (such as `"scale.cu"`); quoted includes then
    /// resolve only through the include directories.
    #[staticmethod]
    fn text(name: String, text: String) -> Source {
        Source {
            source: SourceKind::Text {
                file_name: name,
                text,
            },
        }
    }

    /// A source file; quoted includes resolve relative to its directory, as nvcc does.
    #[staticmethod]
    fn file(path: PathBuf) -> Source {
        Source {
            source: SourceKind::File(path),
        }
    }

    fn __repr__(&self) -> String {
        match &self.source {
            SourceKind::File(path) => format!("Source.file({:?})", path.display().to_string()),
            SourceKind::Text { file_name, text } => {
                format!("Source.text({file_name:?}, <{} bytes>)", text.len())
            }
        }
    }
}

/// One kernel request, checked once and reusable: a source (a path or a `Source`) and the
/// options `Cache.get_or_build` takes (`include_dirs`, `defines`, `flags`, `arch`, `kind`,
/// `name`, `timeout`). Pass it where a source goes, without keyword arguments.
#[pyclass(module = "jit_cache._native", frozen)]
pub(crate) struct KernelSpec {
    spec: jit_cache::KernelSpec,
    kind: &'static str,
}

#[pymethods]
impl KernelSpec {
    #[new]
    #[pyo3(signature = (source, **options))]
    fn new(source: &Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<KernelSpec> {
        let (spec, kind) = options_spec(source, options)?;
        Ok(KernelSpec { spec, kind })
    }

    /// The kernel's name (the source file's stem unless `name` was given).
    #[getter]
    fn name(&self) -> &str {
        &self.spec.name
    }

    /// What it compiles to: `"cubin"`, `"ptx"` or `"fatbin"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn __repr__(&self) -> String {
        format!("<jit_cache.KernelSpec {} ({})>", self.spec.name, self.kind)
    }
}

/// The request of a cache call: a `KernelSpec` as it is, or a source with `KernelSpec`'s
/// keyword arguments.
pub(crate) fn request(
    source: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<jit_cache::KernelSpec> {
    if let Ok(spec) = source.cast::<KernelSpec>() {
        if options.is_some_and(|o| !o.is_empty()) {
            return Err(PyTypeError::new_err(
                "a KernelSpec carries its options: pass them to KernelSpec(...), not beside it",
            ));
        }
        return Ok(spec.get().spec.clone());
    }
    options_spec(source, options).map(|(spec, _)| spec)
}

/// A `build_many` request: a path, a `Source`, a `KernelSpec`, or a dict of `get_or_build`'s
/// arguments with `"source"`.
pub(crate) fn many_request(request: &Bound<'_, PyAny>) -> PyResult<jit_cache::KernelSpec> {
    let Ok(args) = request.cast::<PyDict>() else {
        return self::request(request, None);
    };
    let options = args.copy()?;
    let source = options
        .get_item("source")?
        .ok_or_else(|| PyTypeError::new_err("build_many: a dict request needs \"source\""))?;
    options.del_item("source")?;
    self::request(&source, Some(&options))
}

/// The options of one request, as Python passed them (`None` and absent alike).
#[derive(Default)]
struct Options<'py> {
    include_dirs: Option<Bound<'py, PyAny>>,
    defines: Option<Bound<'py, PyAny>>,
    flags: Option<Bound<'py, PyAny>>,
    arch: Option<Bound<'py, PyAny>>,
    kind: Option<String>,
    name: Option<String>,
    timeout: Option<f64>,
}

/// The keyword arguments of a request: the one list (`KernelOptions` in `_types.py`).
const OPTIONS: &[&str] = &[
    "include_dirs",
    "defines",
    "flags",
    "arch",
    "kind",
    "name",
    "timeout",
];

/// Reads `**options` by [`OPTIONS`], refusing any other name as Python refuses an unexpected
/// keyword argument.
fn options<'py>(given: Option<&Bound<'py, PyDict>>) -> PyResult<Options<'py>> {
    let mut out = Options::default();
    let Some(given) = given else {
        return Ok(out);
    };
    for (key, value) in given.iter() {
        let key: String = key.extract()?;
        let value = (!value.is_none()).then_some(value);
        match key.as_str() {
            "include_dirs" => out.include_dirs = value,
            "defines" => out.defines = value,
            "flags" => out.flags = value,
            "arch" => out.arch = value,
            "kind" => out.kind = value.map(|v| v.extract()).transpose()?,
            "name" => out.name = value.map(|v| v.extract()).transpose()?,
            "timeout" => out.timeout = value.map(|v| v.extract()).transpose()?,
            other => {
                return Err(PyTypeError::new_err(format!(
                    "unexpected keyword argument {other:?} (a kernel request takes {})",
                    OPTIONS.join(", ")
                )))
            }
        }
    }
    Ok(out)
}

/// The library's spec for `source` and `**options`, and its kind's name.
fn options_spec(
    source: &Bound<'_, PyAny>,
    given: Option<&Bound<'_, PyDict>>,
) -> PyResult<(jit_cache::KernelSpec, &'static str)> {
    let options = options(given)?;
    let mut spec = if let Ok(source) = source.cast::<Source>() {
        match &source.get().source {
            SourceKind::File(path) => jit_cache::KernelSpec::from_file(path.clone()),
            SourceKind::Text { file_name, text } => {
                let stem = std::path::Path::new(file_name)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| file_name.clone());
                jit_cache::KernelSpec::from_text(stem, file_name.clone(), text.clone())
            }
        }
    } else {
        let path: PathBuf = source.extract().map_err(|_| {
            PyTypeError::new_err(
                "source must be a path (str or os.PathLike), a jit_cache.Source or a \
                 jit_cache.KernelSpec",
            )
        })?;
        jit_cache::KernelSpec::from_file(path)
    };
    if let Some(dirs) = &options.include_dirs {
        if dirs.is_instance_of::<PyString>() {
            spec = spec.include_dir(dirs.extract::<PathBuf>()?);
        } else if let Ok(dir) = dirs.extract::<PathBuf>() {
            spec = spec.include_dir(dir);
        } else {
            for dir in dirs.try_iter()? {
                spec = spec.include_dir(dir?.extract::<PathBuf>()?);
            }
        }
    }
    for (name, value) in defines(options.defines.as_ref())? {
        spec = spec.define(name, value.as_deref());
    }
    for flag in strings("flags", options.flags.as_ref())? {
        spec = spec.flag(flag);
    }
    let arches = strings("arch", options.arch.as_ref())?;
    if !arches.is_empty() {
        spec = spec.arches(arches);
    }
    let (kind, kind_name) = output_kind(options.kind.as_deref().unwrap_or("cubin"))?;
    spec = spec.kind(kind);
    if let Some(name) = options.name {
        spec = spec.name(name);
    }
    if let Some(seconds) = options.timeout {
        let timeout = Duration::try_from_secs_f64(seconds)
            .map_err(|e| PyValueError::new_err(format!("timeout: {e}")))?;
        spec = spec.timeout(timeout);
    }
    Ok((spec, kind_name))
}

/// Reads `defines`: `"NAME"` / `"NAME=VALUE"` strings, `(name, value)` pairs, or a mapping.
fn defines(value: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, Option<String>)>> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let items: Vec<Bound<'_, PyAny>> = if let Ok(map) = value.cast::<PyDict>() {
        map.items().iter().collect()
    } else {
        value.try_iter()?.collect::<PyResult<_>>()?
    };
    let mut out = Vec::new();
    for item in items {
        if let Ok(text) = item.extract::<String>() {
            match text.split_once('=') {
                Some((name, value)) => out.push((name.to_string(), Some(value.to_string()))),
                None => out.push((text, None)),
            }
        } else if let Ok(pair) = item.cast::<PyTuple>() {
            let (name, value): (String, Option<Bound<'_, PyAny>>) = pair.extract()?;
            let value = value.map(|v| v.str().map(|s| s.to_string())).transpose()?;
            out.push((name, value));
        } else {
            return Err(PyTypeError::new_err(
                "defines: each item is \"NAME\", \"NAME=VALUE\" or a (name, value) pair",
            ));
        }
    }
    Ok(out)
}

/// The output kind a request names (`Kind` in `_types.py`), and its name as a static string.
fn output_kind(kind: &str) -> PyResult<(OutputKind, &'static str)> {
    match kind {
        "cubin" => Ok((OutputKind::Cubin, "cubin")),
        "ptx" => Ok((OutputKind::Ptx, "ptx")),
        "fatbin" => Ok((OutputKind::Fatbin, "fatbin")),
        other => Err(PyValueError::new_err(format!(
            "kind must be \"cubin\", \"ptx\" or \"fatbin\", not {other:?}"
        ))),
    }
}

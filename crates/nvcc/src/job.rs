//! [`CompileJob`]: what to compile, for which targets, with which flags; and its argv.

use crate::toolchain::Nvcc;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What nvcc should produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OutputKind {
    /// A device ELF for one real architecture (`-cubin`).
    Cubin,
    /// PTX assembly for one virtual architecture (`-ptx`).
    Ptx,
    /// A fat binary holding cubins and/or PTX for several targets (`-fatbin`).
    Fatbin,
    /// A host object with embedded device code (`-c`).
    Object,
    /// A host shared library (`-shared`, host code built with `-fPIC`).
    SharedLibrary,
}

impl OutputKind {
    /// The conventional file extension, without the dot.
    pub fn extension(&self) -> &'static str {
        match self {
            OutputKind::Cubin => "cubin",
            OutputKind::Ptx => "ptx",
            OutputKind::Fatbin => "fatbin",
            OutputKind::Object => "o",
            OutputKind::SharedLibrary => "so",
        }
    }

    /// The kind's stable name, as stored on disk and shown to people: `cubin`, `ptx`, `fatbin`,
    /// `object` or `shared-library`.
    pub fn name(&self) -> &'static str {
        match self {
            OutputKind::Cubin => "cubin",
            OutputKind::Ptx => "ptx",
            OutputKind::Fatbin => "fatbin",
            OutputKind::Object => "object",
            OutputKind::SharedLibrary => "shared-library",
        }
    }

    /// Every kind, in the order they are listed to people.
    pub const ALL: [OutputKind; 5] = [
        OutputKind::Cubin,
        OutputKind::Ptx,
        OutputKind::Fatbin,
        OutputKind::Object,
        OutputKind::SharedLibrary,
    ];

    /// The kind [`OutputKind::name`] names.
    pub fn from_name(name: &str) -> Option<OutputKind> {
        OutputKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The nvcc flag that selects this output.
    pub fn flag(&self) -> &'static str {
        match self {
            OutputKind::Cubin => "-cubin",
            OutputKind::Ptx => "-ptx",
            OutputKind::Fatbin => "-fatbin",
            OutputKind::Object => "-c",
            OutputKind::SharedLibrary => "-shared",
        }
    }
}

/// One code-generation target.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Target {
    /// `-arch=<arch>`, e.g. `sm_90` (nvcc then also embeds `compute_90` PTX in fatbins).
    Arch(String),
    /// `-gencode=arch=<arch>,code=<code>`, e.g. `compute_90`, `sm_90`.
    Gencode {
        /// The virtual architecture, e.g. `compute_90`.
        arch: String,
        /// The real architecture or PTX to emit, e.g. `sm_90` or `compute_90`.
        code: String,
    },
}

/// One nvcc invocation, built with chained methods.
///
/// ```
/// use nvcc::{CompileJob, OutputKind};
/// use std::time::Duration;
/// let job = CompileJob::new("kernel.cu", "kernel.cubin", OutputKind::Cubin)
///     .arch("sm_90")
///     .include_dir("include")
///     .define("BLOCK", Some("128"))
///     .std("c++17")
///     .flag("-lineinfo")
///     .timeout(Duration::from_secs(120));
/// assert_eq!(job.kind, OutputKind::Cubin);
/// ```
#[derive(Clone, Debug)]
pub struct CompileJob {
    /// The source file.
    pub source: PathBuf,
    /// Where the output goes.
    pub output: PathBuf,
    /// What to produce.
    pub kind: OutputKind,
    /// Code-generation targets, in order.
    pub targets: Vec<Target>,
    /// `-I` directories, in order.
    pub include_dirs: Vec<PathBuf>,
    /// `-D` macros: name and optional value.
    pub defines: Vec<(String, Option<String>)>,
    /// Further flags, passed verbatim after the others.
    pub flags: Vec<String>,
    /// `-ccbin`: the host compiler.
    pub ccbin: Option<PathBuf>,
    /// `-std=`: the C++ standard, e.g. `c++17`.
    pub std: Option<String>,
    /// The compiler's working directory; relative paths in the job and the dependency file are
    /// relative to it.
    pub working_dir: Option<PathBuf>,
    /// Kill the compile (and everything it started) after this long.
    pub timeout: Option<Duration>,
    /// Extra environment variables for the compiler.
    pub env: Vec<(OsString, OsString)>,
    /// Record every path the compile and its children look up ([`file_trace`]); the trace is in
    /// [`crate::CompileOutput::trace`].
    pub trace: bool,
}

impl CompileJob {
    /// A job with no targets, includes, defines or flags.
    pub fn new(source: impl Into<PathBuf>, output: impl Into<PathBuf>, kind: OutputKind) -> Self {
        CompileJob {
            source: source.into(),
            output: output.into(),
            kind,
            targets: Vec::new(),
            include_dirs: Vec::new(),
            defines: Vec::new(),
            flags: Vec::new(),
            ccbin: None,
            std: None,
            working_dir: None,
            timeout: None,
            env: Vec::new(),
            trace: false,
        }
    }

    /// Adds `-arch=<arch>` (e.g. `sm_90`). For more than one target use [`CompileJob::gencode`].
    #[must_use]
    pub fn arch(mut self, arch: &str) -> Self {
        self.targets.push(Target::Arch(arch.to_owned()));
        self
    }

    /// Adds `-gencode=arch=<arch>,code=<code>`.
    #[must_use]
    pub fn gencode(mut self, arch: &str, code: &str) -> Self {
        self.targets.push(Target::Gencode {
            arch: arch.to_owned(),
            code: code.to_owned(),
        });
        self
    }

    /// Adds an `-I` directory.
    #[must_use]
    pub fn include_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }

    /// Adds `-D<name>` or `-D<name>=<value>`.
    #[must_use]
    pub fn define(mut self, name: &str, value: Option<&str>) -> Self {
        self.defines
            .push((name.to_owned(), value.map(str::to_owned)));
        self
    }

    /// Adds one argument, verbatim (it is one argv element: spaces stay inside it).
    #[must_use]
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.flags.push(flag.into());
        self
    }

    /// Sets `-ccbin`.
    #[must_use]
    pub fn ccbin(mut self, path: impl Into<PathBuf>) -> Self {
        self.ccbin = Some(path.into());
        self
    }

    /// Sets `-std=<std>`.
    #[must_use]
    pub fn std(mut self, std: &str) -> Self {
        self.std = Some(std.to_owned());
        self
    }

    /// Sets the compiler's working directory.
    #[must_use]
    pub fn working_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Asks for a trace of every path the compile looks up (see [`crate::CompileOutput::trace`]).
    #[must_use]
    pub fn trace(mut self, trace: bool) -> Self {
        self.trace = trace;
        self
    }

    /// Adds an environment variable for the compiler.
    #[must_use]
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The arguments (without the program) that compile this job and write its dependency file
    /// to `depfile`:
    ///
    /// `<kind flag> [targets] [-std=] [-ccbin] [-I...] [-D...] [flags...] <depfile request> -o <output> <source>`
    ///
    /// (see the private `depfile_args` for how the dependency file is requested).
    ///
    /// A shared library also gets `-Xcompiler=-fPIC`. Every element is passed as one argv entry, no
    /// shell is involved. `nvcc` is accepted for symmetry with future version-dependent flags.
    pub fn argv(&self, nvcc: &Nvcc, depfile: &Path) -> Vec<OsString> {
        let _ = nvcc;
        let mut args: Vec<OsString> = Vec::with_capacity(12 + self.flags.len());
        args.push(self.kind.flag().into());
        if self.kind == OutputKind::SharedLibrary {
            args.push("-Xcompiler=-fPIC".into());
        }
        for target in &self.targets {
            args.push(match target {
                Target::Arch(arch) => format!("-arch={arch}").into(),
                Target::Gencode { arch, code } => {
                    format!("-gencode=arch={arch},code={code}").into()
                }
            });
        }
        if let Some(std) = &self.std {
            args.push(format!("-std={std}").into());
        }
        if let Some(ccbin) = &self.ccbin {
            args.push("-ccbin".into());
            args.push(ccbin.into());
        }
        for dir in &self.include_dirs {
            let mut arg = OsString::from("-I");
            arg.push(dir);
            args.push(arg);
        }
        for (name, value) in &self.defines {
            args.push(match value {
                Some(value) => format!("-D{name}={value}").into(),
                None => format!("-D{name}").into(),
            });
        }
        args.extend(self.flags.iter().map(OsString::from));
        args.extend(self.depfile_args(depfile));
        args.push("-o".into());
        args.push(self.output.as_os_str().to_owned());
        args.push(dash_safe(&self.source));
        args
    }
}

impl CompileJob {
    /// How the dependency file is requested.
    ///
    /// nvcc's own `-MD` runs an extra preprocessing pass (about +25% on a small kernel). A cubin or
    /// PTX for one arch has exactly one device preprocessing pass, so there the host compiler's
    /// `-MD -MF` is passed to that pass (`-Xcompiler=-MD,-MF,<depfile>`) and the dependencies cost
    /// nothing extra. They are then the headers of the device pass for that arch, which are all the
    /// headers that can change the output. Several targets (a fatbin), objects and shared libraries
    /// use nvcc's `-MD`, whose depfile covers every pass; so does a depfile path with a comma,
    /// which `-Xcompiler` would split.
    fn depfile_args(&self, depfile: &Path) -> Vec<OsString> {
        // Only a job that names its one target itself is known to have one device pass; targets
        // given in the flags (or nvcc's default) get nvcc's own `-MD`, which covers every pass.
        let single_device_pass =
            matches!(self.kind, OutputKind::Cubin | OutputKind::Ptx) && self.targets.len() == 1;
        match depfile.to_str() {
            Some(path) if single_device_pass && !path.contains(',') => {
                vec![format!("-Xcompiler=-MD,-MF,{path}").into()]
            }
            _ => vec!["-MD".into(), "-MF".into(), depfile.into()],
        }
    }
}

/// The dependency file an argv requests, in either form `CompileJob::argv` writes (`-MF <path>`
/// or `-Xcompiler=-MD,-MF,<path>`): for fake compilers, which must write it.
pub fn requested_depfile(args: &[OsString]) -> Option<std::path::PathBuf> {
    let mut previous: Option<&OsString> = None;
    for arg in args {
        if previous.is_some_and(|p| p == "-MF") {
            return Some(arg.into());
        }
        if let Some(path) = arg
            .to_str()
            .and_then(|a| a.strip_prefix("-Xcompiler=-MD,-MF,"))
        {
            return Some(path.into());
        }
        previous = Some(arg);
    }
    None
}

/// A path that starts with `-` would be read as a flag; `./` keeps it a file name.
fn dash_safe(path: &Path) -> OsString {
    if path.as_os_str().to_string_lossy().starts_with('-') {
        Path::new(".").join(path).into_os_string()
    } else {
        path.as_os_str().to_owned()
    }
}

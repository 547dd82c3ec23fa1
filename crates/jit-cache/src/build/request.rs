//! A request, resolved once when it is made: the working directory, the command nvcc will run
//! (spelled as the caller spelled it), and the compiler's search path read out of the flags and
//! the environment by nvcc's own tokenizer (`nvcc::cmdline`, which the launcher uses too).
//!
//! Everything later (the key, the memo, the single flight, the compile and the records) uses the
//! resolved request, so a `chdir` between two requests, or during one, cannot mix two trees.
//!
//! The cache never guesses what a command means. Every argument is read by an option table: nvcc's
//! (`nvcc::options`) and, for what reaches the host compiler (`-Xcompiler`, response files, options
//! nvcc forwards), GCC's (`nvcc::host_options`). An argument neither table knows, or one that
//! changes what is read or written in ways the include model does not follow (`-nostdinc`,
//! `--sysroot`, `-B`, `-save-temps`, `-march=native`, `-arch=native`, ...), refuses the request
//! with the option named ([`Error::InvalidSpec`]); the launcher then runs nvcc unchanged.
//!
//! nvcc is given the source and every directory as the caller spelled them and runs in the
//! request's working directory, as the caller's own nvcc would: `__FILE__`, `assert` and debug
//! information then name what they would name, and the key holds those spellings (never the
//! absolute paths they resolve to, unless spelled so), and the working directory when debug
//! information is asked for.

use crate::build::spec::{KernelSpec, Source};
use crate::error::{Error, Result};
use nvcc::cmdline::{self, HostArg, Item, Sources};
use nvcc::host_options::{HostRole, SearchList};
use nvcc::options::Role;
use std::path::{Path, PathBuf};

/// What a search directory is when the compiler starts: GCC looks at each one, drops those that
/// are missing or not directories, and drops a directory that is another one of the chain (by
/// device and inode), so what is there decides the search order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DirState {
    /// Absent (or unreadable): GCC drops it.
    Missing,
    /// Not a directory: GCC drops it with a warning.
    NotDir,
    /// A directory, by identity.
    Dir { dev: u64, ino: u64 },
}

impl DirState {
    /// Looks at `path` as GCC's `remove_duplicates` does (`stat`, following links).
    pub(crate) fn of(path: &Path) -> DirState {
        match rustix::fs::stat(path) {
            Err(_) => DirState::Missing,
            Ok(st)
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::Directory =>
            {
                DirState::Dir {
                    dev: st.st_dev,
                    ino: st.st_ino,
                }
            }
            Ok(_) => DirState::NotDir,
        }
    }
}

/// One directory of a search list: as spelled (what the compiler gets and names files by) and
/// resolved against the request's working directory (what this process looks at).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SearchDir {
    pub(crate) spelled: PathBuf,
    pub(crate) path: PathBuf,
    pub(crate) state: DirState,
}

impl SearchDir {
    fn new(spelled: impl Into<PathBuf>, working_dir: &Path) -> SearchDir {
        let spelled = spelled.into();
        let path = absolute(working_dir, &spelled);
        let state = DirState::of(&path);
        SearchDir {
            spelled,
            path,
            state,
        }
    }
}

/// The caller's part of the search path, in the compiler's order, before the toolchain's
/// directories are known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct UserSearch {
    /// `-iquote` (the host compiler's).
    pub(crate) quote: Vec<SearchDir>,
    /// `-I`: the host compiler's, then nvcc's (prepended flags, the spec's directories, the flags,
    /// appended flags), then `CPATH` (which GCC puts after the toolkit's `-I`).
    pub(crate) bracket: Vec<SearchDir>,
    /// How many of `bracket` come from the command line (the rest are `CPATH`'s).
    pub(crate) bracket_command: usize,
    /// `-isystem`: the host compiler's, then nvcc's, then `CPLUS_INCLUDE_PATH` (after the
    /// toolkit's `-isystem`).
    pub(crate) system: Vec<SearchDir>,
    /// How many of `system` come from the command line.
    pub(crate) system_command: usize,
    /// `-idirafter` (the host compiler's): after the built-in directories.
    pub(crate) after: Vec<SearchDir>,
    /// `-imacros` files, as spelled.
    pub(crate) imacros: Vec<PathBuf>,
    /// `-include` files given to the host compiler, as spelled (before nvcc's own
    /// `cuda_runtime.h`).
    pub(crate) host_include: Vec<PathBuf>,
    /// nvcc's `-include` files, as spelled (after `cuda_runtime.h`).
    pub(crate) include: Vec<PathBuf>,
}

/// A spec resolved against the working directory at the moment of the request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Request {
    pub(crate) spec: KernelSpec,
    pub(crate) working_dir: PathBuf,
    /// The source as nvcc is given it (file sources): the spec's path as spelled.
    pub(crate) source_spelled: Option<PathBuf>,
    /// The absolute source path (file sources).
    pub(crate) source_path: Option<PathBuf>,
    /// The spec's directories and flags as nvcc gets them: tokenized and rendered canonically,
    /// every path as spelled (the environment's flags stay in the environment, where nvcc reads
    /// them).
    pub(crate) nvcc_flags: Vec<String>,
    /// What the key gets of the flags: the same rendering.
    pub(crate) key_flags: Vec<String>,
    pub(crate) search: UserSearch,
    /// The host compiler named in the flags (`-ccbin`) or by `NVCC_CCBIN`.
    pub(crate) ccbin: Option<PathBuf>,
    /// Whether the command asks for debug information (in any spelling: `-G`, `-g`, `-lineinfo`,
    /// `-Xptxas -g`, `-Xcompiler -g3`, `-Xcompiler -gdwarf-4`, ...), which names the working
    /// directory.
    pub(crate) debug: bool,
    /// Every nvcc option the command uses (the environment's flags included), for the check
    /// against the release that will run it (`nvcc::release`).
    /// Each by its short name (the table's key).
    pub(crate) options: Vec<&'static str>,
}

impl Request {
    /// The file name the compile must write its artifact under, where the artifact records it:
    /// a cubin with device debug information holds ptxas's command line, `-o`'s file name
    /// included (`-G`, `-Xptxas -g`; any debug spelling counts, as for the path). The name then
    /// enters the key. `None`: the cache's own name, which nothing of the output names.
    pub(crate) fn embedded_output_name(&self) -> Option<&str> {
        if self.debug && self.spec.kind == nvcc::OutputKind::Cubin {
            self.spec.output_name.as_deref()
        } else {
            None
        }
    }

    /// The source as the include model reads it.
    pub(crate) fn source_ref(&self) -> SourceRef<'_> {
        match (&self.spec.source, &self.source_path) {
            (Source::File(_), Some(path)) => SourceRef::File(path),
            (Source::Text { text, .. }, _) => SourceRef::Text(text.as_bytes()),
            (Source::File(path), None) => SourceRef::File(path),
        }
    }
}

fn absolute(working_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else if p.as_os_str().is_empty() {
        working_dir.to_path_buf()
    } else {
        working_dir.join(p)
    }
}

/// nvcc options whose presence asks for debug information.
const DEBUG_OPTIONS: &[&str] = &["-G", "-g", "-lineinfo", "-src-in-ptx"];

/// Words inside `-Xptxas`/`-Xnvlink` values that ask for debug information.
const DEBUG_WORDS: &[&str] = &[
    "-g",
    "--device-debug",
    "-lineinfo",
    "--generate-line-info",
    "-G",
];

/// nvcc options whose value names code-generation targets: `native` there depends on this host.
const TARGET_OPTIONS: &[&str] = &["-arch", "-code", "-gencode"];

impl Request {
    /// Resolves `spec` against the current directory and the current environment.
    pub(crate) fn resolve(spec: &KernelSpec) -> Result<Request> {
        let working_dir =
            std::env::current_dir().map_err(|e| Error::io("read the current directory", ".", e))?;
        Request::resolve_in(spec, &working_dir, &|var| std::env::var_os(var))
    }

    pub(crate) fn resolve_in(
        spec: &KernelSpec,
        working_dir: &Path,
        env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Request> {
        spec.validate()?;
        let invalid = |reason: String| Error::InvalidSpec {
            name: spec.name.clone(),
            reason,
        };
        let env_text = |var: &str| -> Result<Option<String>> {
            match env(var) {
                None => Ok(None),
                Some(v) => v
                    .into_string()
                    .map(Some)
                    .map_err(|_| invalid(format!("{var} is not UTF-8"))),
            }
        };
        let mut tokens: Vec<String> = Vec::with_capacity(spec.include_dirs.len() * 2 + 8);
        for dir in &spec.include_dirs {
            let text = dir.to_str().ok_or_else(|| {
                invalid(format!("include directory {} is not UTF-8", dir.display()))
            })?;
            if text.contains(',') {
                return Err(invalid(format!(
                    "include directory {text} contains a comma, which nvcc splits on"
                )));
            }
            tokens.push("-I".into());
            tokens.push(text.to_string());
        }
        tokens.extend(spec.flags.iter().cloned());
        let read_file =
            |name: &str| std::fs::read_to_string(absolute(working_dir, Path::new(name)));
        // The command's own arguments, for nvcc's argv and the key; then with the environment's
        // flags around them, as nvcc reads them, for the search path.
        let own = cmdline::parse(
            &tokens,
            &Sources {
                prepend: None,
                append: None,
                read_file: &read_file,
            },
        )
        .map_err(|e| invalid(e.to_string()))?;
        // Variables that make the host compiler run other programs (which nobody hashes) or write
        // a dependency file of its own.
        for var in [
            "GCC_EXEC_PREFIX",
            "COMPILER_PATH",
            "DEPENDENCIES_OUTPUT",
            "SUNPRO_DEPENDENCIES",
        ] {
            if env(var).is_some_and(|v| !v.is_empty()) {
                return Err(invalid(format!(
                    "{var} is set: the host compiler would run or write what the cache cannot see"
                )));
            }
        }
        let prepend = env_text("NVCC_PREPEND_FLAGS")?;
        let append = env_text("NVCC_APPEND_FLAGS")?;
        let whole = if prepend.is_some() || append.is_some() {
            cmdline::parse(
                &tokens,
                &Sources {
                    prepend: prepend.as_deref(),
                    append: append.as_deref(),
                    read_file: &read_file,
                },
            )
            .map_err(|e| invalid(e.to_string()))?
        } else {
            own.clone()
        };
        let mut search = UserSearch::default();
        let mut ccbin = None;
        let mut debug = false;
        let mut options: Vec<&'static str> = Vec::new();
        for item in &whole.items {
            if let Item::Opt(arg) = item {
                if !options.contains(&arg.opt.short) {
                    options.push(arg.opt.short);
                }
            }
            let arg = match item {
                Item::Input(input) => {
                    return Err(invalid(format!(
                        "`{input}` is not an option: the spec names its source"
                    )))
                }
                Item::Opt(arg) => arg,
            };
            let value = arg.value.clone().unwrap_or_default();
            let name = arg.opt.long_or_short();
            match arg.opt.role {
                Role::Search => match arg.opt.short {
                    "-I" => search.bracket.push(SearchDir::new(&value, working_dir)),
                    "-isystem" => search.system.push(SearchDir::new(&value, working_dir)),
                    "-include" => search.include.push(PathBuf::from(&value)),
                    "-ccbin" => ccbin = Some(PathBuf::from(&value)),
                    // `-Xcompiler` items are in `whole.host`.
                    _ => {}
                },
                Role::Keyed => {
                    if DEBUG_OPTIONS.contains(&arg.opt.short) {
                        debug = true;
                    }
                    if matches!(arg.opt.short, "-Xptxas" | "-Xnvlink")
                        && value.split(',').any(|w| DEBUG_WORDS.contains(&w))
                    {
                        debug = true;
                    }
                    if TARGET_OPTIONS.contains(&arg.opt.short) && value.contains("native") {
                        return Err(invalid(format!(
                            "`{name}={value}` depends on this host's GPUs: not cached"
                        )));
                    }
                }
                Role::Mode(_) | Role::DeviceC => {
                    return Err(invalid(format!(
                        "flag `{name}` is not accepted: the spec's kind chooses the output"
                    )))
                }
                Role::Output => {
                    return Err(invalid(format!(
                        "flag `{name}` is not accepted: the cache chooses the output file"
                    )))
                }
                Role::DepAll
                | Role::DepNonSystem
                | Role::DepFile
                | Role::DepTarget
                | Role::DepPhony => {
                    return Err(invalid(format!(
                        "flag `{name}` is not accepted: dependency output is the cache's own"
                    )))
                }
                Role::OptionsFile => {}
                Role::NotCached => {
                    return Err(invalid(format!(
                        "flag `{name}` is not accepted: nvcc does something other than one \
                         compile the cache can see"
                    )))
                }
            }
        }
        let (host_quote, host_bracket, host_system, host_after) =
            host_search(&whole.host, working_dir, &mut search, &mut debug);
        // The host compiler's own directories come first on its command line.
        let nvcc_bracket = std::mem::take(&mut search.bracket);
        let nvcc_system = std::mem::take(&mut search.system);
        search.quote = host_quote;
        search.bracket = host_bracket.into_iter().chain(nvcc_bracket).collect();
        search.bracket_command = search.bracket.len();
        search
            .bracket
            .extend(path_list(env_text("CPATH")?, working_dir));
        search.system = host_system.into_iter().chain(nvcc_system).collect();
        search.system_command = search.system.len();
        search
            .system
            .extend(path_list(env_text("CPLUS_INCLUDE_PATH")?, working_dir));
        search.after = host_after;
        let rendered = own.render_options();
        // The host compiler enters the key by its identity (content and `--version`), never by
        // the path it is run by, which nothing it writes names.
        let mut keyed = own.clone();
        for item in &mut keyed.items {
            if let Item::Opt(arg) = item {
                if arg.opt.short == "-ccbin" {
                    arg.value = Some("<host compiler>".into());
                }
            }
        }
        let (source_spelled, source_path) = match &spec.source {
            Source::File(path) => (Some(path.clone()), Some(absolute(working_dir, path))),
            Source::Text { .. } => (None, None),
        };
        if let Some(spelled) = &source_spelled {
            let text = spelled.to_string_lossy();
            if text.contains(['$', '`', '"', '\\']) {
                return Err(invalid(format!(
                    "source path {text} has characters nvcc's shell would interpret"
                )));
            }
        }
        Ok(Request {
            spec: spec.clone(),
            working_dir: working_dir.to_path_buf(),
            source_spelled,
            source_path,
            key_flags: keyed.render_options(),
            nvcc_flags: rendered,
            search,
            ccbin: ccbin.or_else(|| {
                env("NVCC_CCBIN")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            }),
            debug,
            options,
        })
    }
}

/// The host compiler's search options, by list, and its forced files (into `search`).
fn host_search(
    host: &[HostArg],
    working_dir: &Path,
    search: &mut UserSearch,
    debug: &mut bool,
) -> (
    Vec<SearchDir>,
    Vec<SearchDir>,
    Vec<SearchDir>,
    Vec<SearchDir>,
) {
    let (mut quote, mut bracket, mut system, mut after) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for arg in host {
        let value = arg.value.clone().unwrap_or_default();
        match arg.opt.role {
            HostRole::Search(SearchList::Quote) => quote.push(SearchDir::new(&value, working_dir)),
            HostRole::Search(SearchList::Bracket) => {
                bracket.push(SearchDir::new(&value, working_dir))
            }
            HostRole::Search(SearchList::System) => {
                system.push(SearchDir::new(&value, working_dir))
            }
            HostRole::Search(SearchList::After) => after.push(SearchDir::new(&value, working_dir)),
            HostRole::Search(SearchList::Include) => search.host_include.push(value.into()),
            HostRole::Search(SearchList::Imacros) => search.imacros.push(value.into()),
            HostRole::Debug => *debug = true,
            HostRole::Define | HostRole::Undefine | HostRole::Keyed | HostRole::Refused(_) => {}
        }
    }
    (quote, bracket, system, after)
}

/// A colon-separated list of directories, as GCC reads `CPATH` (an empty element is `.`).
fn path_list(value: Option<String>, working_dir: &Path) -> Vec<SearchDir> {
    let Some(value) = value else {
        return Vec::new();
    };
    value
        .split(':')
        .map(|p| SearchDir::new(if p.is_empty() { "." } else { p }, working_dir))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(flags: &[&str], env: &[(&str, &str)]) -> Result<Request> {
        let mut spec = KernelSpec::from_file("src/k.cu").include_dir("inc");
        for f in flags {
            spec = spec.flag(*f);
        }
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Request::resolve_in(&spec, Path::new("/w"), &move |var| {
            env.iter().find(|(k, _)| k == var).map(|(_, v)| v.into())
        })
    }

    fn spelled(list: &[SearchDir]) -> Vec<String> {
        list.iter()
            .map(|d| d.spelled.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn every_spelling_of_a_search_flag_enters_the_search_path_in_gcc_order() {
        let r = resolve(
            &[
                "-Ia",
                "-I",
                "b,c",
                "--include-path=d",
                "--include-path",
                "/abs/e",
                "-isystem",
                "s1",
                "--system-include=s2",
                "-Xcompiler=-iquote,q1,-Ih1",
                "--compiler-options",
                "-isystemhs,--include-directory=h2,--include-directory-after=late",
                "-include",
                "pre.h",
                "--pre-include=/abs/pre2.h",
                "-ccbin",
                "/opt/gcc/bin/g++",
            ],
            &[
                ("NVCC_PREPEND_FLAGS", "-Ipre"),
                ("NVCC_APPEND_FLAGS", "-Ipost -Xcompiler -Ihpost"),
                ("CPATH", "cp1:"),
                ("CPLUS_INCLUDE_PATH", "/cpp"),
            ],
        )
        .expect("resolves");
        assert_eq!(
            spelled(&r.search.bracket),
            ["h1", "h2", "hpost", "pre", "inc", "a", "b", "c", "d", "/abs/e", "post", "cp1", "."],
            "host -I first, then nvcc's in order, then CPATH (an empty element is `.`)"
        );
        assert_eq!(r.search.bracket_command, 11);
        assert_eq!(spelled(&r.search.system), ["hs", "s1", "s2", "/cpp"]);
        assert_eq!(spelled(&r.search.quote), ["q1"]);
        assert_eq!(spelled(&r.search.after), ["late"]);
        assert_eq!(
            r.search.include,
            [PathBuf::from("pre.h"), "/abs/pre2.h".into()]
        );
        assert_eq!(r.ccbin, Some(PathBuf::from("/opt/gcc/bin/g++")));
        assert_eq!(r.search.bracket[3].path, PathBuf::from("/w/pre"));
        assert!(
            r.nvcc_flags.contains(&"-Ia".to_string())
                && !r.nvcc_flags.iter().any(|f| f.contains("/w")),
            "nvcc gets the directories as spelled: {:?}",
            r.nvcc_flags
        );
        assert!(
            !r.nvcc_flags
                .iter()
                .any(|f| f.contains("pre") && f.starts_with("-Ipre")),
            "the environment's flags stay in the environment: {:?}",
            r.nvcc_flags
        );
    }

    #[test]
    fn flags_the_cache_cannot_follow_are_refused_with_the_reason() {
        for bad in [
            &["-MD"][..],
            &["-o", "x"],
            &["-Xcompiler", "-nostdinc"],
            &["-Xcompiler", "--sysroot=/x"],
            &["-Xcompiler", "-B/x"],
            &["-Xcompiler", "-I-"],
            &["-Xcompiler", "-MD"],
            &["-Xcompiler", "-march=native"],
            &["-arch=native"],
            &["--gpu-architecture", "native"],
            &["-Xcompiler", "--no-such-gcc-option"],
            &["--no-such-nvcc-option"],
            &["-keep"],
            &["-DX=$(id)"],
        ] {
            let err = resolve(bad, &[]).expect_err(&format!("{bad:?} must be refused"));
            assert!(matches!(err, Error::InvalidSpec { .. }), "{bad:?}: {err}");
        }
        let err = resolve(&[], &[("NVCC_APPEND_FLAGS", "-Xcompiler -nostdinc")])
            .expect_err("refused in the environment too");
        assert!(err.to_string().contains("NVCC_APPEND_FLAGS"), "{err}");
    }

    #[test]
    fn debug_information_in_any_spelling_is_seen() {
        for flags in [
            &["-G"][..],
            &["--device-debug"],
            &["-lineinfo"],
            &["-Xcompiler", "-g3"],
            &["-Xcompiler=-gdwarf-4"],
            &["-Xcompiler", "-O2,-g"],
            &["-Xptxas", "-g"],
        ] {
            assert!(resolve(flags, &[]).expect("resolves").debug, "{flags:?}");
        }
        assert!(
            resolve(&[], &[("NVCC_APPEND_FLAGS", "-G")])
                .expect("resolves")
                .debug,
            "from the environment too"
        );
        assert!(!resolve(&["-O3"], &[]).expect("resolves").debug);
    }

    #[test]
    fn an_option_without_a_value_never_swallows_the_next_search_flag() {
        let r = resolve(&["-Wno-deprecated-gpu-targets", "-I", "x"], &[]).expect("resolves");
        assert_eq!(spelled(&r.search.bracket), ["inc", "x"]);
        let r = resolve(&["-ftz", "true", "-I", "y"], &[]).expect("resolves");
        assert_eq!(spelled(&r.search.bracket), ["inc", "y"]);
    }

    #[test]
    fn a_relative_spec_resolves_against_the_working_directory_of_the_request() {
        let a = resolve(&[], &[]).expect("resolves");
        assert_eq!(a.source_path, Some(PathBuf::from("/w/src/k.cu")));
        assert_eq!(a.source_spelled, Some(PathBuf::from("src/k.cu")));
        let spec = KernelSpec::from_file("src/k.cu").include_dir("inc");
        let b = Request::resolve_in(&spec, Path::new("/elsewhere"), &|_| None).expect("resolves");
        assert_ne!(
            a, b,
            "the same spec in another directory is another request"
        );
        assert_eq!(b.search.bracket[0].path, PathBuf::from("/elsewhere/inc"));
        assert_eq!(a.nvcc_flags, b.nvcc_flags, "spelled the same");
    }

    #[test]
    fn rendering_parses_back_to_the_same_command() {
        let r = resolve(
            &[
                "-DA=1,B=2",
                "-DC=x\\,y",
                "-Xcompiler",
                "-Wl\\,-rpath\\,x,-fPIC",
                "-O3",
                "-arch=sm_90",
            ],
            &[],
        )
        .expect("resolves");
        let again = cmdline::parse(&r.nvcc_flags, &Sources::none()).expect("parses");
        assert_eq!(again.render_options(), r.nvcc_flags);
    }
}

/// The source of a compile, as the include model sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SourceRef<'a> {
    /// A file, by the path the compiler was given.
    File(&'a Path),
    /// Text compiled from a private copy (its directory holds nothing else).
    Text(&'a [u8]),
}

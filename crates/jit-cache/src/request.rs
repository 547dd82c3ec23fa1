//! A request, resolved once when it is made: the working directory, every path made absolute
//! against it, and the compiler's search path parsed out of the flags and the environment.
//!
//! Everything later (the key, the memo, the single flight, the compile and the records) uses the
//! resolved request, so a `chdir` between two requests, or during one, cannot mix two trees.
//!
//! Search-path flags are understood in every form nvcc accepts: `-I dir`, `-Idir`,
//! `--include-path[=]dir`, `-isystem`, `--system-include`, `-include`, `--pre-include` (each a
//! comma-separated list, as nvcc reads them), the host compiler's `-I`, `-iquote` and `-isystem`
//! passed through `-Xcompiler`/`--compiler-options`, the same in `NVCC_PREPEND_FLAGS` and
//! `NVCC_APPEND_FLAGS`, and `CPATH`/`CPLUS_INCLUDE_PATH`. `-ccbin`/`--compiler-bindir` names the host
//! compiler, whose identity enters the key. Flags that would change the search in ways the model
//! does not follow (`-idirafter`, `-nostdinc`, `--sysroot`, `-I-`, ...) or that fight the cache's
//! own use of the compiler (`-M*`, `-o`, `--options-file`) are refused with the reason.

use crate::error::{Error, Result};
use crate::spec::{KernelSpec, Source};
use std::path::{Path, PathBuf};

/// The search-path part of a request, before the toolchain's directories are known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct UserSearch {
    pub(crate) quote: Vec<PathBuf>,
    pub(crate) include: Vec<PathBuf>,
    pub(crate) system: Vec<PathBuf>,
    pub(crate) forced: Vec<PathBuf>,
}

/// A spec resolved against the working directory at the moment of the request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Request {
    pub(crate) spec: KernelSpec,
    pub(crate) working_dir: PathBuf,
    /// The absolute source path (file sources).
    pub(crate) source_path: Option<PathBuf>,
    /// `spec.include_dirs`, absolute.
    pub(crate) include_dirs: Vec<PathBuf>,
    /// `spec.flags` with the directories of search-path flags made absolute: what nvcc gets.
    pub(crate) flags: Vec<String>,
    /// `spec.flags` with every path replaced by its place in the search path: what the key gets
    /// (paths never enter a key; the headers found there enter the variant).
    pub(crate) key_flags: Vec<String>,
    pub(crate) search: UserSearch,
    /// The host compiler named in the flags.
    pub(crate) ccbin: Option<PathBuf>,
}

impl Request {
    /// The source as the include model reads it.
    pub(crate) fn source_ref(&self) -> crate::inputs::SourceRef<'_> {
        match (&self.spec.source, &self.source_path) {
            (Source::File(_), Some(path)) => crate::inputs::SourceRef::File(path),
            (Source::Text { text, .. }, _) => crate::inputs::SourceRef::Text(text.as_bytes()),
            (Source::File(path), None) => crate::inputs::SourceRef::File(path),
        }
    }
}

/// Where a flag came from, for its place in the search order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Prepended,
    Spec,
    Appended,
}

/// Search-path entries in the order they were parsed, with what decides their final order.
#[derive(Default)]
struct Found {
    /// (host compiler's, origin, dir)
    include: Vec<(bool, Origin, PathBuf)>,
    system: Vec<(bool, Origin, PathBuf)>,
    quote: Vec<PathBuf>,
    forced: Vec<PathBuf>,
    ccbin: Option<PathBuf>,
}

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
        let absolute = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                working_dir.join(p)
            }
        };
        let invalid = |reason: String| Error::InvalidSpec {
            name: spec.name.clone(),
            reason,
        };
        let mut found = Found::default();
        for (var, origin) in [
            ("NVCC_PREPEND_FLAGS", Origin::Prepended),
            ("NVCC_APPEND_FLAGS", Origin::Appended),
        ] {
            if let Some(value) = env(var) {
                let value = value.to_string_lossy().into_owned();
                let args: Vec<String> = value.split_whitespace().map(str::to_string).collect();
                parse(&args, origin, working_dir, &mut found, &mut Vec::new())
                    .map_err(|e| invalid(format!("in {var}: {e}")))?;
            }
        }
        let mut key_flags = Vec::with_capacity(spec.flags.len());
        let flags = parse(
            &spec.flags,
            Origin::Spec,
            working_dir,
            &mut found,
            &mut key_flags,
        )
        .map_err(invalid)?;
        let include_dirs: Vec<PathBuf> = spec.include_dirs.iter().map(|d| absolute(d)).collect();
        for dir in &include_dirs {
            if dir.as_os_str().to_string_lossy().contains(',') {
                return Err(invalid(format!(
                    "include directory {} contains a comma, which nvcc splits on",
                    dir.display()
                )));
            }
        }
        // GCC's order: the host compiler's own `-I`s (from -Xcompiler) come first on its command
        // line, then nvcc's in order (prepended flags, the spec's directories, the flags,
        // appended flags), then CPATH.
        let order = |entries: &[(bool, Origin, PathBuf)], spec_dirs: &[PathBuf]| {
            let mut out: Vec<PathBuf> = Vec::new();
            for host in [true, false] {
                for origin in [Origin::Prepended, Origin::Spec, Origin::Appended] {
                    if !host && origin == Origin::Spec {
                        out.extend(spec_dirs.iter().cloned());
                    }
                    out.extend(
                        entries
                            .iter()
                            .filter(|(h, o, _)| *h == host && *o == origin)
                            .map(|(_, _, d)| d.clone()),
                    );
                }
            }
            out
        };
        let mut include = order(&found.include, &include_dirs);
        include.extend(path_list(env("CPATH"), working_dir));
        let mut system = order(&found.system, &[]);
        system.extend(path_list(env("CPLUS_INCLUDE_PATH"), working_dir));
        let source_path = match &spec.source {
            Source::File(path) => Some(absolute(path)),
            Source::Text { .. } => None,
        };
        Ok(Request {
            spec: spec.clone(),
            working_dir: working_dir.to_path_buf(),
            source_path,
            include_dirs,
            flags,
            key_flags,
            search: UserSearch {
                quote: found.quote,
                include,
                system,
                forced: found.forced,
            },
            ccbin: found.ccbin.or_else(|| {
                env("NVCC_CCBIN")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            }),
        })
    }
}

/// A colon-separated list of directories (an empty element is the working directory).
fn path_list(value: Option<std::ffi::OsString>, working_dir: &Path) -> Vec<PathBuf> {
    let Some(value) = value else {
        return Vec::new();
    };
    std::env::split_paths(&value)
        .map(|p| {
            if p.as_os_str().is_empty() {
                working_dir.to_path_buf()
            } else if p.is_absolute() {
                p
            } else {
                working_dir.join(p)
            }
        })
        .collect()
}

/// Whether `arg`, spelled alone, is an nvcc option whose value is the next argument: nvcc's own
/// table (`nvcc::options`, which the launcher parses by too). A value is then never read as an
/// option, and an option that takes none never swallows the search flag after it.
fn takes_next_value(arg: &str) -> bool {
    nvcc::options::find(arg).is_some_and(|o| o.value)
}

/// Options refused because they fight the cache's own use of the compiler.
const REFUSED: &[(&str, &str)] = &[
    ("-M", "dependency output is the cache's own"),
    (
        "--generate-dependencies",
        "dependency output is the cache's own",
    ),
    (
        "--generate-nonsystem-dependencies",
        "dependency output is the cache's own",
    ),
    (
        "--dependency-output",
        "dependency output is the cache's own",
    ),
    ("-o", "the cache chooses the output file"),
    ("--output-file", "the cache chooses the output file"),
    ("-odir", "the cache chooses the output file"),
    ("--output-directory", "the cache chooses the output file"),
    ("-E", "the cache compiles; it does not preprocess"),
    ("--preprocess", "the cache compiles; it does not preprocess"),
    ("-optf", "flags must be visible to the key"),
    ("--options-file", "flags must be visible to the key"),
    ("-keep", "the cache owns the compile's files"),
    ("--keep", "the cache owns the compile's files"),
    ("--keep-dir", "the cache owns the compile's files"),
    ("-save-temps", "the cache owns the compile's files"),
    ("--save-temps", "the cache owns the compile's files"),
    ("-dryrun", "the cache needs a real compile"),
    ("--dryrun", "the cache needs a real compile"),
];

/// Host compiler options that change the search in ways the include model does not follow.
const HOST_REFUSED: &[&str] = &[
    "-idirafter",
    "-imacros",
    "-iprefix",
    "-iwithprefix",
    "-iwithprefixbefore",
    "-isysroot",
    "--sysroot",
    "-imultilib",
    "-nostdinc",
    "-nostdinc++",
    "-I-",
    "-include",
    "-B",
    "-M",
    "-E",
    "-H",
    "-save-temps",
];

/// Splits `-X=value` / `-Xvalue` / `-X value` for an option `name`: Some(value) when `arg` is
/// that option (the value possibly in the next argument).
fn option_value<'a>(
    arg: &'a str,
    name: &str,
    joined_ok: bool,
    next: &mut dyn FnMut() -> Option<&'a str>,
) -> Option<std::result::Result<&'a str, String>> {
    if arg == name {
        return Some(next().ok_or_else(|| format!("`{name}` needs a value")));
    }
    let rest = arg.strip_prefix(name)?;
    if let Some(value) = rest.strip_prefix('=') {
        return Some(Ok(value));
    }
    (joined_ok && !rest.is_empty()).then_some(Ok(rest))
}

/// Parses `args` (the spec's flags, or a `NVCC_*_FLAGS` variable): records search-path entries
/// in `found` and returns the flags for nvcc (directories absolute); pushes the key's form of
/// each flag onto `key_flags`.
fn parse(
    args: &[String],
    origin: Origin,
    working_dir: &Path,
    found: &mut Found,
    key_flags: &mut Vec<String>,
) -> std::result::Result<Vec<String>, String> {
    let absolute = |dir: &str| -> PathBuf {
        let p = Path::new(dir);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            working_dir.join(p)
        }
    };
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let mut next = || {
            let value = args.get(i).map(String::as_str);
            i += 1;
            value
        };
        for (name, why) in REFUSED {
            let exact = arg == *name || arg.starts_with(&format!("{name}="));
            let dep = *name == "-M" && arg.starts_with("-M");
            if exact || dep {
                return Err(format!("flag `{arg}` is not accepted: {why}"));
            }
        }
        if arg == "-I-" {
            return Err("flag `-I-` is not accepted: it changes the include search".into());
        }
        // nvcc's search-path options; each value is a comma-separated list.
        let nvcc_lists: [(&str, bool, u8); 6] = [
            ("--include-path", false, b'I'),
            ("-I", true, b'I'),
            ("--system-include", false, b'S'),
            ("-isystem", true, b'S'),
            ("--pre-include", false, b'F'),
            ("-include", true, b'F'),
        ];
        let mut handled = false;
        for (name, joined, what) in nvcc_lists {
            let Some(value) = option_value(arg, name, joined, &mut next) else {
                continue;
            };
            let value = value?;
            let mut absolute_values = Vec::new();
            for item in value.split(',').filter(|v| !v.is_empty()) {
                match what {
                    b'I' => {
                        let dir = absolute(item);
                        key_flags.push(format!("-I<dir {}>", found.include.len()));
                        absolute_values.push(dir.to_string_lossy().into_owned());
                        found.include.push((false, origin, dir));
                    }
                    b'S' => {
                        let dir = absolute(item);
                        key_flags.push(format!("-isystem<dir {}>", found.system.len()));
                        absolute_values.push(dir.to_string_lossy().into_owned());
                        found.system.push((false, origin, dir));
                    }
                    _ => {
                        // A forced include is searched in the working directory, then like
                        // `#include "x"`: its name is kept as given.
                        key_flags.push(format!("-include<file {}>", found.forced.len()));
                        absolute_values.push(item.to_string());
                        found.forced.push(PathBuf::from(item));
                    }
                }
            }
            let flag = match what {
                b'I' => "-I",
                b'S' => "-isystem",
                _ => "-include",
            };
            for value in absolute_values {
                out.push(flag.to_string());
                out.push(value);
            }
            handled = true;
            break;
        }
        if handled {
            continue;
        }
        for name in ["--compiler-bindir", "-ccbin"] {
            if let Some(value) = option_value(arg, name, false, &mut next) {
                let value = value?;
                found.ccbin = Some(PathBuf::from(value));
                key_flags.push("-ccbin<host compiler>".into());
                out.push("-ccbin".into());
                out.push(value.to_string());
                handled = true;
                break;
            }
        }
        if handled {
            continue;
        }
        for name in ["--compiler-options", "-Xcompiler"] {
            if let Some(value) = option_value(arg, name, false, &mut next) {
                let value = value?;
                let host = parse_host(value, origin, &absolute, found, key_flags)?;
                if !host.is_empty() {
                    out.push(format!("-Xcompiler={}", host.join(",")));
                }
                handled = true;
                break;
            }
        }
        if handled {
            continue;
        }
        out.push(arg.to_string());
        key_flags.push(arg.to_string());
        let takes_value = takes_next_value(arg);
        if takes_value {
            if let Some(value) = next() {
                out.push(value.to_string());
                key_flags.push(value.to_string());
            }
        }
    }
    Ok(out)
}

/// Parses the host compiler arguments of one `-Xcompiler` (comma-separated).
fn parse_host(
    value: &str,
    origin: Origin,
    absolute: &dyn Fn(&str) -> PathBuf,
    found: &mut Found,
    key_flags: &mut Vec<String>,
) -> std::result::Result<Vec<String>, String> {
    let items: Vec<&str> = value.split(',').collect();
    let mut out = Vec::new();
    let mut kept_for_key = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let item = items[i];
        i += 1;
        for refused in HOST_REFUSED {
            if item == *refused || (item.starts_with(refused) && refused.len() > 2) {
                return Err(format!(
                    "host compiler flag `{item}` is not accepted: it changes the include search \
                     in a way the cache does not model (or is the cache's own)"
                ));
            }
        }
        if item.starts_with("-M") {
            return Err(format!(
                "host compiler flag `{item}` is not accepted: dependency output is the cache's own"
            ));
        }
        let mut take = |name: &str| -> Option<std::result::Result<String, String>> {
            if item == name {
                let v = items.get(i).map(|s| s.to_string());
                i += 1;
                return Some(v.ok_or_else(|| format!("host compiler flag `{name}` needs a value")));
            }
            item.strip_prefix(name).map(|v| Ok(v.to_string()))
        };
        if let Some(dir) = take("-iquote") {
            let dir = absolute(&dir?);
            kept_for_key.push(format!("-iquote<dir {}>", found.quote.len()));
            out.push(format!("-iquote{}", dir.display()));
            found.quote.push(dir);
        } else if let Some(dir) = take("-isystem") {
            let dir = absolute(&dir?);
            kept_for_key.push(format!("-isystem<host dir {}>", found.system.len()));
            out.push(format!("-isystem{}", dir.display()));
            found.system.push((true, origin, dir));
        } else if let Some(dir) = take("-I") {
            let dir = absolute(&dir?);
            kept_for_key.push(format!("-I<host dir {}>", found.include.len()));
            out.push(format!("-I{}", dir.display()));
            found.include.push((true, origin, dir));
        } else {
            kept_for_key.push(item.to_string());
            out.push(item.to_string());
        }
    }
    for piece in &out {
        if piece.contains(',') {
            return Err(format!(
                "host compiler path `{piece}` contains a comma, which -Xcompiler splits on"
            ));
        }
    }
    key_flags.push(format!("-Xcompiler={}", kept_for_key.join(",")));
    Ok(out)
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

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
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
                "-isystemhs",
                "-include",
                "pre.h",
                "--pre-include=/abs/pre2.h",
                "-ccbin",
                "/opt/gcc/bin/g++",
            ],
            &[
                ("NVCC_PREPEND_FLAGS", "-Ipre"),
                ("NVCC_APPEND_FLAGS", "-Ipost"),
                ("CPATH", "cp1:"),
                ("CPLUS_INCLUDE_PATH", "/cpp"),
            ],
        )
        .expect("resolves");
        assert_eq!(
            r.search.include,
            paths(&[
                "/w/h1", "/w/pre", "/w/inc", "/w/a", "/w/b", "/w/c", "/w/d", "/abs/e", "/w/post",
                "/w/cp1", "/w"
            ]),
            "host -I first, then nvcc's in order, then CPATH"
        );
        assert_eq!(r.search.system, paths(&["/w/hs", "/w/s1", "/w/s2", "/cpp"]));
        assert_eq!(r.search.quote, paths(&["/w/q1"]));
        assert_eq!(r.search.forced, paths(&["pre.h", "/abs/pre2.h"]));
        assert_eq!(r.ccbin, Some(PathBuf::from("/opt/gcc/bin/g++")));
        assert!(
            r.key_flags
                .iter()
                .all(|f| !f.contains("/w") && !f.contains("/abs") && !f.contains("/opt")),
            "no path enters the key: {:?}",
            r.key_flags
        );
        assert!(
            r.flags.contains(&"/w/a".to_string()),
            "nvcc gets absolute dirs: {:?}",
            r.flags
        );
    }

    #[test]
    fn flags_the_model_cannot_follow_are_refused_with_the_reason() {
        for bad in [
            &["-MD"][..],
            &["-o", "x"],
            &["--options-file", "f"],
            &["-Xcompiler", "-idirafter,x"],
            &["-Xcompiler=-nostdinc"],
            &["-I-"],
            &["-Xcompiler", "-MD"],
        ] {
            let err = resolve(bad, &[]).expect_err(&format!("{bad:?} must be refused"));
            assert!(err.to_string().contains("not accepted"), "{bad:?}: {err}");
        }
        let err = resolve(&[], &[("NVCC_APPEND_FLAGS", "-Xcompiler -nostdinc")])
            .expect_err("refused in the environment too");
        assert!(err.to_string().contains("NVCC_APPEND_FLAGS"), "{err}");
    }

    #[test]
    fn an_option_without_a_value_never_swallows_the_next_search_flag() {
        // `-Wno-deprecated-gpu-targets` takes no value: the `-I` after it is a search flag (read
        // as its value, `x` stayed out of the search path, and a header added there first was
        // never seen).
        let r = resolve(&["-Wno-deprecated-gpu-targets", "-I", "x"], &[]).expect("resolves");
        assert_eq!(r.search.include, paths(&["/w/inc", "/w/x"]));
        let r = resolve(&["-ftz", "true", "-I", "y"], &[]).expect("resolves");
        assert_eq!(
            r.search.include,
            paths(&["/w/inc", "/w/y"]),
            "an option's separate value is still taken as its value"
        );
    }

    #[test]
    fn a_relative_spec_resolves_against_the_working_directory_of_the_request() {
        let a = resolve(&[], &[]).expect("resolves");
        assert_eq!(a.source_path, Some(PathBuf::from("/w/src/k.cu")));
        let spec = KernelSpec::from_file("src/k.cu").include_dir("inc");
        let b = Request::resolve_in(&spec, Path::new("/elsewhere"), &|_| None).expect("resolves");
        assert_ne!(
            a, b,
            "the same spec in another directory is another request"
        );
        assert_eq!(b.include_dirs, paths(&["/elsewhere/inc"]));
    }
}

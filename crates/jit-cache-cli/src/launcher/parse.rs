//! nvcc's command line, read by nvcc's own tokenizer (`nvcc::cmdline`, the one the library's
//! request uses too): what a launcher may cache, and what it must leave to the real compiler.
//!
//! Every option nvcc 13.5 documents (`nvcc --help`) is in nvcc's table (`nvcc::options`), by its
//! short and long name, with whether it takes a value and what it does; what reaches the host
//! compiler is read by GCC's table (`nvcc::host_options`). Values are accepted after `=` or in
//! the next argument, and joined for `-I`, `-D`, `-U`, `-O`, `-L` and `-l` (`-Iinc`, `-O3`), as
//! nvcc reads them. `--options-file` and host response files (`@file`) are expanded in place.
//!
//! A command is cacheable when it compiles one `.cu` source to an object (`-c`, `-dc`), a
//! cubin, a PTX or a fatbin. Anything else (linking, several inputs, `-E`, `-M` alone, `-`,
//! `--keep`, an option either table does not know) is [`Uncacheable`] with the reason, and the
//! launcher runs the real nvcc unchanged: an option not understood is never dropped from a key.

use jit_cache::OutputKind;

use nvcc::cmdline::{self, Arg, CommandLine, Item, Sources};
use nvcc::options::Role;
use Role::*;

/// Why a command line is left to the real compiler: `--foo`, `several sources`, ...
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Uncacheable(pub(crate) String);

/// The dependency file a command asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DepRequest {
    /// `-MD` (every header) rather than `-MMD` (no system headers).
    pub(crate) system_headers: bool,
    /// `-MF`.
    pub(crate) file: Option<String>,
    /// `-MT` (the last one given: nvcc uses only that).
    pub(crate) target: Option<String>,
    /// `-MP`.
    pub(crate) phony: bool,
}

/// A cacheable nvcc command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    pub(crate) kind: OutputKind,
    /// The source, as given.
    pub(crate) source: String,
    /// `-o`, as given.
    pub(crate) output: Option<String>,
    pub(crate) deps: Option<DepRequest>,
    /// Every other option, tokenized (the host compiler's arguments among them).
    pub(crate) flags: CommandLine,
}

impl Command {
    /// The flags for the library, canonically spelled: the library tokenizes them again with the
    /// same tokenizer and gets this command.
    pub(crate) fn library_flags(&self) -> Vec<String> {
        self.flags.render_options()
    }

    /// The whole command, canonically spelled: parsing it again gives this command.
    #[cfg(test)]
    pub(crate) fn render(&self) -> Vec<String> {
        let mut out = vec![match self.kind {
            OutputKind::Object => "-c".to_string(),
            other => other.flag().to_string(),
        }];
        out.extend(self.library_flags());
        if let Some(deps) = &self.deps {
            out.push(if deps.system_headers { "-MD" } else { "-MMD" }.into());
            if let Some(file) = &deps.file {
                out.extend(["-MF".to_string(), file.clone()]);
            }
            if let Some(target) = &deps.target {
                out.extend(["-MT".to_string(), target.clone()]);
            }
            if deps.phony {
                out.push("-MP".into());
            }
        }
        if let Some(output) = &self.output {
            out.extend(["-o".to_string(), output.clone()]);
        }
        out.push(self.source.clone());
        out
    }
}

/// Parses an nvcc command line (without the program name). `read_file` reads an options file or
/// a response file.
pub(crate) fn parse(
    args: &[String],
    read_file: &dyn Fn(&str) -> std::io::Result<String>,
) -> Result<Command, Uncacheable> {
    let line = cmdline::parse(
        args,
        &Sources {
            prepend: None,
            append: None,
            read_file,
        },
    )
    .map_err(|refused| {
        // An unknown option is counted by its name alone (`launcher uncacheable: --foo: 3`);
        // other refusals say why.
        Uncacheable(match refused.kind {
            cmdline::RefusalKind::UnknownOption => refused.arg,
            _ => refused.to_string(),
        })
    })?;
    let mut kind: Option<OutputKind> = None;
    let mut device_c = false;
    let mut sources: Vec<String> = Vec::new();
    let mut output: Option<String> = None;
    let mut dep_mode: Option<bool> = None;
    let mut deps = DepRequest::default();
    let mut dep_options = false;
    let mut flags = CommandLine {
        items: Vec::new(),
        host: line.host,
    };
    let reason = |s: &str| Uncacheable(s.to_string());
    for item in line.items {
        let arg = match item {
            Item::Input(input) if input == "-" => return Err(reason("- (stdin)")),
            Item::Input(input) => {
                sources.push(input);
                continue;
            }
            Item::Opt(arg) => arg,
        };
        let opt = arg.opt;
        let value = arg.value.clone();
        match opt.role {
            Mode(k) => {
                if kind.is_some_and(|old| old != k) || device_c {
                    return Err(reason("several output kinds"));
                }
                kind = Some(k);
            }
            DeviceC => {
                if kind.is_some_and(|old| old != OutputKind::Object) {
                    return Err(reason("several output kinds"));
                }
                kind = Some(OutputKind::Object);
                device_c = true;
            }
            Output => {
                if output.is_some() {
                    return Err(reason("several -o"));
                }
                output = value;
            }
            DepAll | DepNonSystem => {
                let system = opt.role == DepAll;
                if dep_mode.is_some_and(|old| old != system) {
                    return Err(reason("-MD with -MMD"));
                }
                dep_mode = Some(system);
            }
            DepFile => {
                deps.file = value;
                dep_options = true;
            }
            DepTarget => {
                deps.target = value;
                dep_options = true;
            }
            DepPhony => {
                deps.phony = true;
                dep_options = true;
            }
            // Expanded by the tokenizer where it stood.
            OptionsFile => {}
            Search | Keyed => flags.items.push(Item::Opt(arg)),
            NotCached => return Err(Uncacheable(opt.long_or_short().to_string())),
        }
    }
    let Some(mut kind) = kind else {
        return Err(reason("no -c, -cubin, -ptx or -fatbin (linking)"));
    };
    if device_c {
        // `-dc` is `-c -rdc=true`.
        kind = OutputKind::Object;
        let (rdc, _) = cmdline::lookup("-rdc=true").ok_or_else(|| reason("-dc"))?;
        flags.items.push(Item::Opt(Arg {
            opt: rdc,
            value: Some("true".into()),
        }));
    }
    let source = match sources.as_slice() {
        [one] => one.clone(),
        [] => return Err(reason("no source")),
        _ => return Err(reason("several inputs")),
    };
    // nvcc reads `-x` for every input, the last value winning: `-x cu` makes any file a CUDA
    // source, as the `.cu` suffix does (another language for a `.cu` is a keyed flag nvcc
    // follows).
    let language = flags.items.iter().rev().find_map(|item| match item {
        Item::Opt(arg) if arg.opt.short == "-x" => arg.value.as_deref(),
        _ => None,
    });
    if !source.ends_with(".cu") && language != Some("cu") {
        return Err(reason("input is not a .cu source"));
    }
    let deps = match dep_mode {
        Some(system) => Some(DepRequest {
            system_headers: system,
            ..deps
        }),
        None if dep_options => return Err(reason("-MF, -MT or -MP without -MD or -MMD")),
        None => None,
    };
    Ok(Command {
        kind,
        source,
        output,
        deps,
        flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvcc::options::{Opt, OPTIONS};
    use proptest::prelude::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn no_files(_: &str) -> std::io::Result<String> {
        Err(std::io::ErrorKind::NotFound.into())
    }

    fn parsed(args: &[&str]) -> Command {
        parse(&strings(args), &no_files).unwrap_or_else(|e| panic!("{args:?} parses: {e:?}"))
    }

    fn refused(args: &[&str]) -> String {
        match parse(&strings(args), &no_files) {
            Ok(c) => panic!("{args:?} must not be cacheable: {c:?}"),
            Err(Uncacheable(why)) => why,
        }
    }

    #[test]
    fn every_spelling_of_a_valued_option_means_the_same() {
        let forms = [
            &["-arch=sm_90"][..],
            &["-arch", "sm_90"],
            &["--gpu-architecture=sm_90"],
            &["--gpu-architecture", "sm_90"],
        ];
        let expected = parsed(&["-c", "-arch=sm_90", "k.cu"]);
        for form in forms {
            let mut args = vec!["-c"];
            args.extend_from_slice(form);
            args.push("k.cu");
            assert_eq!(parsed(&args), expected, "{form:?} is -arch=sm_90");
        }
        for (joined, separate) in [
            ("-Iinc", ["-I", "inc"]),
            ("-DX=1", ["-D", "X=1"]),
            ("-UX", ["--undefine-macro", "X"]),
            ("-O3", ["--optimize", "3"]),
        ] {
            assert_eq!(
                parsed(&["-c", joined, "k.cu"]),
                parsed(&["-c", separate[0], separate[1], "k.cu"]),
                "{joined} is {separate:?}"
            );
        }
    }

    #[test]
    fn modes_outputs_and_dependency_options() {
        let c = parsed(&[
            "--compile",
            "-Xptxas",
            "-v",
            "-MMD",
            "-MF",
            "out/k.d",
            "-MT",
            "first",
            "--dependency-target-name=k.o",
            "-MP",
            "--output-file",
            "out/k.o",
            "src/k.cu",
        ]);
        assert_eq!(c.kind, OutputKind::Object);
        assert_eq!(c.output.as_deref(), Some("out/k.o"));
        assert_eq!(
            c.deps,
            Some(DepRequest {
                system_headers: false,
                file: Some("out/k.d".into()),
                target: Some("k.o".into()),
                phony: true
            }),
            "the last -MT wins, as in nvcc"
        );
        assert_eq!(c.library_flags(), strings(&["-Xptxas=-v"]));
        for (flag, kind) in [
            ("-cubin", OutputKind::Cubin),
            ("--ptx", OutputKind::Ptx),
            ("-fatbin", OutputKind::Fatbin),
        ] {
            assert_eq!(parsed(&[flag, "k.cu"]).kind, kind, "{flag}");
        }
        let dc = parsed(&["-dc", "k.cu"]);
        assert_eq!(dc.kind, OutputKind::Object);
        assert_eq!(
            dc.library_flags(),
            strings(&["-rdc=true"]),
            "-dc is -c -rdc=true"
        );
    }

    #[test]
    fn options_keep_their_order_and_host_arguments_go_in_one_xcompiler() {
        let c = parsed(&[
            "-c",
            "-DA",
            "-Ia",
            "--use_fast_math",
            "-isystem=s",
            "-Xcompiler",
            "-fPIC",
            "-I",
            "b",
            "-ccbin",
            "g++",
            "k.cu",
        ]);
        assert_eq!(
            c.library_flags(),
            strings(&[
                "-DA",
                "-Ia",
                "-use_fast_math",
                "-isystem",
                "s",
                "-Ib",
                "-ccbin",
                "g++",
                "-Xcompiler=-fPIC",
            ])
        );
    }

    #[test]
    fn what_is_not_one_cacheable_compile_says_why() {
        assert_eq!(refused(&["-c", "--foo", "k.cu"]), "--foo");
        assert_eq!(refused(&["-c", "--foo=3", "k.cu"]), "--foo");
        assert_eq!(refused(&["-c", "-MQ", "x", "k.cu"]), "-MQ");
        assert!(refused(&["-c", "-Xcompiler", "-B/x", "k.cu"]).contains("-B/x"));
        assert!(refused(&["-c", "-Xcompiler", "@nope", "k.cu"]).contains("@nope"));
        assert_eq!(refused(&["-c", "-keep", "k.cu"]), "--keep");
        assert_eq!(refused(&["-E", "k.cu"]), "--preprocess");
        assert_eq!(refused(&["-M", "k.cu"]), "--generate-dependencies");
        assert_eq!(refused(&["-c", "-", "-x", "cu"]), "- (stdin)");
        assert_eq!(
            refused(&["a.o", "b.o", "-o", "app"]),
            "no -c, -cubin, -ptx or -fatbin (linking)"
        );
        assert_eq!(refused(&["-c", "a.cu", "b.cu"]), "several inputs");
        assert_eq!(refused(&["-c", "-cubin", "a.cu"]), "several output kinds");
        assert_eq!(refused(&["-c", "a.cpp"]), "input is not a .cu source");
        assert_eq!(
            refused(&["-x", "cu", "-x", "c++", "-c", "a.cpp"]),
            "input is not a .cu source",
            "the last -x wins, as nvcc reads it"
        );
        for args in [
            &["-x", "cu", "-cubin", "a.cpp"][..],
            &["-cubin", "a.cpp", "--x=cu"],
            &["-x", "c++", "--x", "cu", "-cubin", "a.cpp"],
        ] {
            assert_eq!(
                parsed(args).source,
                "a.cpp",
                "{args:?}: -x cu makes a.cpp CUDA"
            );
        }
        assert_eq!(
            refused(&["-c", "-MF", "a.d", "a.cu"]),
            "-MF, -MT or -MP without -MD or -MMD"
        );
        assert!(
            refused(&["-c", "-g=1", "a.cu"]) == "-g",
            "a flag given a value is not understood"
        );
        assert_eq!(refused(&["-c", "a.cu", "-o"]), "-o without a value");
        assert_eq!(refused(&["-c", "-run", "a.cu"]), "--run");
    }

    #[test]
    fn options_files_expand_in_place_with_quotes() {
        let read = |name: &str| -> std::io::Result<String> {
            match name {
                "opts" => Ok("-I \"dir with space\" \"-DX=a b\"\n-optf more".into()),
                "more" => Ok("-O3".into()),
                _ => Err(std::io::ErrorKind::NotFound.into()),
            }
        };
        let c = parse(&strings(&["-c", "--options-file", "opts", "k.cu"]), &read).expect("parses");
        assert_eq!(
            c.library_flags(),
            strings(&["-Idir with space", "-DX=a b", "-O3"])
        );
        let missing = parse(&strings(&["-c", "-optf=nope", "k.cu"]), &read);
        assert!(
            missing.is_err(),
            "an unreadable options file is left to nvcc"
        );
    }

    /// An argument list for `opt` in a random spelling.
    fn spell(opt: &'static Opt, value: &str, pick: u8) -> Vec<String> {
        let joins_back = |opt: &'static Opt, value: &str| {
            nvcc::cmdline::lookup(&format!("{}{value}", opt.short))
                .is_some_and(|(found, v)| found.short == opt.short && v.as_deref() == Some(value))
        };
        let name = if opt.long.is_empty() || pick.is_multiple_of(2) {
            opt.short
        } else {
            opt.long
        };
        if !opt.value {
            return vec![name.to_string()];
        }
        match pick % 3 {
            0 => vec![format!("{name}={value}")],
            1 if opt.joined && name == opt.short && joins_back(opt, value) => {
                vec![format!("{name}{value}")]
            }
            _ => vec![name.to_string(), value.to_string()],
        }
    }

    fn keyed_options() -> Vec<&'static Opt> {
        // The host compiler's arguments are GCC's options, drawn by the library's property test.
        OPTIONS
            .iter()
            .filter(|o| matches!(o.role, Keyed | Search) && o.short != "-Xcompiler")
            .collect()
    }

    proptest! {
        /// Parsing, rendering and parsing again gives the same command, whatever spellings the
        /// first argv used; and the rendered argv is a fixed point.
        #[test]
        fn parse_render_parse_is_the_identity(
            picks in proptest::collection::vec((0usize..200, 0u8..6, "[a-z0-9_]{1,6}"), 0..12),
            kind in 0usize..4,
            output in proptest::option::of("[a-z]{1,5}\\.o"),
            deps in proptest::option::of((any::<bool>(), any::<bool>(), any::<bool>())),
        ) {
            let options = keyed_options();
            let mut argv = vec![["-c", "-cubin", "--ptx", "-fatbin"][kind].to_string()];
            for (index, pick, value) in &picks {
                let opt = options[index % options.len()];
                argv.extend(spell(opt, value, *pick));
            }
            if let Some((system, file, phony)) = deps {
                argv.push(if system { "-MD" } else { "--generate-nonsystem-dependencies-with-compile" }.into());
                if file { argv.extend(["-MF".to_string(), "x.d".to_string()]); }
                if phony { argv.push("-MP".into()); }
            }
            if let Some(output) = &output {
                argv.extend(["-o".to_string(), output.clone()]);
            }
            argv.push("src/k.cu".into());
            let first = parse(&argv, &no_files).expect("generated argv parses");
            let rendered = first.render();
            let second = parse(&rendered, &no_files).expect("rendered argv parses");
            prop_assert_eq!(&first, &second);
            prop_assert_eq!(second.render(), rendered);
        }
    }
}

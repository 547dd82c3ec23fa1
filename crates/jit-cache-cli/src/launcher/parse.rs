//! nvcc's command line, parsed by nvcc's own option table: what a launcher may cache, and what
//! it must leave to the real compiler.
//!
//! Every option nvcc 13.5 documents (`nvcc --help`) is in [`OPTIONS`] (`nvcc::options`, shared
//! with the library), by its short and long name, with whether it takes a value and what it does. Values are accepted
//! after `=` or in the next argument, and joined for `-I`, `-D`, `-U`, `-O`, `-L` and `-l`
//! (`-Iinc`, `-O3`), as nvcc reads them. `--options-file` is expanded in place.
//!
//! A command is cacheable when it compiles one `.cu` source to an object (`-c`, `-dc`), a
//! cubin, a PTX or a fatbin. Anything else (linking, several inputs, `-E`, `-M` alone, `-`,
//! `--keep`, an option this table does not know) is [`Uncacheable`] with the reason, and the
//! launcher runs the real nvcc unchanged: an option not understood is never dropped from a key.

use jit_cache::OutputKind;

use nvcc::options::{Opt, Role, OPTIONS};
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

/// One option that enters the key, with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flag {
    pub(crate) opt: &'static Opt,
    pub(crate) value: Option<String>,
}

impl Flag {
    /// The flag as one argv element in its canonical spelling (`-arch=sm_90`, `-O3`, `-DX=1`),
    /// or two for the search options, which the library reads in that form.
    pub(crate) fn render(&self, out: &mut Vec<String>) {
        match &self.value {
            None => out.push(self.opt.short.to_string()),
            Some(value) if self.opt.role == Search => {
                out.push(self.opt.short.to_string());
                out.push(value.clone());
            }
            Some(value) if self.opt.joined && joins_back(self.opt, value) => {
                out.push(format!("{}{value}", self.opt.short))
            }
            Some(value) if self.opt.joined => {
                // `-l` + `ink` would read as `-link`: keep the value apart.
                out.push(self.opt.short.to_string());
                out.push(value.clone());
            }
            Some(value) => out.push(format!("{}={value}", self.opt.short)),
        }
    }
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
    /// Every other option, in order.
    pub(crate) flags: Vec<Flag>,
}

impl Command {
    /// The flags for the library: search options first (in their order), then the rest (in
    /// theirs). Neither group's order changes, and no option moves across one of its own kind.
    pub(crate) fn library_flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        for search in [true, false] {
            for flag in self
                .flags
                .iter()
                .filter(|f| (f.opt.role == Search) == search)
            {
                flag.render(&mut out);
            }
        }
        out
    }

    /// The whole command, canonically spelled: parsing it again gives this command.
    #[cfg(test)]
    pub(crate) fn render(&self) -> Vec<String> {
        let mut out = vec![match self.kind {
            OutputKind::Object => "-c".to_string(),
            other => other.flag().to_string(),
        }];
        for flag in &self.flags {
            flag.render(&mut out);
        }
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

/// Whether `short` + `value` reads back as this option with this value.
fn joins_back(opt: &'static Opt, value: &str) -> bool {
    lookup(&format!("{}{value}", opt.short))
        .is_some_and(|(found, v)| std::ptr::eq(found, opt) && v.as_deref() == Some(value))
}

/// Finds the option `arg` names: (option, value given with it, whether a value must follow).
fn lookup(arg: &str) -> Option<(&'static Opt, Option<String>)> {
    let (name, eq_value) = match arg.split_once('=') {
        Some((name, value)) => (name, Some(value.to_string())),
        None => (arg, None),
    };
    if let Some(opt) = OPTIONS
        .iter()
        .find(|o| o.short == name || (!o.long.is_empty() && o.long == name))
    {
        if eq_value.is_some() && !opt.value {
            return None;
        }
        return Some((opt, eq_value));
    }
    // Joined values (`-Iinc`, `-O3`, `-DX=1`): the whole rest of the argument is the value.
    OPTIONS.iter().filter(|o| o.joined).find_map(|o| {
        let rest = arg.strip_prefix(o.short)?;
        (!rest.is_empty()).then(|| (o, Some(rest.to_string())))
    })
}

/// Splits an options file as nvcc does: whitespace separates arguments; single and double
/// quotes group; a backslash escapes the next character.
fn split_options_file(text: &str) -> Result<Vec<String>, Uncacheable> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') | (None, '\\') => {
                if let Some(next) = chars.next() {
                    current.push(next);
                }
                in_word = true;
            }
            (Some(_), c) => current.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    args.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            (None, c) => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(Uncacheable("unterminated quote in --options-file".into()));
    }
    if in_word {
        args.push(current);
    }
    Ok(args)
}

/// Parses an nvcc command line (without the program name). `read_file` reads an options file.
pub(crate) fn parse(
    args: &[String],
    read_file: &dyn Fn(&str) -> std::io::Result<String>,
) -> Result<Command, Uncacheable> {
    let mut queue: std::collections::VecDeque<String> = args.iter().cloned().collect();
    let mut kind: Option<OutputKind> = None;
    let mut device_c = false;
    let mut sources: Vec<String> = Vec::new();
    let mut output: Option<String> = None;
    let mut dep_mode: Option<bool> = None;
    let mut deps = DepRequest::default();
    let mut dep_options = false;
    let mut flags = Vec::new();
    let mut expanded = 0usize;
    let reason = |s: &str| Uncacheable(s.to_string());
    while let Some(arg) = queue.pop_front() {
        if arg == "-" {
            return Err(reason("- (stdin)"));
        }
        if !arg.starts_with('-') || arg.len() == 1 {
            sources.push(arg);
            continue;
        }
        let Some((opt, given)) = lookup(&arg) else {
            let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
            return Err(Uncacheable(name.to_string()));
        };
        let value = match (opt.value, given) {
            (false, _) => None,
            (true, Some(v)) => Some(v),
            (true, None) => Some(
                queue
                    .pop_front()
                    .ok_or_else(|| Uncacheable(format!("{} without a value", opt.short)))?,
            ),
        };
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
            OptionsFile => {
                expanded += 1;
                if expanded > 64 {
                    return Err(reason("--options-file nested too deep"));
                }
                let mut inserted = Vec::new();
                for file in value.unwrap_or_default().split(',') {
                    let text = read_file(file)
                        .map_err(|e| Uncacheable(format!("--options-file {file}: {e}")))?;
                    inserted.extend(split_options_file(&text)?);
                }
                for arg in inserted.into_iter().rev() {
                    queue.push_front(arg);
                }
            }
            Search | Keyed => flags.push(Flag { opt, value }),
            NotCached => return Err(Uncacheable(opt.long_or_short().to_string())),
        }
    }
    let Some(mut kind) = kind else {
        return Err(reason("no -c, -cubin, -ptx or -fatbin (linking)"));
    };
    if device_c {
        // `-dc` is `-c -rdc=true`.
        kind = OutputKind::Object;
        flags.push(Flag {
            opt: find("-rdc"),
            value: Some("true".into()),
        });
    }
    let source = match sources.as_slice() {
        [one] => one.clone(),
        [] => return Err(reason("no source")),
        _ => return Err(reason("several inputs")),
    };
    if !source.ends_with(".cu") {
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

/// The option named `short` (the table is static; a missing name is a bug caught by tests).
fn find(short: &str) -> &'static Opt {
    OPTIONS
        .iter()
        .find(|o| o.short == short)
        .unwrap_or(&OPTIONS[0])
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn the_table_has_no_duplicate_names_and_find_knows_rdc() {
        let mut names = std::collections::HashSet::new();
        for opt in OPTIONS {
            for name in [opt.short, opt.long] {
                assert!(
                    name.is_empty() || names.insert(name),
                    "{name} is listed twice"
                );
            }
        }
        assert_eq!(find("-rdc").long, "--relocatable-device-code");
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
    fn search_options_go_first_and_keep_their_order() {
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
                "-I",
                "a",
                "-isystem",
                "s",
                "-Xcompiler",
                "-fPIC",
                "-I",
                "b",
                "-ccbin",
                "g++",
                "-DA",
                "-use_fast_math"
            ])
        );
    }

    #[test]
    fn what_is_not_one_cacheable_compile_says_why() {
        assert_eq!(refused(&["-c", "--foo", "k.cu"]), "--foo");
        assert_eq!(refused(&["-c", "--foo=3", "k.cu"]), "--foo");
        assert_eq!(refused(&["-c", "-MQ", "x", "k.cu"]), "-MQ");
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
            refused(&["-c", "-MF", "a.d", "a.cu"]),
            "-MF, -MT or -MP without -MD or -MMD"
        );
        assert_eq!(
            refused(&["-c", "-g=1", "a.cu"]),
            "-g",
            "a flag given a value is not understood"
        );
        assert_eq!(refused(&["-c", "a.cu", "-o"]), "-o without a value");
        assert_eq!(refused(&["-c", "-run", "a.cu"]), "--run");
    }

    #[test]
    fn options_files_expand_in_place_with_quotes() {
        let read = |name: &str| -> std::io::Result<String> {
            match name {
                "opts" => Ok("-I 'dir with space' \"-DX=a b\"\n-optf more".into()),
                "more" => Ok("-O3".into()),
                _ => Err(std::io::ErrorKind::NotFound.into()),
            }
        };
        let c = parse(&strings(&["-c", "--options-file", "opts", "k.cu"]), &read).expect("parses");
        assert_eq!(
            c.library_flags(),
            strings(&["-I", "dir with space", "-DX=a b", "-O3"])
        );
        let missing = parse(&strings(&["-c", "-optf=nope", "k.cu"]), &read);
        assert!(
            missing.is_err(),
            "an unreadable options file is left to nvcc"
        );
    }

    /// An argument list for `opt` in a random spelling.
    fn spell(opt: &'static Opt, value: &str, pick: u8) -> Vec<String> {
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
        OPTIONS
            .iter()
            .filter(|o| matches!(o.role, Keyed | Search))
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

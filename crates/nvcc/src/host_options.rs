//! The host compiler's option table: GCC 12's options (`host_options.txt`), each with its shape and
//! what it does to a compile, and GCC's own rules for decoding an argument into one of them.
//!
//! nvcc preprocesses and compiles host code with the host compiler and hands it, unchanged, every
//! argument of `-Xcompiler` (and, with `-forward-unknown-to-host-compiler`, every option nvcc does
//! not know). What those arguments mean decides which headers are read, which programs run and
//! which files are written, so they are read by this table, never passed through as text: an
//! argument the table does not know is [`HostRefusal::Unknown`], and a command that has one is not
//! cacheable.
//!
//! Decoding follows GCC's `decode_cmdline_option` (`opts-common.cc`): an exact name first, then the
//! longest name that takes a joined value and is a prefix of the argument, then GCC's prefix
//! remappings (`-fno-x` to `-fx`, `--x` to `-fx`, `--warn-x` to `-Wx`, `--machine-x` to `-mx`,
//! `--optimize=` to `-O`, `--debug=` to `-g`, `--std=` to `-std=`), each looked up again.

use std::collections::HashMap;
use std::sync::OnceLock;

/// How an option takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// No value: the argument is exactly the name.
    Flag,
    /// The value follows the name in the same argument (`-DX`, `-O2`, `-std=c++17`).
    Joined,
    /// Joined, or else the next argument (`-Idir` or `-I dir`).
    JoinedOrSeparate,
    /// The next argument (`--param name=value`).
    Separate,
}

/// A list of GCC's include search, or a forced include, that the include model follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SearchList {
    /// `-iquote`: searched for `#include "x"` only, after the includer's directory.
    Quote,
    /// `-I`: the bracket chain.
    Bracket,
    /// `-isystem`: the system chain, after the bracket chain.
    System,
    /// `-idirafter`: after the system chain and the built-in directories.
    After,
    /// `-include`: a file processed before the source.
    Include,
    /// `-imacros`: a file whose macros are taken before the source (before every `-include`).
    Imacros,
}

/// Why a host-compiler argument makes a command uncacheable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HostRefusal {
    /// Not an option of the table.
    Unknown,
    /// Changes the include search in ways the include model does not follow (`-nostdinc`,
    /// `--sysroot`, `-iprefix`, `-I-`, ...).
    Search,
    /// Runs or loads other programs (`-B`, `-specs=`, `-fplugin=`, `-Wa,`, ...).
    Tool,
    /// The cache's own choice: the output, the mode, the language or the dependency file.
    Mode,
    /// Writes or reads files beside the output, or prints what differs from run to run
    /// (`-save-temps`, `-fdump-*`, `-fprofile-use`, `-ftime-report`, ...).
    Files,
    /// Depends on the machine it runs on (`-march=native`).
    Native,
    /// A character that the shell nvcc runs its steps through would interpret (nvcc pastes
    /// `-Xcompiler` arguments into a shell command line unquoted).
    ShellText,
    /// A response file (`@file`) that cannot be read, or nests too deep.
    ResponseFile,
    /// An option that needs a value was the last argument.
    MissingValue,
}

impl std::fmt::Display for HostRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HostRefusal::Unknown => "not in GCC's option table",
            HostRefusal::Search => "changes the include search in a way the cache does not model",
            HostRefusal::Tool => "runs or loads other programs",
            HostRefusal::Mode => "the cache chooses the output, mode and dependency file",
            HostRefusal::Files => "writes or reads files beside the output",
            HostRefusal::Native => "depends on the machine it runs on",
            HostRefusal::ShellText => "has characters nvcc's shell would interpret",
            HostRefusal::ResponseFile => "a response file that cannot be read",
            HostRefusal::MissingValue => "needs a value",
        })
    }
}

/// What an option does to a compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostRole {
    /// A search list or forced include: the value is a directory or a file.
    Search(SearchList),
    /// `-D`.
    Define,
    /// `-U`.
    Undefine,
    /// Changes the output; enters the key as text.
    Keyed,
    /// Asks for debug information (or changes the paths it holds): keyed, and the working
    /// directory enters the key, as debug information names it.
    Debug,
    /// The command is not cacheable.
    Refused(HostRefusal),
}

/// One option of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOpt {
    /// The name, with its dashes (`-I`, `--include-directory=`, `-fPIC`).
    pub name: &'static str,
    /// How it takes its value.
    pub shape: Shape,
    /// What it does.
    pub role: HostRole,
}

/// One decoded host-compiler argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The option.
    pub opt: &'static HostOpt,
    /// Its value, if it takes one and it was joined to the name.
    pub joined: Option<String>,
    /// Whether the value is the next argument.
    pub needs_next: bool,
}

const TABLE_TEXT: &str = include_str!("host_options.txt");

struct Table {
    options: Vec<HostOpt>,
    by_name: HashMap<&'static str, usize>,
    /// Indexes of options that take a joined value, longest name first.
    joined: Vec<usize>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let options: Vec<HostOpt> = TABLE_TEXT
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("# ") && *l != "#")
            .filter_map(parse_line)
            .collect();
        let by_name = options
            .iter()
            .enumerate()
            .map(|(i, o)| (o.name, i))
            .collect();
        let mut joined: Vec<usize> = (0..options.len())
            .filter(|&i| matches!(options[i].shape, Shape::Joined | Shape::JoinedOrSeparate))
            .collect();
        joined.sort_by_key(|&i| std::cmp::Reverse(options[i].name.len()));
        Table {
            options,
            by_name,
            joined,
        }
    })
}

/// One line of the table; a malformed line is left out (the table's own test reads every line).
fn parse_line(line: &'static str) -> Option<HostOpt> {
    let mut words = line.split_whitespace();
    let name = words.next()?;
    let shape = match words.next()? {
        "flag" => Shape::Flag,
        "joined" => Shape::Joined,
        "js" => Shape::JoinedOrSeparate,
        "sep" => Shape::Separate,
        _ => return None,
    };
    let role = match words.next()? {
        "bracket" => HostRole::Search(SearchList::Bracket),
        "quote" => HostRole::Search(SearchList::Quote),
        "system" => HostRole::Search(SearchList::System),
        "after" => HostRole::Search(SearchList::After),
        "include" => HostRole::Search(SearchList::Include),
        "imacros" => HostRole::Search(SearchList::Imacros),
        "define" => HostRole::Define,
        "undef" => HostRole::Undefine,
        "keyed" => HostRole::Keyed,
        "debug" => HostRole::Debug,
        "refuse-search" => HostRole::Refused(HostRefusal::Search),
        "refuse-tool" => HostRole::Refused(HostRefusal::Tool),
        "refuse-mode" => HostRole::Refused(HostRefusal::Mode),
        "refuse-files" => HostRole::Refused(HostRefusal::Files),
        _ => return None,
    };
    Some(HostOpt { name, shape, role })
}

/// Every option of the table.
pub fn options() -> &'static [HostOpt] {
    &table().options
}

/// The option named exactly `name`.
pub fn find(name: &str) -> Option<&'static HostOpt> {
    let t = table();
    t.by_name.get(name).map(|&i| &t.options[i])
}

/// GCC's prefix remappings (`option_map` in `opts-common.cc`): a spelling prefix and the prefix it
/// stands for. Tried in this order; the first whose rewritten argument is an option wins.
const REMAPS: &[(&str, &str)] = &[
    ("-Wno-", "-W"),
    ("-fno-", "-f"),
    ("-gno-", "-g"),
    ("-mno-", "-m"),
    ("--debug=", "-g"),
    ("--machine-no-", "-m"),
    ("--machine-", "-m"),
    ("--machine=no-", "-m"),
    ("--machine=", "-m"),
    ("--optimize=", "-O"),
    ("--std=", "-std="),
    ("--warn-no-", "-W"),
    ("--warn-", "-W"),
    ("--", "-f"),
    ("--no-", "-f"),
];

/// Decodes one argument by the table alone (no remapping).
fn lookup_direct(arg: &str) -> Option<Decoded> {
    let t = table();
    if let Some(&i) = t.by_name.get(arg) {
        let opt = &t.options[i];
        return Some(Decoded {
            opt,
            joined: None,
            needs_next: matches!(opt.shape, Shape::JoinedOrSeparate | Shape::Separate),
        });
    }
    t.joined.iter().find_map(|&i| {
        let opt = &t.options[i];
        let rest = arg.strip_prefix(opt.name)?;
        (!rest.is_empty()).then(|| Decoded {
            opt,
            joined: Some(rest.to_string()),
            needs_next: false,
        })
    })
}

/// Decodes one argument as GCC does: the table, then GCC's prefix remappings.
pub fn decode(arg: &str) -> Option<Decoded> {
    if let Some(found) = lookup_direct(arg) {
        return Some(found);
    }
    REMAPS.iter().find_map(|(spelled, means)| {
        let rest = arg.strip_prefix(spelled)?;
        if rest.is_empty() {
            return None;
        }
        lookup_direct(&format!("{means}{rest}"))
    })
}

/// The machine-dependent values of target options: `-march=native` and its kind.
pub fn is_native(opt: &HostOpt, value: Option<&str>) -> bool {
    matches!(opt.name, "-march=" | "-mtune=" | "-mcpu=" | "-mfpu=") && value == Some("native")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_table_parses_and_names_are_unique() {
        let lines = TABLE_TEXT
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("# ") && *l != "#")
            .count();
        assert_eq!(
            options().len(),
            lines,
            "a line of host_options.txt is malformed"
        );
        let mut seen = std::collections::HashSet::new();
        for o in options() {
            assert!(o.name.starts_with('-'), "{o:?}");
            assert!(seen.insert(o.name), "{} twice", o.name);
        }
    }

    #[test]
    fn gcc_spellings_decode_to_their_options() {
        let role = |arg: &str| decode(arg).map(|d| (d.opt.name, d.joined, d.needs_next));
        assert_eq!(role("-Iinc"), Some(("-I", Some("inc".into()), false)));
        assert_eq!(role("-I"), Some(("-I", None, true)));
        assert_eq!(
            role("--include-directory=d"),
            Some(("--include-directory=", Some("d".into()), false))
        );
        assert_eq!(
            role("--include-directory"),
            Some(("--include-directory", None, true))
        );
        assert_eq!(
            role("-isystemx"),
            Some(("-isystem", Some("x".into()), false))
        );
        assert_eq!(role("-fno-exceptions").map(|r| r.0), Some("-fexceptions"));
        assert_eq!(role("--no-exceptions").map(|r| r.0), Some("-fexceptions"));
        assert_eq!(role("--warn-all").map(|r| r.0), Some("-Wall"));
        assert_eq!(role("-Wno-unused").map(|r| r.0), Some("-Wunused"));
        assert_eq!(role("--optimize=2").map(|r| r.0), Some("--optimize="));
        assert_eq!(role("--machine-sse4.2").map(|r| r.0), Some("-msse4.2"));
        assert_eq!(role("-std=c++17").map(|r| r.0), Some("-std="));
        assert_eq!(role("-I-").map(|r| r.0), Some("-I-"));
        assert!(decode("-no-such-option-at-all").is_none());
        assert!(decode("-Wl").is_none(), "-Wl needs its comma");
    }

    #[test]
    fn roles_refuse_what_the_model_cannot_follow() {
        let role = |arg: &str| decode(arg).map(|d| d.opt.role);
        for (arg, refusal) in [
            ("-nostdinc", HostRefusal::Search),
            ("--no-standard-includes", HostRefusal::Search),
            ("--sysroot=/x", HostRefusal::Search),
            ("-iprefix", HostRefusal::Search),
            ("--include-barrier", HostRefusal::Search),
            ("-I-", HostRefusal::Search),
            ("-B/x", HostRefusal::Tool),
            ("-fplugin=x.so", HostRefusal::Tool),
            ("-Wa,-adhln", HostRefusal::Tool),
            ("-save-temps", HostRefusal::Files),
            ("-fdump-tree-all", HostRefusal::Files),
            ("-MD", HostRefusal::Mode),
            ("-o", HostRefusal::Mode),
        ] {
            assert_eq!(role(arg), Some(HostRole::Refused(refusal)), "{arg}");
        }
        assert_eq!(
            role("--include-directory-after=x"),
            Some(HostRole::Search(SearchList::After))
        );
        assert_eq!(role("-g3"), Some(HostRole::Debug));
        assert_eq!(role("-gdwarf-4"), Some(HostRole::Debug));
        assert_eq!(role("-fPIC"), Some(HostRole::Keyed));
        let march = decode("-march=native").expect("-march= is an option");
        assert!(is_native(march.opt, march.joined.as_deref()));
    }
}

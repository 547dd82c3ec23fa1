//! nvcc's command line, tokenized once: every reader of a command line (the launcher, the cache's
//! request) goes through [`parse`], so no two of them disagree on which argument is an option,
//! which is a value and what the host compiler receives.
//!
//! What nvcc 13.5 does with a command line, and so what this reads (checked against `nvcc -dryrun`
//! by this crate's tests):
//! - `NVCC_PREPEND_FLAGS` and `NVCC_APPEND_FLAGS` are split at whitespace and put before and after
//!   the command's own arguments. nvcc keeps quotes there as part of the argument, so a variable
//!   with a quote or a backslash is refused rather than guessed at.
//! - `--options-file` files are split at whitespace, double quotes group (and are removed), and
//!   are read in place. Single quotes and backslashes there are refused.
//! - Options are nvcc's table ([`crate::options`]): a value after `=`, in the next argument, or
//!   joined to the short name for `-I`, `-D`, `-U`, `-O`, `-L`, `-l`. The values of `-I`,
//!   `-isystem`, `-include`, `-D`, `-U`, `-Xcompiler` and `--options-file` are comma-separated
//!   lists, `\,` standing for a comma.
//! - The host compiler receives every `-Xcompiler` item, in order, before anything nvcc adds; then,
//!   with `-forward-unknown-to-host-compiler` (or `-forward-unknown-opts`), every option nvcc does
//!   not know. Those arguments are decoded by GCC's table ([`crate::host_options`]); a response
//!   file (`@file`) among them is read and expanded as GCC's `expandargv` does.
//! - nvcc runs its steps through `sh` and pastes the host compiler's arguments into those command
//!   lines unquoted (its own values in double quotes): a `$` or backquote anywhere, and in a host
//!   argument anything but plain characters, is refused, since the shell would decide what the
//!   compiler receives.

use crate::host_options::{self, HostOpt, HostRefusal, HostRole};
use crate::options::{Opt, OPTIONS};
use std::io;

/// One nvcc option with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// The option.
    pub opt: &'static Opt,
    /// Its value (one list item for the list options this module splits).
    pub value: Option<String>,
}

/// One argument the host compiler receives, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostArg {
    /// The option.
    pub opt: &'static HostOpt,
    /// Its value, joined or separate.
    pub value: Option<String>,
}

impl HostArg {
    /// The argument as GCC receives it: one argv element, or two for a separate value.
    pub fn render(&self) -> Vec<String> {
        match (&self.value, self.opt.shape) {
            (None, _) => vec![self.opt.name.to_string()],
            (Some(v), host_options::Shape::Separate) => vec![self.opt.name.to_string(), v.clone()],
            (Some(v), host_options::Shape::JoinedOrSeparate) if !self.opt.name.ends_with('=') => {
                vec![self.opt.name.to_string(), v.clone()]
            }
            (Some(v), _) => vec![format!("{}{v}", self.opt.name)],
        }
    }
}

/// One element of nvcc's own command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// An nvcc option (`-Xcompiler`'s items are in [`CommandLine::host`] instead).
    Opt(Arg),
    /// An input file (anything not an option).
    Input(String),
}

/// A command line, tokenized.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// nvcc's options and inputs in order: the prepended flags, the command's, the appended flags,
    /// options files expanded where they stood, list values split into one item each.
    pub items: Vec<Item>,
    /// What the host compiler receives from the command, in nvcc's order.
    pub host: Vec<HostArg>,
}

impl CommandLine {
    /// The options as nvcc's argv, canonically spelled (inputs left out): [`parse`] gives them
    /// back. Values stay as they were (paths as spelled); each option is written `-opt=value`, or
    /// joined for the short options that take a joined value (kept apart when joining would read
    /// as another option: `-l` + `ink`), the search options as two arguments (`-isystem dir`); the host compiler's arguments go in one `-Xcompiler`, in
    /// their order (nvcc hands every `-Xcompiler` item on first, in order), their commas escaped.
    pub fn render_options(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.items.len() + 1);
        for item in &self.items {
            if let Item::Opt(arg) = item {
                arg.render(&mut out);
            }
        }
        if !self.host.is_empty() {
            let words: Vec<String> = self
                .host
                .iter()
                .flat_map(HostArg::render)
                .map(|w| w.replace(',', "\\,"))
                .collect();
            out.push(format!("-Xcompiler={}", words.join(",")));
        }
        out
    }
}

impl Arg {
    /// Appends the option in its canonical spelling (see [`CommandLine::render_options`]).
    pub fn render(&self, out: &mut Vec<String>) {
        let opt = self.opt;
        match &self.value {
            None => out.push(opt.short.to_string()),
            Some(value) => {
                let value = if SPLIT_LISTS.contains(&opt.short) {
                    value.replace(',', "\\,")
                } else {
                    value.clone()
                };
                if opt.joined && joins_back(opt, &value) {
                    out.push(format!("{}{value}", opt.short));
                } else if opt.joined || opt.role == crate::options::Role::Search {
                    // The search options as two arguments, the spelling every reader knows.
                    out.push(opt.short.to_string());
                    out.push(value);
                } else {
                    out.push(format!("{}={value}", opt.short));
                }
            }
        }
    }
}

/// Whether `short` + `value` reads back as this option with this value.
fn joins_back(opt: &'static Opt, value: &str) -> bool {
    lookup(&format!("{}{value}", opt.short))
        .is_some_and(|(found, v)| found.short == opt.short && v.as_deref() == Some(value))
}

/// Where a refused argument came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The command's own arguments.
    Command,
    /// `NVCC_PREPEND_FLAGS`.
    Prepended,
    /// `NVCC_APPEND_FLAGS`.
    Appended,
}

/// Why a command line is not read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// An option nvcc's table does not know.
    UnknownOption,
    /// An option that needs a value was the last argument.
    MissingValue,
    /// A host-compiler argument the table refuses or does not know.
    Host(HostRefusal),
    /// A `$` or backquote, which nvcc's shell would expand.
    ShellText,
    /// An environment variable with quotes or backslashes, whose splitting is nvcc's guess.
    EnvironmentQuoting,
    /// An options file that cannot be read, nests too deep, or quotes in a way nvcc reads
    /// differently.
    OptionsFile(String),
}

/// An argument the tokenizer refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The argument (or the option's name).
    pub arg: String,
    /// Where it came from.
    pub place: Place,
    /// Why.
    pub kind: RefusalKind,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match self.place {
            Place::Command => "",
            Place::Prepended => " in NVCC_PREPEND_FLAGS",
            Place::Appended => " in NVCC_APPEND_FLAGS",
        };
        let arg = &self.arg;
        match &self.kind {
            RefusalKind::UnknownOption => write!(f, "{arg}{place}: not in nvcc's option table"),
            RefusalKind::MissingValue => write!(f, "{arg}{place} without a value"),
            RefusalKind::Host(why) => write!(f, "host compiler option {arg}{place}: {why}"),
            RefusalKind::ShellText => {
                write!(
                    f,
                    "{arg}{place}: has characters nvcc's shell would interpret"
                )
            }
            RefusalKind::EnvironmentQuoting => {
                write!(
                    f,
                    "{arg}: quotes or backslashes, which nvcc splits its own way"
                )
            }
            RefusalKind::OptionsFile(why) => write!(f, "--options-file {arg}{place}: {why}"),
        }
    }
}

impl std::error::Error for Refused {}

/// What [`parse`] reads besides the arguments.
pub struct Sources<'a> {
    /// `NVCC_PREPEND_FLAGS`, if set.
    pub prepend: Option<&'a str>,
    /// `NVCC_APPEND_FLAGS`, if set.
    pub append: Option<&'a str>,
    /// Reads an options file or a response file, by the name the command gave (relative to the
    /// command's working directory).
    pub read_file: &'a dyn Fn(&str) -> io::Result<String>,
}

impl Sources<'_> {
    /// No environment flags, and no file can be read.
    pub fn none() -> Sources<'static> {
        Sources {
            prepend: None,
            append: None,
            read_file: &|_| Err(io::ErrorKind::NotFound.into()),
        }
    }
}

/// The options whose values nvcc splits at commas and that this module splits too (the others'
/// lists are keyed as written).
const SPLIT_LISTS: &[&str] = &[
    "-I",
    "-isystem",
    "-include",
    "-D",
    "-U",
    "-Xcompiler",
    "-optf",
];

/// The most options files and response files one command may expand.
const MAX_EXPANSIONS: usize = 64;

/// Finds the nvcc option `arg` names: the option and the value given with it (after `=`, or
/// joined to a short name that takes one).
pub fn lookup(arg: &str) -> Option<(&'static Opt, Option<String>)> {
    let (name, eq_value) = match arg.split_once('=') {
        Some((name, value)) => (name, Some(value.to_string())),
        None => (arg, None),
    };
    if let Some(opt) = crate::options::find(name) {
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

/// Tokenizes a command line (without the program name) as nvcc reads it.
pub fn parse(args: &[String], sources: &Sources<'_>) -> Result<CommandLine, Refused> {
    let mut queue: std::collections::VecDeque<(String, Place)> = Default::default();
    let env_words = |value: Option<&str>, place: Place| -> Result<Vec<(String, Place)>, Refused> {
        let Some(value) = value else {
            return Ok(Vec::new());
        };
        if value.contains(['"', '\'', '\\']) {
            let name = match place {
                Place::Prepended => "NVCC_PREPEND_FLAGS",
                _ => "NVCC_APPEND_FLAGS",
            };
            return Err(Refused {
                arg: name.into(),
                place,
                kind: RefusalKind::EnvironmentQuoting,
            });
        }
        Ok(value
            .split_ascii_whitespace()
            .map(|w| (w.to_string(), place))
            .collect())
    };
    queue.extend(env_words(sources.prepend, Place::Prepended)?);
    queue.extend(args.iter().map(|a| (a.clone(), Place::Command)));
    queue.extend(env_words(sources.append, Place::Appended)?);

    let mut line = CommandLine::default();
    let mut host_items: Vec<(String, Place)> = Vec::new();
    let mut forwarded: Vec<(String, Place)> = Vec::new();
    let mut forward_unknown = false;
    let mut expansions = 0usize;
    while let Some((arg, place)) = queue.pop_front() {
        let refuse = |kind: RefusalKind| Refused {
            arg: arg.clone(),
            place,
            kind,
        };
        if arg.contains(['$', '`']) {
            return Err(refuse(RefusalKind::ShellText));
        }
        if !arg.starts_with('-') || arg == "-" {
            line.items.push(Item::Input(arg));
            continue;
        }
        let Some((opt, given)) = lookup(&arg) else {
            forwarded.push((arg, place));
            continue;
        };
        let value = match (opt.value, given) {
            (false, _) => None,
            (true, Some(v)) => Some(v),
            (true, None) => match queue.pop_front() {
                Some((v, _)) if v.contains(['$', '`']) => {
                    return Err(refuse(RefusalKind::ShellText))
                }
                Some((v, _)) => Some(v),
                None => {
                    return Err(Refused {
                        arg: opt.short.into(),
                        place,
                        kind: RefusalKind::MissingValue,
                    })
                }
            },
        };
        if matches!(
            opt.short,
            "-forward-unknown-to-host-compiler" | "-forward-unknown-opts"
        ) {
            forward_unknown = true;
        }
        let split = SPLIT_LISTS.contains(&opt.short);
        let items = match (&value, split) {
            (Some(v), true) => split_list(v).map_err(|()| refuse(RefusalKind::ShellText))?,
            (Some(v), false) => {
                if v.contains('\\') {
                    return Err(refuse(RefusalKind::ShellText));
                }
                vec![v.clone()]
            }
            (None, _) => Vec::new(),
        };
        match opt.short {
            "-Xcompiler" => host_items.extend(items.into_iter().map(|i| (i, place))),
            "-optf" => {
                let mut inserted = Vec::new();
                for file in items {
                    expansions += 1;
                    if expansions > MAX_EXPANSIONS {
                        return Err(Refused {
                            arg: file,
                            place,
                            kind: RefusalKind::OptionsFile("nested too deep".into()),
                        });
                    }
                    let text = (sources.read_file)(&file).map_err(|e| Refused {
                        arg: file.clone(),
                        place,
                        kind: RefusalKind::OptionsFile(e.to_string()),
                    })?;
                    let words = split_options_file(&text).map_err(|why| Refused {
                        arg: file.clone(),
                        place,
                        kind: RefusalKind::OptionsFile(why.into()),
                    })?;
                    inserted.extend(words);
                }
                for word in inserted.into_iter().rev() {
                    queue.push_front((word, place));
                }
            }
            _ if value.is_none() => line.items.push(Item::Opt(Arg { opt, value: None })),
            _ => line.items.extend(items.into_iter().map(|v| {
                Item::Opt(Arg {
                    opt,
                    value: Some(v),
                })
            })),
        }
    }
    // An option nvcc does not know is nvcc's error, unless it forwards such options to the host
    // compiler (CMake passes `-forward-unknown-to-host-compiler`), which then receives it after
    // every `-Xcompiler` item.
    if let Some((arg, place)) = forwarded.first() {
        if !forward_unknown {
            let name = arg.split_once('=').map_or(arg.as_str(), |(n, _)| n);
            return Err(Refused {
                arg: name.to_string(),
                place: *place,
                kind: RefusalKind::UnknownOption,
            });
        }
    }
    let mut host_words: Vec<(String, Place)> = Vec::new();
    for (item, place) in host_items.into_iter().chain(forwarded) {
        expand_response_files(item, place, sources, &mut expansions, &mut host_words)?;
    }
    line.host = decode_host(host_words)?;
    Ok(line)
}

/// Splits a list value at commas, `\,` standing for a comma. A backslash before anything else is
/// refused (`Err`): nvcc's shell would read it.
fn split_list(value: &str) -> Result<Vec<String>, ()> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(',') => current.push(','),
                _ => return Err(()),
            },
            ',' => items.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    items.push(current);
    Ok(items.into_iter().filter(|i| !i.is_empty()).collect())
}

/// Splits an options file as nvcc does: whitespace separates arguments and double quotes group
/// (and are removed). Single quotes and backslashes, which nvcc reads its own way, are refused.
/// nvcc's `-dryrun` lines (`#$ INCLUDES="-I..."`) are quoted the same way.
pub fn split_options_file(text: &str) -> Result<Vec<String>, &'static str> {
    if text.contains(['\'', '\\']) {
        return Err("single quotes or backslashes, which nvcc reads its own way");
    }
    let mut args = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    args.push(std::mem::take(&mut current));
                    in_word = false;
                }
            }
            c => {
                current.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return Err("an unterminated quote");
    }
    if in_word {
        args.push(current);
    }
    Ok(args)
}

/// Characters a host argument may hold: what `sh` passes through unchanged in a word.
fn shell_plain(arg: &str) -> bool {
    arg.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_+-=:./@%^,".contains(&b))
}

/// Expands a response file (`@file`) as GCC's `expandargv` does, recursively; other arguments
/// pass through.
fn expand_response_files(
    arg: String,
    place: Place,
    sources: &Sources<'_>,
    expansions: &mut usize,
    out: &mut Vec<(String, Place)>,
) -> Result<(), Refused> {
    let Some(file) = arg.strip_prefix('@').filter(|f| !f.is_empty()) else {
        out.push((arg, place));
        return Ok(());
    };
    let refuse = || Refused {
        arg: arg.clone(),
        place,
        kind: RefusalKind::Host(HostRefusal::ResponseFile),
    };
    *expansions += 1;
    if *expansions > MAX_EXPANSIONS {
        return Err(refuse());
    }
    // GCC leaves an unreadable `@file` as an input named `@file`: not a command to cache.
    let text = (sources.read_file)(file).map_err(|_| refuse())?;
    for word in split_response_file(&text) {
        expand_response_files(word, place, sources, expansions, out)?;
    }
    Ok(())
}

/// Splits a response file as libiberty's `buildargv`: whitespace separates, single and double
/// quotes group, a backslash takes the next character literally.
fn split_response_file(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                if let Some(next) = chars.next() {
                    current.push(next);
                }
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
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
    if in_word {
        args.push(current);
    }
    args
}

/// Decodes the host compiler's arguments by GCC's table.
fn decode_host(words: Vec<(String, Place)>) -> Result<Vec<HostArg>, Refused> {
    let mut out = Vec::new();
    let mut words = words.into_iter();
    while let Some((word, place)) = words.next() {
        let refuse = |arg: &str, kind: HostRefusal| Refused {
            arg: arg.to_string(),
            place,
            kind: RefusalKind::Host(kind),
        };
        if !shell_plain(&word) {
            return Err(refuse(&word, HostRefusal::ShellText));
        }
        let Some(decoded) = host_options::decode(&word) else {
            return Err(refuse(&word, HostRefusal::Unknown));
        };
        let value = if decoded.needs_next {
            match words.next() {
                Some((v, _)) if shell_plain(&v) => Some(v),
                Some((v, _)) => return Err(refuse(&v, HostRefusal::ShellText)),
                None => return Err(refuse(&word, HostRefusal::MissingValue)),
            }
        } else {
            decoded.joined
        };
        if let HostRole::Refused(why) = decoded.opt.role {
            return Err(refuse(&word, why));
        }
        if host_options::is_native(decoded.opt, value.as_deref()) {
            return Err(refuse(&word, HostRefusal::Native));
        }
        out.push(HostArg {
            opt: decoded.opt,
            value,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_options::SearchList;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    fn parsed(args: &[&str]) -> CommandLine {
        parse(&strings(args), &Sources::none()).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn refused(args: &[&str]) -> Refused {
        parse(&strings(args), &Sources::none()).expect_err("must be refused")
    }

    fn host_searches(line: &CommandLine) -> Vec<(SearchList, String)> {
        line.host
            .iter()
            .filter_map(|h| match h.opt.role {
                HostRole::Search(list) => Some((list, h.value.clone().unwrap_or_default())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn host_arguments_from_every_xcompiler_form_one_list_in_order() {
        let line = parsed(&[
            "-Xcompiler",
            "-Ia,-isystem",
            "--compiler-options=s,--include-directory=d,-iquote,q",
            "-Xcompiler=--include-directory-after=after,-include,f.h",
            "k.cu",
        ]);
        assert_eq!(
            host_searches(&line),
            vec![
                (SearchList::Bracket, "a".into()),
                (SearchList::System, "s".into()),
                (SearchList::Bracket, "d".into()),
                (SearchList::Quote, "q".into()),
                (SearchList::After, "after".into()),
                (SearchList::Include, "f.h".into()),
            ],
            "a separate value may come from the next -Xcompiler"
        );
        assert_eq!(line.items, vec![Item::Input("k.cu".into())]);
    }

    #[test]
    fn list_options_split_at_unescaped_commas() {
        let line = parsed(&["-DA=1,B=2", "-DC=x\\,y", "-Ia,b", "k.cu"]);
        let values: Vec<_> = line
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Opt(a) => Some((a.opt.short, a.value.clone().unwrap_or_default())),
                Item::Input(_) => None,
            })
            .collect();
        assert_eq!(
            values,
            vec![
                ("-D", "A=1".to_string()),
                ("-D", "B=2".to_string()),
                ("-D", "C=x,y".to_string()),
                ("-I", "a".to_string()),
                ("-I", "b".to_string()),
            ]
        );
    }

    #[test]
    fn response_files_are_expanded_and_their_options_decoded() {
        let read = |name: &str| -> io::Result<String> {
            match name {
                "opts" => Ok("-Ihost 'dir two' @more".into()),
                "more" => Ok("--include-directory=third".into()),
                _ => Err(io::ErrorKind::NotFound.into()),
            }
        };
        let sources = Sources {
            prepend: None,
            append: None,
            read_file: &read,
        };
        let err = parse(&strings(&["-Xcompiler", "@opts", "k.cu"]), &sources)
            .expect_err("a path with a space would reach nvcc's shell");
        assert_eq!(err.kind, RefusalKind::Host(HostRefusal::ShellText));
        let read_plain = |name: &str| -> io::Result<String> {
            match name {
                "opts" => Ok("-Ihost @more\n".into()),
                "more" => Ok("--include-directory=third".into()),
                _ => Err(io::ErrorKind::NotFound.into()),
            }
        };
        let sources = Sources {
            prepend: None,
            append: None,
            read_file: &read_plain,
        };
        let line = parse(&strings(&["-Xcompiler", "@opts", "k.cu"]), &sources).expect("parses");
        assert_eq!(
            host_searches(&line),
            vec![
                (SearchList::Bracket, "host".into()),
                (SearchList::Bracket, "third".into())
            ]
        );
        let missing = parse(&strings(&["-Xcompiler", "@nope", "k.cu"]), &sources);
        assert_eq!(
            missing.expect_err("unreadable").kind,
            RefusalKind::Host(HostRefusal::ResponseFile)
        );
    }

    #[test]
    fn what_cannot_be_read_exactly_is_refused_with_the_reason() {
        assert_eq!(
            refused(&["-c", "--foo", "k.cu"]).kind,
            RefusalKind::UnknownOption
        );
        assert_eq!(refused(&["-c", "--foo=3", "k.cu"]).arg, "--foo");
        for (host, why) in [
            ("-B/opt/gcc", HostRefusal::Tool),
            ("--sysroot=/x", HostRefusal::Search),
            ("-nostdinc", HostRefusal::Search),
            ("-march=native", HostRefusal::Native),
            ("-fno-such-flag-in-gcc", HostRefusal::Unknown),
            ("-DX=$HOME", HostRefusal::ShellText),
            ("-DX=\"a\"", HostRefusal::ShellText),
        ] {
            let err = parse(
                &strings(&["-c", "-Xcompiler", host, "k.cu"]),
                &Sources::none(),
            );
            // `$` is refused before the host list is decoded, as nvcc's own value.
            let kind = err.expect_err(host).kind;
            assert!(
                kind == RefusalKind::Host(why) || kind == RefusalKind::ShellText,
                "{host}: {kind:?}"
            );
        }
        assert_eq!(
            refused(&["-c", "-DX=$(id)", "k.cu"]).kind,
            RefusalKind::ShellText
        );
        assert_eq!(
            refused(&["-c", "-I"]).kind,
            RefusalKind::MissingValue,
            "a value-taking option at the end"
        );
    }

    #[test]
    fn unknown_options_go_to_the_host_compiler_only_when_nvcc_forwards_them() {
        assert_eq!(
            refused(&["-c", "-fPIC", "k.cu"]).kind,
            RefusalKind::UnknownOption
        );
        let line = parsed(&[
            "-forward-unknown-to-host-compiler",
            "-c",
            "-Xcompiler",
            "-Ia",
            "-fPIC",
            "-Xcompiler",
            "-Ib",
            "k.cu",
        ]);
        let host: Vec<Vec<String>> = line.host.iter().map(HostArg::render).collect();
        assert_eq!(
            host,
            vec![vec!["-I", "a"], vec!["-I", "b"], vec!["-fPIC"]],
            "forwarded options come after every -Xcompiler item, as nvcc places them"
        );
    }

    #[test]
    fn environment_flags_surround_the_command_and_quotes_there_are_refused() {
        let sources = Sources {
            prepend: Some("-Ipre"),
            append: Some(" -Ipost  -DX "),
            read_file: &|_| Err(io::ErrorKind::NotFound.into()),
        };
        let line = parse(&strings(&["-Imid", "k.cu"]), &sources).expect("parses");
        let dirs: Vec<_> = line
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Opt(a) if a.opt.short == "-I" => a.value.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(dirs, strings(&["pre", "mid", "post"]));
        let quoted = Sources {
            prepend: None,
            append: Some("-DQ=\"a b\""),
            read_file: &|_| Err(io::ErrorKind::NotFound.into()),
        };
        let err = parse(&strings(&["k.cu"]), &quoted).expect_err("quotes refused");
        assert_eq!(err.kind, RefusalKind::EnvironmentQuoting);
        assert_eq!(err.place, Place::Appended);
    }

    #[test]
    fn options_files_expand_in_place_with_double_quotes() {
        let read = |name: &str| -> io::Result<String> {
            match name {
                "opts" => Ok("-I \"dir with space\" \"-DX=a b\"\n-optf more".into()),
                "more" => Ok("-O3".into()),
                "bad" => Ok("-I 'x'".into()),
                _ => Err(io::ErrorKind::NotFound.into()),
            }
        };
        let sources = Sources {
            prepend: None,
            append: None,
            read_file: &read,
        };
        let line = parse(
            &strings(&["-c", "--options-file", "opts", "k.cu"]),
            &sources,
        )
        .expect("parses");
        let values: Vec<_> = line
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Opt(a) => a.value.clone(),
                Item::Input(_) => None,
            })
            .collect();
        assert_eq!(values, strings(&["dir with space", "X=a b", "3"]));
        assert!(parse(&strings(&["-c", "-optf=bad", "k.cu"]), &sources).is_err());
        assert!(parse(&strings(&["-c", "-optf=nope", "k.cu"]), &sources).is_err());
    }
}

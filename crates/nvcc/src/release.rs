//! The options one nvcc release has, read from its own `--help`.
//!
//! The option table (`options.rs`) is nvcc 13.5's; users run the release their framework was
//! built with, and a release can add or drop an option (sccache broke on 13.3 when cicc gained a
//! token). A command is read by the table and checked against the release that will run it: an
//! option the table knows but this release does not list is refused by name, never passed on as
//! if it meant what 13.5 means by it.

use crate::options::{Opt, UNLISTED};
use std::collections::HashSet;

/// The option names (long and short) one release's `nvcc --help` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseOptions {
    /// The table's options this release lacks, by short name: computed once, so that checking
    /// a command is a lookup per option.
    lacking: HashSet<&'static str>,
}

/// One option line of `nvcc --help`: its long name, its short name, and whether a placeholder
/// between the two says it takes a value (`<file>`, `{true|false}`, `[a,b]`, `entry,...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelpOption {
    /// The long name, with its dashes.
    pub long: String,
    /// The short name, with its dash.
    pub short: String,
    /// Whether `--help` shows a value.
    pub value: bool,
}

/// The options `nvcc --help` lists, in its order: every line that starts with `--`.
pub fn help_options(help: &str) -> Vec<HelpOption> {
    help.lines()
        .filter(|l| l.starts_with("--"))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let long = words.first()?.to_string();
            let short = words
                .last()?
                .trim_matches(|c| c == '(' || c == ')')
                .to_string();
            Some(HelpOption {
                long,
                short,
                value: words.len() > 2,
            })
        })
        .collect()
}

impl ReleaseOptions {
    /// The options of the release whose `nvcc --help` printed `help`; None when the text lists
    /// too few options to be a real `--help` (a wrapper that prints something else), so that a
    /// caller refuses nothing by mistake and trusts nothing by mistake either.
    pub fn from_help(help: &str) -> Option<ReleaseOptions> {
        let listed = help_options(help);
        if listed.len() < 100 {
            return None;
        }
        let names: HashSet<String> = listed.into_iter().flat_map(|o| [o.long, o.short]).collect();
        let had = |opt: &Opt| {
            UNLISTED.contains(&opt.short)
                || names.contains(opt.short)
                || (!opt.long.is_empty() && names.contains(opt.long))
        };
        let lacking = crate::options::OPTIONS
            .iter()
            .filter(|o| !had(o))
            .map(|o| o.short)
            .collect();
        Some(ReleaseOptions { lacking })
    }

    /// Whether this release lacks the table's option whose short name is `short` (a name the
    /// table does not know is not this check's to refuse: the tokenizer refuses it).
    pub fn lacks(&self, short: &str) -> bool {
        self.lacking.contains(short)
    }

    /// Whether this release has `opt`: its `--help` lists it by either name, or it is one the
    /// table knows nvcc accepts unlisted (`options::UNLISTED`).
    pub fn has(&self, opt: &Opt) -> bool {
        !self.lacks(opt.short)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn help(extra: &str) -> String {
        let mut text = String::from("Usage  : nvcc [options] <inputs>\n\n");
        for n in 0..120 {
            text.push_str(&format!("--filler-{n}                          (-f{n})\n"));
        }
        text.push_str("--output-file <file>                       (-o)\n");
        text.push_str(extra);
        text
    }

    #[test]
    fn an_option_this_release_does_not_list_is_not_had() {
        let release = ReleaseOptions::from_help(&help("")).expect("a help text");
        let output = crate::options::find("-o").expect("-o is in the table");
        assert!(release.has(output), "-o is listed by its long name");
        let lineinfo = crate::options::find("-lineinfo").expect("in the table");
        assert!(!release.has(lineinfo), "-lineinfo is not listed here");
        let with = ReleaseOptions::from_help(&help("--generate-line-info      (-lineinfo)\n"))
            .expect("a help text");
        assert!(with.has(lineinfo), "listed, it is had");
        assert!(release.lacks("-lineinfo") && !with.lacks("-lineinfo"));
        let unlisted = crate::options::find("-Xfatbin").expect("in the table");
        assert!(release.has(unlisted), "accepted though never listed");
    }

    #[test]
    fn a_text_that_is_no_help_gives_no_release() {
        assert_eq!(
            ReleaseOptions::from_help("nvcc: NVIDIA (R) Cuda compiler\n"),
            None
        );
    }
}

//! The option tables against the real tools (issue 20): every option `nvcc --help` lists is in
//! nvcc's table with its value shape, every option `g++ --help=...` lists decodes by GCC's table,
//! and the tokenizer hands the host compiler what `nvcc -dryrun` shows nvcc handing it.

use crate::support::real_nvcc;
use nvcc::cmdline::{self, Sources};
use nvcc::host_options;
use std::process::Command;

/// `(long name, short name, takes a value)` for each option in `nvcc --help`, by the crate's
/// one reader of it.
fn nvcc_help_options(help: &str) -> Vec<(String, String, bool)> {
    nvcc::release::help_options(help)
        .into_iter()
        .map(|o| (o.long, o.short, o.value))
        .collect()
}

#[test]
fn every_option_nvcc_help_lists_is_in_the_table_with_its_value_shape() {
    let Some(nvcc) = real_nvcc() else { return };
    let help = Command::new(nvcc.path())
        .arg("--help")
        .output()
        .expect("run nvcc --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let listed = nvcc_help_options(&help);
    assert!(
        listed.len() > 150,
        "nvcc --help lists its options ({} found)",
        listed.len()
    );
    // `nvcc --help` prints no placeholder for this one, which takes the file's name.
    const TAKES_A_VALUE_UNLISTED: &[&str] = &["--dependency-output"];
    let mut missing = Vec::new();
    for (long, short, listed_value) in &listed {
        let value = &(*listed_value || TAKES_A_VALUE_UNLISTED.contains(&long.as_str()));
        if TAKES_A_VALUE_UNLISTED.contains(&long.as_str()) {
            assert!(
                !listed_value,
                "{long} now shows its value: drop the exception"
            );
        }
        match nvcc::options::find(long).or_else(|| nvcc::options::find(short)) {
            None => missing.push(format!("{long} ({short})")),
            Some(opt) => {
                assert_eq!(
                    opt.value, *value,
                    "{long}: nvcc --help says it takes a value: {value}"
                );
                assert!(
                    opt.long == long.as_str() || opt.short == long.as_str(),
                    "{long} is the table's long name for {short}"
                );
                assert_eq!(opt.short, short.as_str(), "{long}'s short name");
            }
        }
    }
    assert!(
        missing.is_empty(),
        "options nvcc lists that the table lacks: {missing:?}"
    );
}

/// Every option name `g++ --help=<class>` lists (the first word of each option line).
fn gxx_help_options() -> Vec<String> {
    let mut names = Vec::new();
    for class in [
        "common",
        "c++",
        "optimizers",
        "warnings",
        "target",
        "params",
    ] {
        let out = Command::new("g++")
            .args(["-Q", &format!("--help={class}")])
            .output()
            .expect("run g++ --help (install g++; cargo xtask setup does)");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(rest) = line.strip_prefix("  -") else {
                continue;
            };
            let Some(word) = rest.split_whitespace().next() else {
                continue;
            };
            names.push(format!("-{word}"));
        }
    }
    names
}

/// An argument that spells `listed` (a name as `--help` prints it, with `<x>`, `[...]` or `=`
/// placeholders) with a sample value where it takes one.
fn sample_argument(listed: &str) -> Vec<String> {
    let cut = listed.find(['<', '[']).unwrap_or(listed.len());
    let name = &listed[..cut];
    let placeholder = cut < listed.len() || name.ends_with('=');
    if name.ends_with('=') || (placeholder && !name.ends_with(' ')) {
        vec![format!("{name}{}", if placeholder { "1" } else { "" })]
    } else {
        vec![name.to_string()]
    }
}

#[test]
fn every_option_gxx_lists_decodes_by_the_host_table() {
    let version = Command::new("g++").arg("-dumpversion").output();
    let Ok(version) = version else {
        assert!(
            std::env::var_os("XTASK_TEST").is_none_or(|v| v != "1"),
            "XTASK_TEST=1 requires g++"
        );
        return;
    };
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    // The table is GCC 12's: another GCC may list options it lacks (those make a command
    // uncacheable, which is safe); the comparison is exact only against GCC 12.
    if !version.starts_with("12") {
        eprintln!("g++ {version}: the table is GCC 12's; comparison skipped");
        return;
    }
    let mut unknown = Vec::new();
    for listed in gxx_help_options() {
        let arg = sample_argument(&listed);
        if host_options::decode(&arg[0]).is_none() {
            unknown.push(listed);
        }
    }
    assert!(
        unknown.is_empty(),
        "options g++ 12 lists that the host table cannot decode: {unknown:?}"
    );
}

/// The host compiler's own arguments that nvcc hands `gcc -E` for the device pass (from
/// `-dryrun`): the words after nvcc's `-D__NVCC__` and before the first one nvcc quotes (its own
/// `-I"dir"`), decoded by GCC's table as `(option, value)`.
fn dryrun_host_args(
    nvcc: &nvcc::Nvcc,
    args: &[&str],
    env: &[(&str, &str)],
) -> Vec<(&'static str, Option<String>)> {
    let out = Command::new(nvcc.path())
        .arg("-dryrun")
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run nvcc -dryrun");
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text
        .lines()
        .find(|l| l.starts_with("#$ gcc") && l.contains(" -E "))
        .unwrap_or_else(|| panic!("a gcc -E step in: {text}"));
    let start = line.find("-D__NVCC__").expect("nvcc's own define") + "-D__NVCC__".len();
    let words: Vec<&str> = line[start..]
        .split_whitespace()
        .take_while(|w| !w.contains('"'))
        .collect();
    let mut decoded = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let d = host_options::decode(words[i]).unwrap_or_else(|| panic!("gcc got {}", words[i]));
        i += 1;
        let value = if d.needs_next {
            i += 1;
            words.get(i - 1).map(|w| w.to_string())
        } else {
            d.joined
        };
        decoded.push((d.opt.name, value));
    }
    decoded
}

#[test]
fn the_host_compiler_receives_what_the_tokenizer_says_in_its_order() {
    let Some(nvcc) = real_nvcc() else { return };
    /// Arguments, and environment variables.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (
            &[
                "-Xcompiler",
                "-Ia",
                "-I",
                "b",
                "-Xcompiler",
                "-Ic,-isystem,/s2",
            ],
            &[],
        ),
        (
            &["-I", "b", "-Xcompiler", "--include-directory=d"],
            &[
                ("NVCC_PREPEND_FLAGS", "-Xcompiler -Ihpre -Ipre"),
                ("NVCC_APPEND_FLAGS", "-Xcompiler -Ihpost"),
            ],
        ),
        (
            &[
                "-forward-unknown-to-host-compiler",
                "-fPIC",
                "-Xcompiler",
                "-Ix",
                "-Wall",
            ],
            &[],
        ),
        (&["-Xcompiler", "-Wl\\,-rpath\\,x"], &[]),
    ];
    for (args, env) in cases {
        let mut full: Vec<&str> = vec!["-cubin", "-arch=sm_90"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["k.cu", "-o", "k.cubin"]);
        let nvcc_says = dryrun_host_args(&nvcc, &full, env);
        let get = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        let sources = Sources {
            prepend: get("NVCC_PREPEND_FLAGS"),
            append: get("NVCC_APPEND_FLAGS"),
            read_file: &|_| Err(std::io::ErrorKind::NotFound.into()),
        };
        let argv: Vec<String> = full.iter().map(|s| s.to_string()).collect();
        let line = cmdline::parse(&argv, &sources).expect("parses");
        let host: Vec<(&'static str, Option<String>)> = line
            .host
            .iter()
            .map(|h| (h.opt.name, h.value.clone()))
            .collect();
        assert_eq!(
            nvcc_says, host,
            "{args:?} {env:?}: what nvcc hands gcc, and what the tokenizer says"
        );
    }
}

//! Property (issue 20): random command lines drawn from nvcc's and GCC's search-path options in
//! every spelling (short, long, joined, `=`, comma lists through `-Xcompiler`, response files,
//! the environment's flags and `CPATH`/`CPLUS_INCLUDE_PATH`, one directory in two lists), and
//! random additions, edits and removals of headers in every directory involved, the toolkit's
//! `include` and `include/cccl` among them; after every step the launcher's answer equals a bare
//! nvcc's for the same command. Real nvcc 13.5 and g++ 12.

use crate::never_guesses::{toolkit_farm, write, World};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::path::Path;

/// The caller's directories (under the tree) and the toolkit's (under the farm).
const USER_DIRS: [&str; 3] = ["A", "B", "C"];
/// Where a step may write a header: the source's directory, the caller's, the toolkit's.
const PLACES: [&str; 6] = ["src", "A", "B", "C", "tk:include", "tk:include/cccl"];
const NAMES: [&str; 2] = ["x.h", "y.h"];

/// How one directory is given to the compiler.
#[derive(Debug, Clone, Copy)]
enum Spelling {
    /// `-I dir`, `-Idir`, `--include-path=dir`, `--include-path dir`.
    NvccI(u8),
    /// `-isystem dir`, `--system-include=dir`.
    NvccSystem(u8),
    /// `-Xcompiler -Idir`, `-Xcompiler=-I,dir`, `--compiler-options=--include-directory=dir`.
    HostI(u8),
    /// `-Xcompiler -isystem,dir`.
    HostSystem,
    /// `-Xcompiler -iquote,dir`.
    HostQuote,
    /// `-Xcompiler --include-directory-after=dir`.
    HostAfter,
    /// `-I dir` in `NVCC_APPEND_FLAGS` or `NVCC_PREPEND_FLAGS`.
    Environment(bool),
    /// `CPATH` or `CPLUS_INCLUDE_PATH`.
    EnvPath(bool),
    /// `-Xcompiler @opts` holding `-Idir`.
    ResponseFile,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    prop_oneof![
        (0u8..4).prop_map(Spelling::NvccI),
        (0u8..2).prop_map(Spelling::NvccSystem),
        (0u8..3).prop_map(Spelling::HostI),
        Just(Spelling::HostSystem),
        Just(Spelling::HostQuote),
        Just(Spelling::HostAfter),
        any::<bool>().prop_map(Spelling::Environment),
        any::<bool>().prop_map(Spelling::EnvPath),
        Just(Spelling::ResponseFile),
    ]
}

#[derive(Debug, Clone)]
enum Step {
    Write {
        place: usize,
        name: usize,
        value: u32,
    },
    Remove {
        place: usize,
        name: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..PLACES.len(), 0..NAMES.len(), 10u32..99)
            .prop_map(|(place, name, value)| Step::Write { place, name, value }),
        1 => (0..PLACES.len(), 0..NAMES.len()).prop_map(|(place, name)| Step::Remove { place, name }),
    ]
}

/// A command's flags and environment for the given spellings (one per entry: `(dir, how)`).
fn command(tree: &Path, given: &[(usize, Spelling)]) -> (Vec<String>, Vec<(String, String)>) {
    let mut args: Vec<String> = Vec::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut append = Vec::new();
    let mut prepend = Vec::new();
    let mut cpath = Vec::new();
    let mut cplus = Vec::new();
    let mut response = Vec::new();
    for (dir, how) in given {
        let d = USER_DIRS[*dir];
        let words: Vec<String> = match how {
            Spelling::NvccI(0) => vec!["-I".into(), d.into()],
            Spelling::NvccI(1) => vec![format!("-I{d}")],
            Spelling::NvccI(2) => vec![format!("--include-path={d}")],
            Spelling::NvccI(_) => vec!["--include-path".into(), d.into()],
            Spelling::NvccSystem(0) => vec!["-isystem".into(), d.into()],
            Spelling::NvccSystem(_) => vec![format!("--system-include={d}")],
            Spelling::HostI(0) => vec!["-Xcompiler".into(), format!("-I{d}")],
            Spelling::HostI(1) => vec![format!("-Xcompiler=-I,{d}")],
            Spelling::HostI(_) => vec![format!("--compiler-options=--include-directory={d}")],
            Spelling::HostSystem => vec!["-Xcompiler".into(), format!("-isystem,{d}")],
            Spelling::HostQuote => vec!["-Xcompiler".into(), format!("-iquote,{d}")],
            Spelling::HostAfter => vec![format!("-Xcompiler=--include-directory-after={d}")],
            Spelling::Environment(true) => {
                append.push(format!("-I{d}"));
                Vec::new()
            }
            Spelling::Environment(false) => {
                prepend.push(format!("-I {d}"));
                Vec::new()
            }
            Spelling::EnvPath(true) => {
                cpath.push(d.to_string());
                Vec::new()
            }
            Spelling::EnvPath(false) => {
                cplus.push(d.to_string());
                Vec::new()
            }
            Spelling::ResponseFile => {
                response.push(format!("-I{d}"));
                Vec::new()
            }
        };
        args.extend(words);
    }
    if !response.is_empty() {
        write(&tree.join("opts"), &format!("{}\n", response.join(" ")));
        args.extend(["-Xcompiler".into(), "@opts".into()]);
    }
    // The last resort for both headers, after every caller's directory.
    args.extend(["-isystem".into(), "Z".into()]);
    args.extend(["-arch=sm_90".into(), "-cubin".into(), "src/k.cu".into()]);
    for (var, list, sep) in [
        ("NVCC_APPEND_FLAGS", append, " "),
        ("NVCC_PREPEND_FLAGS", prepend, " "),
        ("CPATH", cpath, ":"),
        ("CPLUS_INCLUDE_PATH", cplus, ":"),
    ] {
        if !list.is_empty() {
            env.push((var.to_string(), list.join(sep)));
        }
    }
    (args, env)
}

const KERNEL: &str =
    "#include \"x.h\"\n#include <y.h>\n#define STR2(x) #x\n#define STR(x) STR2(x)\n\
    __constant__ char tag[] = \"VAL=\" STR(VX) \"-\" STR(VY) \";\";\n\
    extern \"C\" __global__ void k(char* out) { out[threadIdx.x] = tag[threadIdx.x]; }\n";

fn header_text(name: &str, value: u32) -> String {
    let macro_name = if name == "x.h" { "VX" } else { "VY" };
    format!("#pragma once\n#define {macro_name} {value}\n")
}

#[test]
fn heavy_the_launcher_answers_what_nvcc_answers_after_every_change() {
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::cell::Cell::new(0u32);
    let strategy = (
        prop::collection::vec((0..USER_DIRS.len(), spelling()), 1..5),
        prop::collection::vec(step(), 2..6),
    );
    runner
        .run(&strategy, |(mut given, steps)| {
            // One directory in two lists (GCC keeps it once, where the system chain has it).
            if given.len() > 1 && given.len() % 2 == 0 {
                let (dir, _) = given[0];
                given.push((dir, Spelling::NvccSystem(0)));
            }
            case.set(case.get() + 1);
            let mut w = World::new();
            w.nvcc = toolkit_farm(&w.nvcc.clone(), &w.path("toolkit"));
            let tree = w.path("tree");
            write(&tree.join("src/k.cu"), KERNEL);
            for d in USER_DIRS {
                std::fs::create_dir_all(tree.join(d)).expect("mkdir");
            }
            for (n, name) in NAMES.iter().enumerate() {
                write(&tree.join("Z").join(name), &header_text(name, 1 + n as u32));
            }
            let (args, env) = command(&tree, &given);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let place = |p: usize| {
                let place = PLACES[p];
                match place.strip_prefix("tk:") {
                    Some(rel) => w.path("toolkit").join(rel),
                    None => tree.join(place),
                }
            };
            for (n, step) in std::iter::once(None)
                .chain(steps.iter().map(Some))
                .enumerate()
            {
                match step {
                    Some(Step::Write {
                        place: p,
                        name,
                        value,
                    }) => {
                        let path = place(*p).join(NAMES[*name]);
                        // The farm's toolkit files are links into the real toolkit: replace a link,
                        // never write through it.
                        let _ = std::fs::remove_file(&path);
                        write(&path, &header_text(NAMES[*name], *value));
                    }
                    Some(Step::Remove { place: p, name }) => {
                        let path = place(*p).join(NAMES[*name]);
                        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_symlink()) {
                            std::fs::remove_file(&path).expect("remove header");
                        }
                    }
                    None => {}
                }
                let (ours, bare) = w.answers(&tree, &args, &env, "VAL=");
                prop_assert_eq!(
                    &ours,
                    &bare,
                    "case {} step {} ({:?}): {:?} {:?}",
                    case.get(),
                    n,
                    step,
                    args,
                    env
                );
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("the launcher agrees with nvcc after every step: {e}"));
}

//! Issue 20, "the cache never guesses": for each class of wrong answer found on the earlier main,
//! the launcher's answer after an edit equals what a bare nvcc answers for the same command, in
//! the same directory, with the real nvcc 13.5 and g++ 12. Each kernel embeds what it saw
//! (`VAL=<n>;` from a header, or `__FILE__`) in its cubin, so an answer is read back as text.
//! Every test here failed on the earlier main (noted at each).

use crate::support::real_nvcc;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_jit-cache");

/// Environment variables for a command.
pub(crate) type Env<'a> = &'a [(&'a str, &'a str)];

/// A kernel that embeds `VALUE` (from whatever `include` brings) in its cubin.
pub(crate) fn kernel(include: &str) -> String {
    format!(
        "{include}\n#ifndef VALUE\n#define VALUE 1\n#endif\n#define STR2(x) #x\n#define STR(x) STR2(x)\n\
         __constant__ char tag[] = \"VAL=\" STR(VALUE) \";\";\n\
         extern \"C\" __global__ void k(char* out) {{ out[threadIdx.x] = tag[threadIdx.x]; }}\n"
    )
}

pub(crate) fn header(value: u32) -> String {
    format!("#pragma once\n#define VALUE {value}\n")
}

pub(crate) fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// The text between `marker` and the next `;` in a cubin.
pub(crate) fn embedded(cubin: &[u8], marker: &str) -> Option<String> {
    let m = marker.as_bytes();
    let at = cubin.windows(m.len()).position(|w| w == m)? + m.len();
    let end = cubin[at..].iter().position(|&b| b == b';')?;
    Some(String::from_utf8_lossy(&cubin[at..at + end]).into_owned())
}

/// One test's world: a directory, a cache, and the real compiler.
pub(crate) struct World {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) nvcc: PathBuf,
}

impl World {
    pub(crate) fn new() -> World {
        World {
            dir: tempfile::tempdir().expect("temp dir"),
            nvcc: real_nvcc(),
        }
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn cache(&self) -> PathBuf {
        self.path("cache")
    }

    pub(crate) fn run(
        &self,
        through_launcher: bool,
        cwd: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Output {
        let mut cmd = if through_launcher {
            let mut cmd = Command::new(LAUNCHER);
            cmd.arg(&self.nvcc);
            cmd
        } else {
            Command::new(&self.nvcc)
        };
        cmd.args(args)
            .current_dir(cwd)
            .env("JIT_CACHE_DIR", self.cache())
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("CPATH")
            .env_remove("CPLUS_INCLUDE_PATH")
            .env_remove("JIT_CACHE_DISABLE")
            .envs(env.iter().copied());
        let out = cmd.output().expect("run the compiler");
        assert!(
            out.status.success(),
            "{args:?} in {}: {}",
            cwd.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// What the launcher and a bare nvcc answer for the command (`-o` is added, one file each),
    /// as (launcher's, bare's) text after `marker`.
    pub(crate) fn answers(
        &self,
        cwd: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        marker: &str,
    ) -> (String, String) {
        let mut got = Vec::new();
        for (launcher, out) in [(true, "launcher.cubin"), (false, "bare.cubin")] {
            let out = self.path(out);
            let _ = std::fs::remove_file(&out);
            let mut full: Vec<&str> = args.to_vec();
            let out_text = out.to_string_lossy().into_owned();
            full.extend(["-o", &out_text]);
            self.run(launcher, cwd, &full, env);
            let bytes = std::fs::read(&out).expect("read the output");
            got.push(embedded(&bytes, marker).unwrap_or_else(|| panic!("{marker} in the output")));
        }
        (got.remove(0), got.remove(0))
    }

    /// The launcher log's counts (`uncacheable: <why>` lines).
    fn log(&self) -> String {
        std::fs::read_to_string(self.cache().join("launcher.log")).unwrap_or_default()
    }
}

/// Asserts the launcher answers as nvcc does, before and after `edit`.
pub(crate) fn agrees_before_and_after(
    w: &World,
    cwd: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    edit: &dyn Fn(),
    what: &str,
) {
    let (ours, bare) = w.answers(cwd, args, env, "VAL=");
    assert_eq!(ours, bare, "{what}: before the edit");
    // Hit the entry once more, so the check after the edit is a hit's, not a build's.
    let (ours, _) = w.answers(cwd, args, env, "VAL=");
    assert_eq!(ours, bare, "{what}: a hit");
    edit();
    let (ours, bare_after) = w.answers(cwd, args, env, "VAL=");
    assert_ne!(bare, bare_after, "{what}: the edit changes nvcc's answer");
    assert_eq!(
        ours, bare_after,
        "{what}: after the edit the launcher answers as nvcc"
    );
}

#[test]
fn heavy_gccs_directory_rules_decide_the_search_order() {
    // `-I A -isystem B -isystem A`: GCC drops A from the -I chain (it is a system directory),
    // so B is searched first. The earlier main kept A at its -I place, recorded no absence in B,
    // and answered 1111 after B/x.h appeared.
    let spellings: &[(&[&str], Env)] = &[
        (&["-I", "A", "-isystem", "B", "-isystem", "A"], &[]),
        (
            &["-Xcompiler", "-IA", "-isystem", "B", "-isystem", "A"],
            &[],
        ),
        (
            &["-Xcompiler", "--include-directory=A"],
            &[("NVCC_APPEND_FLAGS", "-isystem B -isystem A")],
        ),
    ];
    for (n, (flags, env)) in spellings.iter().enumerate() {
        let w = World::new();
        let tree = w.path(&format!("t{n}"));
        write(&tree.join("k.cu"), &kernel("#include <x.h>"));
        write(&tree.join("A/x.h"), &header(1111));
        std::fs::create_dir_all(tree.join("B")).expect("mkdir B");
        let mut args: Vec<&str> = flags.to_vec();
        args.extend(["-arch=sm_90", "-cubin", "k.cu"]);
        agrees_before_and_after(
            &w,
            &tree,
            &args,
            env,
            &|| write(&tree.join("B/x.h"), &header(2222)),
            &format!("{flags:?} {env:?}"),
        );
    }
}

#[test]
fn heavy_host_compiler_options_are_read_by_gccs_table() {
    let w = World::new();
    let tree = w.path("t");
    // A response file: its content is what GCC reads (the earlier main keyed `@opts` as text).
    write(&tree.join("k.cu"), &kernel(""));
    write(&tree.join("opts"), "-DVALUE=1111\n");
    agrees_before_and_after(
        &w,
        &tree,
        &["-Xcompiler", "@opts", "-arch=sm_90", "-cubin", "k.cu"],
        &[],
        &|| write(&tree.join("opts"), "-DVALUE=2222\n"),
        "-Xcompiler @opts",
    );
    // GCC's long spelling of -I: followed (the earlier main passed it through as text, and never
    // looked in D).
    let tree = w.path("u");
    write(&tree.join("k.cu"), &kernel("#include <x.h>"));
    write(&tree.join("E/x.h"), &header(1111));
    std::fs::create_dir_all(tree.join("D")).expect("mkdir D");
    agrees_before_and_after(
        &w,
        &tree,
        &[
            "-Xcompiler",
            "--include-directory=D",
            "-I",
            "E",
            "-arch=sm_90",
            "-cubin",
            "k.cu",
        ],
        &[],
        &|| write(&tree.join("D/x.h"), &header(2222)),
        "--include-directory=D",
    );
    // An option that runs programs nobody hashes, and one GCC's table does not know: nvcc runs
    // unchanged, and the reason is counted.
    for (option, reason) in [
        (
            "-B/usr/lib/gcc/x86_64-linux-gnu/12/",
            "runs or loads other programs",
        ),
        ("--no-such-gcc-option", "not in GCC's option table"),
    ] {
        let args = ["-Xcompiler", option, "-arch=sm_90", "-cubin", "k.cu"];
        let mut cmd = Command::new(LAUNCHER);
        cmd.arg(&w.nvcc)
            .args(args)
            .args(["-o", "x.cubin"])
            .current_dir(&tree);
        cmd.env("JIT_CACHE_DIR", w.cache());
        let _ = cmd.output().expect("run the launcher");
        assert!(
            w.log().contains(&format!(
                "uncacheable: host compiler option {option}: {reason}"
            )),
            "{option}: counted as uncacheable: {}",
            w.log()
        );
    }
}

#[test]
fn heavy_a_file_the_model_cannot_account_for_is_never_cached() {
    // A computed include in a header: GCC looks in that header's own directory first, which
    // the earlier main's conservative record left out; a header added there was never seen.
    let w = World::new();
    let tree = w.path("t");
    write(&tree.join("k.cu"), &kernel("#include <sub/a.h>"));
    write(
        &tree.join("E/sub/a.h"),
        "#define HDR \"b.h\"\n#include HDR\n",
    );
    write(&tree.join("E/b.h"), &header(1111));
    let args = ["-I", "E", "-arch=sm_90", "-cubin", "k.cu"];
    agrees_before_and_after(
        &w,
        &tree,
        &args,
        &[],
        &|| write(&tree.join("E/sub/b.h"), &header(2222)),
        "#include MACRO",
    );
    // The same through a system directory and an angle-bracket macro.
    let tree = w.path("u");
    write(&tree.join("k.cu"), &kernel("#include <sub/a.h>"));
    write(&tree.join("S/sub/a.h"), "#define HDR <b.h>\n#include HDR\n");
    write(&tree.join("S/b.h"), &header(1111));
    std::fs::create_dir_all(tree.join("F")).expect("mkdir F");
    agrees_before_and_after(
        &w,
        &tree,
        &["-I", "F", "-isystem", "S", "-arch=sm_90", "-cubin", "k.cu"],
        &[],
        &|| write(&tree.join("F/b.h"), &header(2222)),
        "#include <MACRO>",
    );
}

/// A copy of the toolkit whose `include` and `include/cccl` are directories of links to the real
/// ones (so a test can add a header there), everything else links: nvcc finds itself, its
/// profile and its tools through the path it is run by.
pub(crate) fn toolkit_farm(real_nvcc: &Path, at: &Path) -> PathBuf {
    let real_bin = real_nvcc.parent().expect("bin");
    let real_top = real_bin.parent().expect("toolkit root");
    let link_all = |from: &Path, to: &Path, except: &[&str]| {
        std::fs::create_dir_all(to).expect("mkdir farm dir");
        for entry in std::fs::read_dir(from).expect("list toolkit dir") {
            let entry = entry.expect("entry");
            let name = entry.file_name();
            if except.iter().any(|e| name == *e) {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), to.join(&name)).expect("link");
        }
    };
    link_all(real_top, at, &["bin", "include"]);
    link_all(real_bin, &at.join("bin"), &[]);
    link_all(&real_top.join("include"), &at.join("include"), &["cccl"]);
    link_all(
        &real_top.join("include/cccl"),
        &at.join("include/cccl"),
        &[],
    );
    at.join("bin/nvcc")
}

#[test]
fn heavy_headers_added_to_the_toolkits_directories_are_seen() {
    // The earlier main recorded no absence in the toolkit's directories: a header added to the
    // toolkit's `include` (every pip `nvidia-*` wheel installs into the same one), shadowing one
    // found later, was never seen, not even by a new process.
    let mut w = World::new();
    w.nvcc = toolkit_farm(&real_nvcc(), &w.path("toolkit"));
    let tk = w.path("toolkit");
    let tree = w.path("t");
    write(&tree.join("k.cu"), &kernel("#include <x.h>"));
    write(&tree.join("S/x.h"), &header(1111));
    agrees_before_and_after(
        &w,
        &tree,
        &["-isystem", "S", "-arch=sm_90", "-cubin", "k.cu"],
        &[],
        &|| write(&tk.join("include/x.h"), &header(2222)),
        "the toolkit's include before -isystem",
    );
    // CPLUS_INCLUDE_PATH comes after the toolkit's include/cccl (the earlier main put it before).
    let tree = w.path("u");
    write(&tree.join("k.cu"), &kernel("#include <y.h>"));
    write(&tree.join("P/y.h"), &header(1111));
    let p = tree.join("P").to_string_lossy().into_owned();
    agrees_before_and_after(
        &w,
        &tree,
        &["-arch=sm_90", "-cubin", "k.cu"],
        &[("CPLUS_INCLUDE_PATH", &p)],
        &|| write(&tk.join("include/cccl/y.h"), &header(2222)),
        "include/cccl before CPLUS_INCLUDE_PATH",
    );
    // A toolkit header found in include/cccl, shadowed by one added to the toolkit's include.
    let tree = w.path("v");
    write(&tree.join("k.cu"), &kernel("#include <cuda/std/version>"));
    agrees_before_and_after(
        &w,
        &tree,
        &["-arch=sm_90", "-cubin", "k.cu"],
        &[],
        &|| write(&tk.join("include/cuda/std/version"), &header(2222)),
        "a CCCL header shadowed in the toolkit's include",
    );
}

#[test]
fn heavy_paths_the_output_embeds_are_keyed() {
    // `__FILE__` names the source as nvcc is given it: an identical k.cu in another checkout,
    // spelled by its absolute path, got the first checkout's bytes on the earlier main.
    let w = World::new();
    let source = "#define STR2(x) #x\n__constant__ char where[] = \"FILE=\" __FILE__ \";\";\n\
                  extern \"C\" __global__ void k(char* out) { out[threadIdx.x] = where[threadIdx.x]; }\n";
    for tree in ["a", "b"] {
        write(&w.path(tree).join("k.cu"), source);
    }
    for tree in ["a", "b"] {
        let k = w.path(tree).join("k.cu").to_string_lossy().into_owned();
        let (ours, bare) = w.answers(w.dir.path(), &["-arch=sm_90", "-cubin", &k], &[], "FILE=");
        assert_eq!(ours, bare, "{tree}: __FILE__ of an absolute spelling");
        assert!(ours.contains(&format!("/{tree}/k.cu")), "{ours}");
    }
    // Spelled relatively, the two checkouts are one command: one entry serves both.
    for tree in ["a", "b"] {
        let (ours, bare) = w.answers(
            &w.path(tree),
            &["-arch=sm_90", "-cubin", "k.cu"],
            &[],
            "FILE=",
        );
        assert_eq!(ours, bare, "{tree}: __FILE__ of a relative spelling");
        assert_eq!(ours, "k.cu");
    }
    // Debug information names the working directory: asked for through the environment, the
    // host compiler's options or nvcc's own, two checkouts never share an object.
    // (A cubin, not an object, for device debug information: an object's fatbin is compressed.)
    for (flags, env) in [
        (&["-cubin"][..], &[("NVCC_APPEND_FLAGS", "-G")][..]),
        (&["-c", "-Xcompiler=-g,-O0"], &[]),
        (&["-cubin", "-lineinfo"], &[]),
    ] {
        for tree in ["a", "b"] {
            let cwd = w.path(tree);
            let mut args: Vec<&str> = flags.to_vec();
            args.extend(["-arch=sm_90", "k.cu", "-o", "k.out"]);
            w.run(true, &cwd, &args, env);
            let object = std::fs::read(cwd.join("k.out")).expect("output");
            let own = cwd.to_string_lossy().into_owned();
            assert!(
                object.windows(own.len()).any(|win| win == own.as_bytes()),
                "{flags:?} {env:?}: the object built in {tree} names its directory (else this \
                 test proves nothing)"
            );
            let other = if tree == "a" { "b" } else { "a" };
            let other_dir = w.path(other).to_string_lossy().into_owned();
            assert!(
                !object
                    .windows(other_dir.len())
                    .any(|win| win == other_dir.as_bytes()),
                "{flags:?} {env:?}: the object built in {tree} names no other checkout"
            );
        }
    }
}

#[test]
fn heavy_answers_that_depend_on_the_host_are_not_cached() {
    // `-arch=native` compiles for this host's GPUs (nvcc's fallback on a host without one): the
    // earlier main keyed it as the text `native` and served that cubin to every host.
    let w = World::new();
    let tree = w.path("t");
    write(&tree.join("k.cu"), &kernel(""));
    for (args, why) in [
        (&["-arch=native", "-cubin", "k.cu"][..], "native"),
        (
            &["--gpu-architecture", "native", "-cubin", "k.cu"],
            "native",
        ),
        (
            &["-arch=sm_90", "-Xcompiler", "-march=native", "-c", "k.cu"],
            "depends on the machine it runs on",
        ),
    ] {
        let before = w.log().lines().count();
        let mut cmd = Command::new(LAUNCHER);
        cmd.arg(&w.nvcc)
            .args(args)
            .args(["-o", "x.out"])
            .current_dir(&tree)
            .env("JIT_CACHE_DIR", w.cache());
        let out = cmd.output().expect("run the launcher");
        assert!(out.status.success(), "{args:?}: nvcc runs: {out:?}");
        let log = w.log();
        let line = log.lines().nth(before).unwrap_or_default();
        assert!(
            line.starts_with("uncacheable: ") && line.contains(why),
            "{args:?}: counted as uncacheable ({why}): {log}"
        );
    }
}

/// A cubin with its temporary files' names made neutral (`tmpxft_<pid>_<n>`, two fields of 8 hex
/// digits in ptxas's recorded command line): bare nvcc's own debug cubins differ only there from
/// run to run. `<n>` is not always 0: nvcc counts up past a leftover temp of an earlier process
/// with the same pid (seen in a full test run: `_00000001`).
fn without_pids(cubin: &[u8]) -> Vec<u8> {
    let mut out = cubin.to_vec();
    let marker = b"tmpxft_";
    let mut at = 0;
    while let Some(found) = out[at..].windows(marker.len()).position(|w| w == marker) {
        let fields = at + found + marker.len();
        // `%08x_%08x`: each hex digit zeroed, the `_` between them kept.
        for b in out.iter_mut().skip(fields).take(17) {
            if b.is_ascii_hexdigit() {
                *b = b'0';
            }
        }
        at = fields;
    }
    out
}

fn names(cubin: &[u8], name: &str) -> bool {
    cubin.windows(name.len()).any(|w| w == name.as_bytes())
}

#[test]
fn heavy_a_debug_cubin_names_the_file_its_command_names() {
    // A cubin with device debug information records ptxas's `-o` file name: on the earlier
    // main the launcher's said `artifact.cubin` (the cache's name) where bare nvcc's says the
    // user's, and one entry served every name.
    let w = World::new();
    write(
        &w.path("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\n",
    );
    let cwd = w.dir.path();
    for (debug, env) in [
        (&["-G"][..], &[][..]),
        (&["-Xptxas=-g"], &[]),
        (&[], &[("NVCC_APPEND_FLAGS", "-G")]),
    ] {
        let mut first_answer = None;
        for name in ["first.cubin", "second.cubin", "first.cubin"] {
            let out = format!("out/{name}");
            let mut args: Vec<&str> = debug.to_vec();
            args.extend(["-cubin", "-arch=sm_90", "k.cu", "-o", &out]);
            std::fs::create_dir_all(cwd.join("out")).expect("mkdir out");
            w.run(false, cwd, &args, env);
            let bare = std::fs::read(cwd.join(&out)).expect("bare output");
            w.run(true, cwd, &args, env);
            let ours = std::fs::read(cwd.join(&out)).expect("launcher output");
            assert!(
                names(&bare, name),
                "{debug:?} {env:?}: bare nvcc's cubin names {name} (else this test proves nothing)"
            );
            assert!(
                !names(&ours, "artifact.cubin"),
                "{debug:?} {env:?}: the cache's own name is in the answer"
            );
            assert_eq!(
                without_pids(&ours),
                without_pids(&bare),
                "{debug:?} {env:?} -o {out}: the answer is bare nvcc's, but for process ids"
            );
            // The third command is the first's: a hit, the first answer's very bytes.
            match (name, &first_answer) {
                ("first.cubin", None) => first_answer = Some(ours),
                ("first.cubin", Some(first)) => {
                    assert_eq!(
                        &ours, first,
                        "{debug:?} {env:?}: the first name's entry hits"
                    )
                }
                _ => {}
            }
        }
    }
}

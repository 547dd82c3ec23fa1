//! The nvcc launcher (`jit-cache nvcc ...`, `jit-cache /path/to/nvcc ...`, a symlink named
//! `nvcc`) against the real nvcc and real build tools: ninja, make and CMake (installed by
//! `cargo xtask setup`; a missing tool fails these tests).
//!
//! The project under `tests/fixtures/launcher-project` has objects with host code (one with
//! internal-linkage device code, whose cicc module id differs from run to run), a cubin, a PTX
//! and a fatbin, and headers shared between them. Compiles are counted with a wrapper compiler.

use crate::support::{real_nvcc, set_mtime, write_executable, CountingCompiler};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_jit-cache");

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/launcher-project")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create project dir");
    for entry in std::fs::read_dir(from).expect("read fixture") {
        let entry = entry.expect("fixture entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy fixture file");
        }
    }
}

/// A tool from `cargo xtask setup`; its absence fails the test, never skips it.
pub(crate) fn tool(name: &str) -> Command {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false);
    assert!(found, "`{name}` is not installed: run `cargo xtask setup`");
    Command::new(name)
}

pub(crate) fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: spawn: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A project copy, a cache and a counting compiler.
struct Setup {
    _dir: tempfile::TempDir,
    project: PathBuf,
    cache: PathBuf,
    counter: CountingCompiler,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let project = dir.path().join("project");
        copy_dir(&fixture(), &project);
        let cache = dir.path().join("cache");
        let counter = CountingCompiler::new(dir.path());
        Setup {
            project,
            cache,
            counter,
            _dir: dir,
        }
    }

    /// A command with the launcher's environment: the cache, and the counting compiler as the
    /// real nvcc.
    fn env(&self, cmd: &mut Command) {
        cmd.env("JIT_CACHE_DIR", &self.cache)
            .env("NVCC", &self.counter.path)
            .env_remove("NVCC_APPEND_FLAGS")
            .env_remove("NVCC_PREPEND_FLAGS")
            .env_remove("JIT_CACHE_DISABLE");
    }

    fn ninja(&self, build_dir: &str, args: &[&str]) -> Output {
        let mut cmd = tool("ninja");
        cmd.arg("-C").arg(self.project.join(build_dir)).args(args);
        self.env(&mut cmd);
        run_ok(&mut cmd, &format!("ninja -C {build_dir} {args:?}"))
    }
}

/// The units of the project: (output, rule, source).
const UNITS: &[(&str, &str, &str)] = &[
    ("scale.o", "obj", "../src/scale.cu"),
    ("add.o", "obj", "../src/add.cu"),
    ("kern.cubin", "cubin", "../src/kern.cu"),
    ("kern.ptx", "ptx", "../src/kern_ptx.cu"),
    ("fat.fatbin", "fatbin", "../src/fat.cu"),
];

/// A `build.ninja` whose rules run `compiler`; every dependency-file spelling appears once.
fn ninja_file(compiler: &str, deps_gcc: bool) -> String {
    let deps = if deps_gcc { "  deps = gcc\n" } else { "" };
    let mut text = format!(
        "nvcc = {compiler}\nflags = -I../include -O2 -std=c++17\n\
         rule obj\n  command = $nvcc $flags -arch=sm_90 -MD -MF $out.d -c $in -o $out\n  depfile = $out.d\n{deps}\
         rule cubin\n  command = $nvcc $flags --gpu-architecture sm_90 --generate-dependencies-with-compile --dependency-output $out.d -cubin $in -o $out\n  depfile = $out.d\n{deps}\
         rule ptx\n  command = $nvcc $flags -arch compute_90 -MMD -MP -MF $out.d --ptx $in --output-file $out\n  depfile = $out.d\n{deps}\
         rule fatbin\n  command = $nvcc $flags -gencode arch=compute_80,code=sm_80 --generate-code=arch=compute_90,code=compute_90 -MD -MT $out -MF $out.d -fatbin $in -o $out\n  depfile = $out.d\n{deps}"
    );
    for (out, rule, src) in UNITS {
        text.push_str(&format!("build {out}: {rule} {src}\n"));
    }
    text
}

fn write_ninja(project: &Path, build_dir: &str, compiler: &str, deps_gcc: bool) {
    let dir = project.join(build_dir);
    std::fs::create_dir_all(&dir).expect("create build dir");
    std::fs::write(dir.join("build.ninja"), ninja_file(compiler, deps_gcc)).expect("write ninja");
}

fn launcher_command() -> String {
    format!("{LAUNCHER} nvcc")
}

/// Whether two artifacts are equal except inside nvcc's per-process names: every byte that
/// differs lies in an identifier token containing cicc's module id (`_INTERNAL_...`) or nvcc's
/// temporary file name (`tmpxft_<pid>_...`): the host object's file symbol, and the static
/// initialiser GCC names after it (`_GLOBAL__sub_I_tmpxft_...`, in a unit with host globals
/// to construct, as FlashInfer's). Two bare nvcc runs differ in exactly these.
pub(crate) fn same_modulo_module_id(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    (0..a.len()).filter(|&i| a[i] != b[i]).all(|i| {
        let mut start = i;
        while start > 0 && ident(a[start - 1]) {
            start -= 1;
        }
        let mut end = i;
        while end < a.len() && ident(a[end]) {
            end += 1;
        }
        let token = &a[start..end];
        token.windows(10).any(|w| w == b"_INTERNAL_") || token.windows(7).any(|w| w == b"tmpxft_")
    })
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Asserts `dir`'s outputs match `reference`'s modulo the module id, and their dependency files
/// byte for byte (`depfiles` names them).
fn assert_like(reference: &Path, dir: &Path, outputs: &[&str], depfiles: &[&str]) {
    for out in outputs {
        assert!(
            same_modulo_module_id(&read(&reference.join(out)), &read(&dir.join(out))),
            "{out}: the launcher's output equals bare nvcc's modulo cicc's module id"
        );
    }
    for dep in depfiles {
        let (got, want) = (read(&dir.join(dep)), read(&reference.join(dep)));
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            got == want,
            "{dep}: the launcher writes nvcc's dependency file byte for byte; lengths {} and {}, \
             first difference at {first:?}: {:?} vs {:?}",
            got.len(),
            want.len(),
            String::from_utf8_lossy(
                &got[first.unwrap_or(0).saturating_sub(40)..got.len().min(first.unwrap_or(0) + 40)]
            ),
            String::from_utf8_lossy(
                &want[first.unwrap_or(0).saturating_sub(40)
                    ..want.len().min(first.unwrap_or(0) + 40)]
            ),
        );
    }
}

fn ninja_lines_to_run(out: &Output) -> usize {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('['))
        .count()
}

#[test]
fn heavy_launcher_builds_a_project_with_ninja_make_and_cmake() {
    let s = Setup::new();
    let outputs: Vec<&str> = UNITS.iter().map(|u| u.0).collect();
    let depfiles: Vec<String> = outputs.iter().map(|o| format!("{o}.d")).collect();
    let depfiles: Vec<&str> = depfiles.iter().map(String::as_str).collect();

    // An uncached reference build, then the same build through the launcher in a sibling
    // directory (so the two spell paths alike).
    write_ninja(&s.project, "ref", &real_nvcc().to_string_lossy(), false);
    s.ninja("ref", &[]);
    write_ninja(&s.project, "b1", &launcher_command(), false);
    s.ninja("b1", &[]);
    assert_eq!(s.counter.compiles(), UNITS.len(), "one compile per unit");
    let b1 = s.project.join("b1");
    assert_like(&s.project.join("ref"), &b1, &outputs, &depfiles);
    let first: Vec<Vec<u8>> = outputs.iter().map(|o| read(&b1.join(o))).collect();

    // Cleaned, the rebuild is all hits, with the same bytes and dependency files.
    s.ninja("b1", &["-t", "clean"]);
    s.ninja("b1", &[]);
    assert_eq!(
        s.counter.compiles(),
        UNITS.len(),
        "after `ninja -t clean` every unit is a hit"
    );
    for (out, bytes) in outputs.iter().zip(&first) {
        assert_eq!(
            &read(&b1.join(out)),
            bytes,
            "{out}: a hit writes the compiled bytes"
        );
    }
    assert_like(&s.project.join("ref"), &b1, &[], &depfiles);
    let dry = s.ninja("b1", &["-n"]);
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains("no work to do"),
        "after the rebuild ninja has no work: {}",
        String::from_utf8_lossy(&dry.stdout)
    );

    // make, with -MMD -MP and nvcc's default dependency-file names, in another directory: its
    // entries are the ninja build's (the output path and depfile never enter the key).
    let makefile = |compiler: &str| {
        format!(
            "CUDA_CC = {compiler}\nFLAGS = -I../include -O2 -std=c++17\nall: scale.o add.o kern.cubin\n\
             %.o: ../src/%.cu\n\t$(CUDA_CC) $(FLAGS) -arch=sm_90 -MMD -MP -c $< -o $@\n\
             kern.cubin: ../src/kern.cu\n\t$(CUDA_CC) $(FLAGS) --gpu-architecture=sm_90 -MMD -MP -cubin $< -o $@\n\
             -include scale.d add.d kern.d\n"
        )
    };
    for (dir, compiler) in [
        ("mkref", real_nvcc().to_string_lossy().into_owned()),
        ("mk", launcher_command()),
    ] {
        std::fs::create_dir_all(s.project.join(dir)).expect("make dir");
        std::fs::write(s.project.join(dir).join("Makefile"), makefile(&compiler))
            .expect("write Makefile");
        let mut make = tool("make");
        make.arg("-C").arg(s.project.join(dir));
        s.env(&mut make);
        run_ok(&mut make, &format!("make in {dir}"));
    }
    assert_eq!(
        s.counter.compiles(),
        UNITS.len(),
        "make's commands hit the ninja build's entries"
    );
    assert_like(
        &s.project.join("mkref"),
        &s.project.join("mk"),
        &["scale.o", "add.o", "kern.cubin"],
        &["scale.d", "add.d", "kern.d"],
    );
    let mut up_to_date = tool("make");
    up_to_date.arg("-q").arg("-C").arg(s.project.join("mk"));
    s.env(&mut up_to_date);
    assert!(
        up_to_date.status().expect("run make -q").success(),
        "make sees everything up to date"
    );

    // A shared header edited: exactly its dependents rebuild (not kern.ptx), each compiled once.
    let common = s.project.join("include/common.cuh");
    let mut text = std::fs::read_to_string(&common).expect("read header");
    text.push_str("#define EDITED 1\n");
    std::fs::write(&common, text).expect("edit header");
    let rebuilt = s.ninja("b1", &[]);
    assert_eq!(
        ninja_lines_to_run(&rebuilt),
        4,
        "scale.o, add.o, kern.cubin and fat.fatbin rebuild"
    );
    assert_eq!(
        s.counter.compiles(),
        UNITS.len() + 4,
        "each dependent compiles once"
    );
    let dry = s.ninja("b1", &["-n"]);
    assert!(String::from_utf8_lossy(&dry.stdout).contains("no work to do"));
    let mut make_dry = tool("make");
    make_dry.arg("-n").arg("-C").arg(s.project.join("mk"));
    s.env(&mut make_dry);
    let planned = String::from_utf8_lossy(&run_ok(&mut make_dry, "make -n").stdout).into_owned();
    assert_eq!(
        planned
            .lines()
            .filter(|l| l.contains(" -c ") || l.contains(" -cubin "))
            .count(),
        3,
        "make's dependency files name the edited header for all three units: {planned}"
    );

    // Two build directories at once, on an empty cache, with ninja's `deps = gcc`: each unit
    // compiles once between them.
    let before = s.counter.compiles();
    let cache2 = s.project.join("cache2");
    for dir in ["b2", "b3"] {
        write_ninja(&s.project, dir, &launcher_command(), true);
    }
    let children: Vec<_> = ["b2", "b3"]
        .iter()
        .map(|dir| {
            let mut cmd = tool("ninja");
            cmd.arg("-C").arg(s.project.join(dir));
            s.env(&mut cmd);
            cmd.env("JIT_CACHE_DIR", &cache2)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn ninja")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait for ninja");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    assert_eq!(
        s.counter.compiles() - before,
        UNITS.len(),
        "two build directories at once compile each unit once"
    );
    for out in &outputs {
        assert_eq!(
            read(&s.project.join("b2").join(out)),
            read(&s.project.join("b3").join(out)),
            "{out}: both directories got the one compile's bytes"
        );
    }

    // CMake with CMAKE_CUDA_COMPILER_LAUNCHER: the launcher runs as `jit-cache /path/to/nvcc`.
    std::fs::write(
        s.project.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.18)\nproject(launcher_test LANGUAGES CUDA)\n\
         add_library(objs OBJECT src/scale.cu src/add.cu)\n\
         target_include_directories(objs PRIVATE include)\n\
         set_property(TARGET objs PROPERTY CUDA_ARCHITECTURES 90)\n",
    )
    .expect("write CMakeLists.txt");
    let mut configure = tool("cmake");
    configure
        .arg("-S")
        .arg(&s.project)
        .arg("-B")
        .arg(s.project.join("cm"))
        .args(["-G", "Ninja"])
        .arg(format!(
            "-DCMAKE_CUDA_COMPILER={}",
            s.counter.path.display()
        ))
        .arg(format!("-DCMAKE_CUDA_COMPILER_LAUNCHER={LAUNCHER}"));
    s.env(&mut configure);
    run_ok(&mut configure, "cmake configure");
    let before = s.counter.compiles();
    s.ninja("cm", &[]);
    assert_eq!(
        s.counter.compiles() - before,
        2,
        "CMake's two units compile once each"
    );
    s.ninja("cm", &["-t", "clean"]);
    s.ninja("cm", &[]);
    assert_eq!(
        s.counter.compiles() - before,
        2,
        "after clean, CMake's build is all hits"
    );
    let dry = s.ninja("cm", &["-n"]);
    assert!(String::from_utf8_lossy(&dry.stdout).contains("no work to do"));
    let stats = run_ok(
        Command::new(LAUNCHER)
            .arg("--cache-dir")
            .arg(&s.cache)
            .arg("stats"),
        "stats",
    );
    assert!(
        !String::from_utf8_lossy(&stats.stdout).contains("uncacheable"),
        "no command of these builds was uncacheable: {}",
        String::from_utf8_lossy(&stats.stdout)
    );
}

/// One unit compiled through the launcher in `dir`, with `env`.
fn compile_one(s: &Setup, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(LAUNCHER);
    cmd.arg("nvcc").args(args).current_dir(&s.project);
    s.env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run launcher")
}

#[test]
fn heavy_launcher_env_flags_rebuild_and_concurrent_commands_compile_once() {
    let s = Setup::new();
    let args = [
        "-I",
        "include",
        "-arch=sm_90",
        "-cubin",
        "src/kern.cu",
        "-o",
        "k.cubin",
    ];
    let out = compile_one(&s, &args, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plain = read(&s.project.join("k.cubin"));
    for (var, value) in [
        ("NVCC_APPEND_FLAGS", "-DBLOCK_EXTRA=1 -Xptxas=-O1"),
        ("NVCC_PREPEND_FLAGS", "-Xptxas=-O1"),
    ] {
        let before = s.counter.compiles();
        let out = compile_one(&s, &args, &[(var, value)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            s.counter.compiles(),
            before + 1,
            "a new {var} compiles again"
        );
        let again = compile_one(&s, &args, &[(var, value)]);
        assert!(again.status.success());
        assert_eq!(s.counter.compiles(), before + 1, "the same {var} hits");
    }
    let out = compile_one(&s, &args, &[]);
    assert!(out.status.success());
    assert_eq!(
        read(&s.project.join("k.cubin")),
        plain,
        "without the variables, the first entry"
    );

    // Eight identical command lines at once, on a new source: one compile.
    std::fs::write(
        s.project.join("src/eight.cu"),
        "extern \"C\" __global__ void eight(float* x) { x[threadIdx.x] += 8.0f; }\n",
    )
    .expect("write source");
    let before = s.counter.compiles();
    let children: Vec<_> = (0..8)
        .map(|_| {
            let mut cmd = Command::new(LAUNCHER);
            cmd.args([
                "nvcc",
                "-arch=sm_90",
                "-cubin",
                "src/eight.cu",
                "-o",
                "eight.cubin",
            ])
            .current_dir(&s.project)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            s.env(&mut cmd);
            cmd.spawn().expect("spawn launcher")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        s.counter.compiles() - before,
        1,
        "8 concurrent identical commands compile once"
    );
    assert_eq!(
        &read(&s.project.join("eight.cubin"))[..4],
        b"\x7fELF",
        "a whole cubin"
    );
}

#[test]
fn heavy_launcher_forms_default_names_diagnostics_and_fallbacks() {
    let s = Setup::new();
    let dir = &s.project;
    std::fs::write(
        dir.join("warn.cu"),
        "__global__ void w(float* x) { int unused; x[0] = 1.0f; }\n",
    )
    .expect("write source");
    // Bare nvcc's answer, in a copy of the directory.
    let bare = dir.join("bare");
    std::fs::create_dir_all(&bare).expect("mkdir");
    std::fs::copy(dir.join("warn.cu"), bare.join("warn.cu")).expect("copy");
    let reference = Command::new(real_nvcc())
        .args(["-arch=sm_90", "-cubin", "-MMD", "warn.cu"])
        .current_dir(&bare)
        .output()
        .expect("run nvcc");
    assert!(reference.status.success());

    // The binary named `nvcc` on PATH finds the real compiler without finding itself.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    std::os::unix::fs::symlink(LAUNCHER, bin.join("nvcc")).expect("symlink nvcc");
    let real_dir = s.counter.path.parent().expect("wrapper dir").to_path_buf();
    let path = std::env::join_paths([
        bin.clone(),
        real_dir,
        PathBuf::from("/usr/bin"),
        PathBuf::from("/bin"),
    ])
    .expect("join PATH");
    let masquerade = |args: &[&str]| {
        let mut cmd = Command::new(bin.join("nvcc"));
        cmd.args(args).current_dir(dir);
        s.env(&mut cmd);
        cmd.env_remove("NVCC").env("PATH", &path);
        cmd.output().expect("run nvcc symlink")
    };
    // `-cubin` without `-c` or `-o`: nvcc's default names (warn.cubin, warn.d with target warn.o).
    for round in ["miss", "hit"] {
        let out = masquerade(&["-arch=sm_90", "-cubin", "-MMD", "warn.cu"]);
        assert!(
            out.status.success(),
            "{round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(s.counter.compiles(), 1, "{round}: `nvcc -cubin` is cached");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&reference.stderr),
            "{round}: nvcc's warning replayed exactly"
        );
        assert_eq!(
            read(&dir.join("warn.d")),
            read(&bare.join("warn.d")),
            "{round}: default dependency file name, target and contents"
        );
        assert_eq!(
            read(&dir.join("warn.cubin")),
            read(&bare.join("warn.cubin"))
        );
    }

    // A compile error: nvcc's own diagnostics and exit status.
    std::fs::write(
        dir.join("bad.cu"),
        "__global__ void b() { undefined_name(); }\n",
    )
    .expect("write bad source");
    std::fs::copy(dir.join("bad.cu"), bare.join("bad.cu")).expect("copy");
    let want = Command::new(real_nvcc())
        .args(["-arch=sm_90", "-c", "bad.cu"])
        .current_dir(&bare)
        .output()
        .expect("run nvcc");
    let got = compile_one(&s, &["-arch=sm_90", "-c", "bad.cu"], &[]);
    assert_eq!(got.status.code(), want.status.code(), "nvcc's exit status");
    assert_eq!(
        String::from_utf8_lossy(&got.stderr),
        String::from_utf8_lossy(&want.stderr),
        "nvcc's diagnostics"
    );

    // Uncacheable commands run nvcc unchanged and are counted by reason.
    let pre = compile_one(&s, &["-E", "warn.cu"], &[]);
    let pre_want = Command::new(real_nvcc())
        .args(["-E", "warn.cu"])
        .current_dir(&bare)
        .output()
        .expect("run nvcc -E");
    assert!(pre.status.success());
    assert_eq!(
        pre.stdout.len(),
        pre_want.stdout.len(),
        "-E output passes through"
    );
    let unknown = compile_one(&s, &["-c", "--no-such-option", "warn.cu"], &[]);
    assert!(
        !unknown.status.success(),
        "nvcc refuses an unknown option itself"
    );
    let stats = run_ok(
        Command::new(LAUNCHER)
            .arg("--cache-dir")
            .arg(&s.cache)
            .arg("stats"),
        "stats",
    );
    let stats = String::from_utf8_lossy(&stats.stdout);
    assert!(
        stats.contains("launcher uncacheable: --preprocess: 1"),
        "{stats}"
    );
    assert!(
        stats.contains("launcher uncacheable: --no-such-option: 1"),
        "{stats}"
    );
}

#[test]
fn heavy_launcher_keeps_an_identical_output_replaces_a_different_one_and_never_a_link() {
    use std::os::unix::fs::MetadataExt;
    let s = Setup::new();
    let dir = &s.project;
    let args = [
        "-arch=sm_90",
        "-cubin",
        "-MD",
        "src/kern.cu",
        "-Iinclude",
        "-o",
        "k.cubin",
    ];
    let run = |what: &str| {
        let out = compile_one(&s, &args, &[]);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run("miss");
    let artifact = read(&dir.join("k.cubin"));
    let depfile = read(&dir.join("k.d"));
    // A rerun that hits with the same bytes already there keeps the file and moves its mtime
    // to now, as a rewrite would for a build system.
    set_mtime(&dir.join("k.cubin"), 1_000_000_000);
    let before = std::fs::metadata(dir.join("k.cubin")).expect("stat");
    run("hit over the same bytes");
    let after = std::fs::metadata(dir.join("k.cubin")).expect("stat");
    assert_eq!(after.ino(), before.ino(), "the identical output is kept");
    assert!(
        after.mtime() > 1_000_000_000 + 86_400,
        "its mtime is now, as after a rewrite"
    );
    assert_eq!(read(&dir.join("k.cubin")), artifact);
    assert_eq!(read(&dir.join("k.d")), depfile);
    // Other bytes (another compiler's output, same length or not) are replaced whole.
    for other in [vec![b'x'; artifact.len()], b"short".to_vec()] {
        std::fs::write(dir.join("k.cubin"), &other).expect("write other bytes");
        let before = std::fs::metadata(dir.join("k.cubin")).expect("stat");
        run("hit over other bytes");
        assert_ne!(
            std::fs::metadata(dir.join("k.cubin")).expect("stat").ino(),
            before.ino(),
            "a different output is replaced by rename"
        );
        assert_eq!(read(&dir.join("k.cubin")), artifact);
    }
    assert_eq!(s.counter.compiles(), 1, "every rerun was a hit");
    // An output that is a symlink is nvcc's to write through: the launcher never replaces it.
    std::fs::remove_file(dir.join("k.cubin")).expect("remove output");
    std::fs::write(dir.join("target.cubin"), b"old").expect("write link target");
    std::os::unix::fs::symlink("target.cubin", dir.join("k.cubin")).expect("symlink output");
    run("output through a symlink");
    assert!(
        std::fs::symlink_metadata(dir.join("k.cubin"))
            .expect("lstat")
            .file_type()
            .is_symlink(),
        "the link stays a link"
    );
    assert!(
        same_modulo_module_id(&read(&dir.join("target.cubin")), &artifact),
        "nvcc wrote through it"
    );
    assert_eq!(s.counter.compiles(), 2, "nvcc ran for the linked output");
}

#[test]
fn a_killed_launcher_leaves_no_partial_output() {
    let s = Setup::new();
    // A compiler that answers `--version` and then hangs in every compile, after saying so.
    let started = s.project.join("started");
    let fake = s.project.join("fake-bin/nvcc");
    std::fs::create_dir_all(fake.parent().expect("parent")).expect("mkdir");
    write_executable(
        &fake,
        &format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" -dryrun \"*) exec '{}' \"$@\" ;; esac\n: > '{}'\nexec sleep 600\n",
            real_nvcc().display(),
            started.display()
        ),
    );
    std::fs::write(s.project.join("old.cubin"), b"old complete output").expect("write old output");
    let mut cmd = Command::new(LAUNCHER);
    cmd.args([
        "nvcc",
        "-arch=sm_90",
        "-cubin",
        "src/kern.cu",
        "-Iinclude",
        "-o",
        "old.cubin",
    ])
    .current_dir(&s.project)
    .stderr(Stdio::null());
    s.env(&mut cmd);
    cmd.env("NVCC", &fake);
    let mut child = cmd.spawn().expect("spawn launcher");
    // Wait for the compile to start (the fake says so by creating a file).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the compile never started"
        );
        if let Some(status) = child.try_wait().expect("poll launcher") {
            panic!("the launcher exited before compiling: {status}");
        }
        // Polling for a condition (the file), not sleeping in place of synchronisation.
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().expect("kill -9 the launcher");
    child.wait().expect("reap");
    assert_eq!(
        read(&s.project.join("old.cubin")),
        b"old complete output",
        "the old output is untouched"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&s.project)
        .expect("read dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("cubin") && n != "old.cubin")
        .collect();
    assert!(
        leftovers.is_empty(),
        "no partial or temporary output: {leftovers:?}"
    );
}

#[test]
fn the_comparison_modulo_module_id_accepts_only_differences_inside_internal_names() {
    let a = b"x _INTERNAL_1a2b_5_k_cu_3c4d_17 y".to_vec();
    let mut b = a.clone();
    b[30] = b'9';
    assert!(
        same_modulo_module_id(&a, &b),
        "a differing id is the module id"
    );
    let mut c = a.clone();
    c[0] = b'z';
    assert!(
        !same_modulo_module_id(&a, &c),
        "a difference elsewhere is a difference"
    );
    let d = b"x _GLOBAL__sub_I_tmpxft_0000068a_00000000_6_k.cudafe1 y".to_vec();
    let mut e = d.clone();
    e[27] = b'b';
    assert!(
        same_modulo_module_id(&d, &e),
        "the static initialiser named after nvcc's temporary file differs by its pid"
    );
}

#[test]
fn heavy_launcher_every_spelling_of_a_command_gets_nvccs_depfile_and_diagnostics() {
    let s = Setup::new();
    // (directory under the project, -I arguments, source): one unit, its paths spelled five
    // ways, each of which nvcc names in its dependency file and diagnostics (and `__FILE__`):
    // each is an entry of its own. The same paths in other option spellings (`-I include`,
    // `--include-path=include`) are the first command and hit its entry.
    let cases: &[(&str, &[&str], &str)] = &[
        ("", &["-Iinclude"], "src/warn.cu"),
        ("src", &["-I../include"], "./warn.cu"),
        ("", &["-Iinclude", "-I./include/"], "./src//warn.cu"),
        ("src", &["-I", "../include,../include/"], "warn.cu"),
        ("", &["--include-path=include//"], "src/../src/warn.cu"),
        ("", &["-I", "include"], "src/warn.cu"),
        ("", &["--include-path=include"], "src/warn.cu"),
        ("", &["--include-path", "include"], "src/warn.cu"),
    ];
    for (dir, includes, source) in cases {
        let cwd = s.project.join(dir);
        let mut args: Vec<String> = includes.iter().map(|a| a.to_string()).collect();
        args.extend(
            ["-arch=sm_90", "-cubin", "-MD", "-MP", "-MF"]
                .iter()
                .map(|a| a.to_string()),
        );
        let bare_dep = s.project.join("bare.d");
        let ours_dep = s.project.join("ours.d");
        let want = Command::new(real_nvcc())
            .args(&args)
            .arg(&bare_dep)
            .args([source, &"-o", &"/dev/null"].map(|a| a.to_string()))
            .current_dir(&cwd)
            .output()
            .expect("run nvcc");
        assert!(
            want.status.success(),
            "{}",
            String::from_utf8_lossy(&want.stderr)
        );
        let mut cmd = Command::new(LAUNCHER);
        cmd.arg("nvcc")
            .args(&args)
            .arg(&ours_dep)
            .args([*source, "-o", "out.cubin"])
            .current_dir(&cwd);
        s.env(&mut cmd);
        let got = cmd.output().expect("run launcher");
        assert!(
            got.status.success(),
            "{}",
            String::from_utf8_lossy(&got.stderr)
        );
        let (mut want_dep, got_dep) = (read(&bare_dep), read(&ours_dep));
        // Only the target differs: nvcc named /dev/null, the launcher out.cubin.
        let text = String::from_utf8_lossy(&want_dep).replacen("/dev/null :", "out.cubin :", 1);
        want_dep = text.into_bytes();
        assert!(
            got_dep == want_dep,
            "{dir}/{source} {includes:?}: nvcc's dependency file:\n{}\nthe launcher's:\n{}",
            String::from_utf8_lossy(&want_dep),
            String::from_utf8_lossy(&got_dep)
        );
        assert_eq!(
            String::from_utf8_lossy(&got.stderr),
            String::from_utf8_lossy(&want.stderr),
            "{dir}/{source} {includes:?}: nvcc's warning, spelled for this command"
        );
    }
    assert_eq!(
        s.counter.compiles(),
        5,
        "one compile per spelling of the paths; the option spellings share the first's entry"
    );
}

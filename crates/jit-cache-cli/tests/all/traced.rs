//! Issue 20, what the trace adds: the compiler's own lookups are the record, so what no include
//! directive spells is still accounted for, and what a hit cannot replay is never cached. With
//! the real nvcc 13.5 and g++ 12, through the launcher, against a bare nvcc's answer.

use crate::never_guesses::{agrees_before_and_after, header, kernel, write, World};
use std::path::Path;
use std::process::Command;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_jit-cache");

/// The cache's counts (`jit-cache --json stats`).
fn stats(w: &World) -> serde_json::Value {
    let out = Command::new(LAUNCHER)
        .args(["--json", "stats"])
        .env("JIT_CACHE_DIR", w.cache())
        .output()
        .expect("run stats");
    assert!(out.status.success(), "stats: {out:?}");
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("stats JSON")["stats"].clone()
}

fn not_cached(w: &World, why: &str) -> u64 {
    stats(w)["not_cached"][why].as_u64().unwrap_or(0)
}

#[test]
fn heavy_a_header_only_has_include_looked_for_is_seen() {
    // `__has_include` looks a header up and reads nothing: no dependency file names it, and the
    // earlier main answered the old cubin after the header appeared. The trace sees the lookup;
    // untraced, the model resolves a probe as it resolves an include.
    for trace in ["on", "0"] {
        let w = World::new();
        let tree = w.path("t");
        write(
            &tree.join("k.cu"),
            &kernel("#if __has_include(<opt.h>)\n#define VALUE 2222\n#endif"),
        );
        std::fs::create_dir_all(tree.join("inc")).expect("mkdir inc");
        let env = [("JIT_CACHE_TRACE", trace)];
        agrees_before_and_after(
            &w,
            &tree,
            &["-I", "inc", "-arch=sm_90", "-cubin", "k.cu"],
            &env,
            &|| write(&tree.join("inc/opt.h"), "\n"),
            &format!("__has_include, JIT_CACHE_TRACE={trace}"),
        );
        assert_eq!(
            stats(&w)["hits"],
            1,
            "trace {trace}: the second request hit"
        );
    }
}

#[test]
fn heavy_a_probe_by_a_macro_name_is_followed_by_the_trace_and_never_guessed_without() {
    // `__has_include(OPT)`: the name is the preprocessor's. Traced, the lookup is recorded and
    // the entry is cached; untraced, nothing says where the compiler looked: never cached.
    let probe = "#define OPT <opt.h>\n#if __has_include(OPT)\n#define VALUE 2222\n#endif";
    let w = World::new();
    let tree = w.path("t");
    write(&tree.join("k.cu"), &kernel(probe));
    std::fs::create_dir_all(tree.join("inc")).expect("mkdir inc");
    let args = ["-I", "inc", "-arch=sm_90", "-cubin", "k.cu"];
    agrees_before_and_after(
        &w,
        &tree,
        &args,
        &[],
        &|| write(&tree.join("inc/opt.h"), "\n"),
        "__has_include(MACRO), traced",
    );
    assert_eq!(stats(&w)["hits"], 1, "traced, the second request hit");

    let w = World::new();
    let tree = w.path("t");
    write(&tree.join("k.cu"), &kernel(probe));
    std::fs::create_dir_all(tree.join("inc")).expect("mkdir inc");
    let untraced = [("JIT_CACHE_TRACE", "0")];
    agrees_before_and_after(
        &w,
        &tree,
        &args,
        &untraced,
        &|| write(&tree.join("inc/opt.h"), "\n"),
        "__has_include(MACRO), untraced",
    );
    assert_eq!(stats(&w)["hits"], 0, "untraced, never a hit");
    assert_eq!(
        not_cached(&w, "computed-lookup"),
        3,
        "each request counted: {}",
        stats(&w)
    );
}

/// A wrapper nvcc that appends a line to `log` on every compile, then runs the real one.
fn logging_nvcc(w: &World, log: &Path) -> std::path::PathBuf {
    let path = w.path("wrapper/nvcc");
    write(
        &path,
        &format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" -dryrun \"*) ;; *) echo run >> '{}' ;; esac\nexec '{}' \"$@\"\n",
            log.display(),
            w.nvcc.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[test]
fn heavy_a_compile_that_changes_something_a_hit_would_not_is_never_cached() {
    // The compiler writes outside its own directories: a hit would not, so the answer is never
    // cached (each request compiles, and is counted), until the place is declared the
    // compiler's own (`JIT_CACHE_IGNORED_PATHS`, as a logging wrapper's log is).
    let mut w = World::new();
    let tree = w.path("t");
    write(&tree.join("k.cu"), &kernel("#include \"x.h\""));
    write(&tree.join("x.h"), &header(1111));
    let log = w.path("logs/compiles.log");
    std::fs::create_dir_all(log.parent().expect("logs")).expect("mkdir logs");
    w.nvcc = logging_nvcc(&w, &log);
    let args = ["-arch=sm_90", "-cubin", "k.cu", "-o", "k.cubin"];
    let runs = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    for n in 1..=3 {
        w.run(true, &tree, &args, &[]);
        assert_eq!(runs(), n, "request {n} compiled");
    }
    assert_eq!(stats(&w)["hits"], 0);
    assert_eq!(not_cached(&w, "side-effect"), 3, "{}", stats(&w));
    let declared = [(
        "JIT_CACHE_IGNORED_PATHS",
        log.parent().expect("logs").to_str().expect("UTF-8"),
    )];
    for _ in 0..3 {
        w.run(true, &tree, &args, &declared);
    }
    assert_eq!(runs(), 4, "declared, one compile and two hits");
    assert_eq!(stats(&w)["hits"], 2, "{}", stats(&w));
}

#[test]
fn heavy_an_output_that_depends_on_when_it_was_compiled_is_never_cached() {
    // `__TIME__` makes every compile's answer its own: never cached, unless SOURCE_DATE_EPOCH
    // fixes the time (nvcc's preprocessor then answers the same each run).
    let w = World::new();
    let tree = w.path("t");
    write(
        &tree.join("k.cu"),
        "__constant__ char when[] = \"AT=\" __TIME__ \";\";\n\
         extern \"C\" __global__ void k(char* o) { o[threadIdx.x] = when[threadIdx.x]; }\n",
    );
    let args = ["-arch=sm_90", "-cubin", "k.cu", "-o", "k.cubin"];
    for _ in 0..2 {
        w.run(true, &tree, &args, &[]);
    }
    assert_eq!(stats(&w)["hits"], 0);
    assert_eq!(not_cached(&w, "time-macro"), 2, "{}", stats(&w));
    let fixed = [("SOURCE_DATE_EPOCH", "1700000000")];
    for _ in 0..2 {
        w.run(true, &tree, &args, &fixed);
    }
    assert_eq!(
        stats(&w)["hits"],
        1,
        "with SOURCE_DATE_EPOCH: {}",
        stats(&w)
    );
}

//! `cargo xtask bench launcher`: `jit-cache nvcc` against `ccache nvcc` on the same command lines
//! (section 5: DeepGEMM's, one kernel in fresh uuid directories).
//!
//! 1. Miss overhead: unique kernels compiled to objects by bare nvcc, by the launcher and by
//!    ccache (cold), interleaved; the median of the paired ratios to bare nvcc.
//! 2. A hit of a kernel that reads ~750 headers: one using CUB's BlockReduce (742 headers of the
//!    toolkit's CCCL, as real kernels read), and the worst case for the launcher, 600 two-line
//!    project headers; launcher vs ccache's direct mode (`ccache --print-stats` must show the
//!    direct hits) and vs the floor: a small C program that `stat`s every input the depfile
//!    names and copies the artifact and the depfile out, the least any stat-validated hit can
//!    do. Outputs are removed before each call, untimed.
//! 3. A ninja build of the launcher tests' project after `ninja -t clean` (all hits), both warm.
//! 4. 8 concurrent identical command lines on a cold cache: compiles counted by a wrapper.
//!
//! Options: `--runs N` (default 9).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_jit-cache");

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(9usize);
    let nvcc = PathBuf::from(
        std::env::var_os("NVCC").expect("set NVCC (cargo xtask bench launcher does)"),
    );
    let dir = tempfile::Builder::new()
        .prefix("launcher-bench-")
        .tempdir_in("/var/tmp")
        .expect("temp dir");
    // The counting wrappers' logs are their writes, not their answers: declared, as a user's
    // logging wrapper would, so that the cache still caches what they compile.
    std::env::set_var("JIT_CACHE_IGNORED_PATHS", dir.path().join("wrapper-log"));
    let version = Command::new("ccache")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .expect("ccache is installed by cargo xtask setup");
    println!(
        "launcher bench ({runs} runs); nvcc {}; {version}",
        nvcc.display()
    );
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let want = |name: &str| only.as_deref().is_none_or(|o| o == name);
    if want("miss") {
        miss_overhead(dir.path(), &nvcc, runs);
    }
    if want("hit") {
        hit_750_headers(dir.path(), &nvcc, runs);
    }
    if want("ninja") {
        ninja_after_clean(dir.path(), &nvcc, runs);
    }
    if want("eight") {
        eight_identical(dir.path(), &nvcc);
    }
    if want("deepgemm") {
        deepgemm_uuid_dirs(dir.path(), &nvcc, runs);
    }
}

/// DeepGEMM's shape: a header tree under `-I<lib>` and each kernel written into a fresh
/// `<cache>/tmp/<uuid>/kernel.cu`, compiled from `<cache>/tmp` by its exact command line.
fn deepgemm_uuid_dirs(dir: &Path, nvcc: &Path, runs: usize) {
    let work = dir.join("deepgemm");
    let include = work.join("lib/include/deep_gemm");
    std::fs::create_dir_all(&include).expect("mkdir include");
    std::fs::write(
        include.join("gemm.cuh"),
        "#pragma once\n#include <cuda/std/cstdint>\n#include <cassert>\n\
         #define DG_DEVICE_ASSERT(c) do { if (!(c)) { printf(\"%s:%d\\n\", __FILE__, __LINE__); asm(\"trap;\"); } } while (0)\n\
         namespace deep_gemm { template <uint32_t M, uint32_t N> __global__ void gemm(float *d, const float *a, uint32_t m) {\n\
         DG_DEVICE_ASSERT(m % M == 0); const uint32_t i = blockIdx.x * N + threadIdx.x; d[i] = a[i] * M + N; } }\n",
    )
    .expect("write header");
    let source = "#include <deep_gemm/gemm.cuh>\nusing namespace deep_gemm;\n\
                  static void __instantiate_kernel() { auto ptr = reinterpret_cast<void*>(&gemm<64, 128>); }\n";
    let tmp = work.join("cache/tmp");
    let flags = [
        "-std=c++20".to_string(),
        "--diag-suppress=39,161,174,177,186,940".into(),
        "--ptxas-options=--register-usage-level=10".into(),
        format!("-I{}", work.join("lib/include").display()),
        "--gpu-architecture=sm_90a".into(),
        "--compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi".into(),
        "-O3".into(),
        "--expt-relaxed-constexpr".into(),
        "--expt-extended-lambda".into(),
    ];
    let (cache, ccache_dir) = (work.join("jit"), work.join("ccache"));
    let dirs = 20.max(runs + 1);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for n in 0..dirs {
        for who in ["jit", "ccache"] {
            let uuid = tmp.join(format!("{who}-{n:04x}-5eed-4b2a-9f00"));
            std::fs::create_dir_all(&uuid).expect("mkdir uuid");
            std::fs::write(uuid.join("kernel.cu"), source).expect("write kernel");
            let mut cmd = if who == "jit" {
                launcher(&cache, nvcc, &tmp)
            } else {
                ccache(&ccache_dir, nvcc, &tmp)
            };
            cmd.arg(uuid.join("kernel.cu"))
                .arg("-cubin")
                .arg("-o")
                .arg(uuid.join("kernel.cubin"))
                .args(&flags);
            let took = ms(time_cmd(&mut cmd));
            if n > 0 {
                if who == "jit" {
                    ours.push(took)
                } else {
                    theirs.push(took)
                }
            }
        }
    }
    let built = Command::new(LAUNCHER)
        .args(["--json", "stats"])
        .env("JIT_CACHE_DIR", &cache)
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
        .and_then(|v| v["stats"]["built"].as_u64())
        .unwrap_or(0);
    let ccache_hits = ccache_stat(&ccache_dir, "direct_cache_hit")
        + ccache_stat(&ccache_dir, "preprocessed_cache_hit");
    println!(
        "\n5. DeepGEMM: one kernel in {dirs} fresh uuid directories (its command line, -cubin)"
    );
    println!(
        "   {:<40} {:>9}   (goal 19 of 20)",
        "jit-cache nvcc: hits",
        format!("{}/{dirs}", dirs as u64 - built)
    );
    println!(
        "   {:<40} {:>9}",
        "ccache nvcc: hits",
        format!("{ccache_hits}/{dirs}")
    );
    report_hit(
        &HitTimes {
            ours: median(ours),
            ccache: median(theirs),
            floor: None,
        },
        None,
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn time_cmd(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().expect("run command");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn launcher(cache: &Path, nvcc: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(LAUNCHER);
    cmd.arg("nvcc")
        .env("JIT_CACHE_DIR", cache)
        .env("NVCC", nvcc)
        .current_dir(cwd);
    cmd
}

fn ccache(ccache_dir: &Path, nvcc: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new("ccache");
    cmd.arg(nvcc)
        .env("CCACHE_DIR", ccache_dir)
        .env("CCACHE_DIRECT", "1")
        .current_dir(cwd);
    cmd
}

fn ccache_stat(ccache_dir: &Path, field: &str) -> u64 {
    let out = Command::new("ccache")
        .args(["--print-stats"])
        .env("CCACHE_DIR", ccache_dir)
        .output()
        .expect("ccache --print-stats");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(field).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

fn miss_overhead(dir: &Path, nvcc: &Path, runs: usize) {
    let work = dir.join("miss");
    std::fs::create_dir_all(&work).expect("mkdir");
    let (cache, ccache_dir) = (work.join("jit"), work.join("ccache"));
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut bare_ms, mut ours_ms, mut theirs_ms) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..runs + 1 {
        // Three distinct sources of one shape, so that each contender misses.
        let mut times = Vec::new();
        for (i, who) in ["bare", "jit", "ccache"].iter().enumerate() {
            let src = format!("k{n}_{i}.cu");
            std::fs::write(
                work.join(&src),
                format!(
                    "#include <cstdio>\n__global__ void k(float* x) {{ x[threadIdx.x] *= {n}.{i}f; }}\n\
                     void launch(float* x) {{ k<<<1, 32>>>(x); std::printf(\"{n}\\n\"); }}\n"
                ),
            )
            .expect("write source");
            let out = format!("k{n}_{i}.o");
            let args = ["-arch=sm_90", "-O2", "-MD", "-c", &src, "-o", &out];
            let mut cmd = match *who {
                "bare" => {
                    let mut c = Command::new(nvcc);
                    c.current_dir(&work);
                    c
                }
                "jit" => launcher(&cache, nvcc, &work),
                _ => ccache(&ccache_dir, nvcc, &work),
            };
            times.push(time_cmd(cmd.args(args)));
        }
        if n == 0 {
            continue; // warm-up: page cache, toolchain identity
        }
        bare_ms.push(ms(times[0]));
        ours_ms.push(ms(times[1]));
        theirs_ms.push(ms(times[2]));
        ours.push(times[1].as_secs_f64() / times[0].as_secs_f64());
        theirs.push(times[2].as_secs_f64() / times[0].as_secs_f64());
    }
    println!("\n1. miss overhead vs bare nvcc -c (median of {runs} paired ratios)");
    println!("   {:<40} {:>9.1}ms", "bare nvcc", median(bare_ms));
    println!(
        "   {:<40} {:>9.1}ms {:>7.3}x   (goal <= 1.03x)",
        "jit-cache nvcc (miss)",
        median(ours_ms),
        median(ours)
    );
    println!(
        "   {:<40} {:>9.1}ms {:>7.3}x",
        "ccache nvcc (miss)",
        median(theirs_ms),
        median(theirs)
    );
}

/// A kernel that reads ~750 headers the way real ones do: CUB's block reduction, 742 headers of
/// the toolkit's CCCL (11 KB on average).
const CUB_KERNEL: &str = r#"#include <cub/block/block_reduce.cuh>
extern "C" __global__ void k(const float* in, float* out) {
    using Reduce = cub::BlockReduce<float, 128>;
    __shared__ typename Reduce::TempStorage scratch;
    float sum = Reduce(scratch).Sum(in[blockIdx.x * 128 + threadIdx.x]);
    if (threadIdx.x == 0) out[blockIdx.x] = sum;
}
"#;

fn hit_750_headers(dir: &Path, nvcc: &Path, runs: usize) {
    println!(
        "\n2. hit, a process per call (-c with -MD), outputs absent as after `ninja -t clean`"
    );
    let work = dir.join("hit-cub");
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::write(work.join("k.cu"), CUB_KERNEL).expect("write source");
    let (headers, times) = hit_series(&work, nvcc, &[], runs);
    println!("   a kernel using CUB's BlockReduce: {headers} headers (the toolkit's CCCL, 11 KB average)");
    report_hit(&times, Some(3.0));

    // The worst case for the launcher next to ccache: headers of two lines, which ccache hashes
    // almost for free while the launcher still pays a `stat` each.
    let work = dir.join("hit-tiny");
    let inc = work.join("include/gen");
    std::fs::create_dir_all(&inc).expect("mkdir");
    let mut src = String::from("#include <cuda_runtime.h>\n");
    for i in 0..600 {
        std::fs::write(
            inc.join(format!("h{i}.cuh")),
            format!("#pragma once\n#define H{i} {i}\n"),
        )
        .expect("write header");
        src.push_str(&format!("#include \"gen/h{i}.cuh\"\n"));
    }
    src.push_str("extern \"C\" __global__ void k(int* x) { x[threadIdx.x] = H599; }\n");
    std::fs::write(work.join("k.cu"), src).expect("write source");
    let (headers, times) = hit_series(&work, nvcc, &["-Iinclude"], runs);
    println!("   600 project headers of two lines, written just before, and the toolkit's: {headers} headers");
    report_hit(&times, None);
}

/// The medians of one series of hits, in milliseconds.
struct HitTimes {
    ours: f64,
    ccache: f64,
    /// `None` where the series has no floor (DeepGEMM's kernels in fresh directories).
    floor: Option<f64>,
}

/// Times `runs` hits of `k.cu` in `work` for each tool (after one miss each) and the floor,
/// interleaved. Each writes its own output and dependency file, removed before every timed call
/// (untimed), so none replaces a file, nor another's. Returns the header count and the medians.
fn hit_series(work: &Path, nvcc: &Path, extra: &[&str], runs: usize) -> (usize, HitTimes) {
    let (cache, ccache_dir) = (work.join("jit"), work.join("ccache"));
    let args = |out: &str| -> Vec<String> {
        extra
            .iter()
            .copied()
            .chain(["-arch=sm_90", "-MD", "-c", "k.cu", "-o", out])
            .map(str::to_string)
            .collect()
    };
    let (ours_out, theirs_out) = ("k-jit.o", "k-ccache.o");
    let fresh = |out: &str| {
        for file in [out.to_string(), out.replace(".o", ".d")] {
            let _ = std::fs::remove_file(work.join(file));
        }
    };
    time_cmd(launcher(&cache, nvcc, work).args(args(ours_out)));
    time_cmd(ccache(&ccache_dir, nvcc, work).args(args(theirs_out)));
    let headers = std::fs::read_to_string(work.join("k-jit.d"))
        .map(|d| d.lines().count() - 1)
        .unwrap_or(0);
    // The floor's "entry": the launcher's artifact and depfile, copied aside.
    let stored = work.join("floor-store");
    std::fs::create_dir_all(&stored).expect("mkdir floor store");
    std::fs::copy(work.join("k-jit.o"), stored.join("k.o")).expect("copy artifact");
    std::fs::copy(work.join("k-jit.d"), stored.join("k.d")).expect("copy depfile");
    let floor_out = "k-floor.o";
    let floor_cmd = || {
        let mut cmd = Command::new(floor_program(work.parent().unwrap_or(work)));
        cmd.arg(stored.join("k.o"))
            .arg(stored.join("k.d"))
            .arg(floor_out)
            .arg("k-floor.d")
            .current_dir(work);
        cmd
    };
    let before = ccache_stat(&ccache_dir, "direct_cache_hit");
    let (mut ours, mut theirs, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        fresh(ours_out);
        ours.push(ms(time_cmd(
            launcher(&cache, nvcc, work).args(args(ours_out)),
        )));
        fresh(theirs_out);
        theirs.push(ms(time_cmd(
            ccache(&ccache_dir, nvcc, work).args(args(theirs_out)),
        )));
        fresh(floor_out);
        floor.push(ms(time_cmd(&mut floor_cmd())));
    }
    let hits = ccache_stat(&ccache_dir, "direct_cache_hit") - before;
    assert_eq!(
        hits as usize, runs,
        "ccache must hit in direct mode every run"
    );
    assert_eq!(
        std::fs::read(work.join(floor_out)).expect("the floor's artifact"),
        std::fs::read(work.join(ours_out)).expect("the launcher's artifact"),
        "the floor copies the same artifact"
    );
    (
        headers,
        HitTimes {
            ours: median(ours),
            ccache: median(theirs),
            floor: Some(median(floor)),
        },
    )
}

/// The floor of a stat-validated hit, in C: reads the stored depfile, `stat`s every input it
/// names (failing if one is missing), and copies the stored artifact and depfile out.
const FLOOR_C: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) { perror(path); exit(1); }
    char *buf = malloc(st.st_size + 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, st.st_size - got);
        if (n <= 0) { perror(path); exit(1); }
        got += n;
    }
    close(fd);
    buf[got] = 0;
    *len = got;
    return buf;
}

static void put(const char *path, const char *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd) != 0) { perror(path); exit(1); }
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "floor STORED.o STORED.d OUT.o OUT.d\n"); return 2; }
    size_t dlen, olen;
    char *dep = slurp(argv[2], &dlen);
    char *deps = malloc(dlen + 1);
    memcpy(deps, dep, dlen + 1);
    char *p = strchr(deps, ':');
    if (!p) { fprintf(stderr, "no rule in %s\n", argv[2]); return 1; }
    struct stat st;
    for (char *tok = strtok(p + 1, " \t\n\\"); tok; tok = strtok(NULL, " \t\n\\")) {
        if (tok[strlen(tok) - 1] == ':') break; /* the phony targets that follow */
        if (stat(tok, &st) != 0) { perror(tok); return 1; }
    }
    char *obj = slurp(argv[1], &olen);
    put(argv[3], obj, olen);
    put(argv[4], dep, dlen);
    return 0;
}
"#;

/// Compiles the floor once per bench run (into `dir`) and returns its path.
fn floor_program(dir: &Path) -> PathBuf {
    let exe = dir.join("floor");
    if !exe.exists() {
        let src = dir.join("floor.c");
        std::fs::write(&src, FLOOR_C).expect("write floor.c");
        let status = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(status.success(), "cc floor.c");
    }
    exe
}

fn report_hit(times: &HitTimes, goal: Option<f64>) {
    println!("   {:<40} {:>9.2}ms", "jit-cache nvcc (hit)", times.ours);
    println!(
        "   {:<40} {:>9.2}ms   (direct-mode hits, checked)",
        "ccache nvcc (direct-mode hit)", times.ccache
    );
    if let Some(floor) = times.floor {
        println!(
            "   {:<40} {:>9.2}ms   (stat every input, copy two files)",
            "the floor", floor
        );
    }
    let goal = goal.map(|g| format!("(goal >= {g}x)")).unwrap_or_default();
    println!(
        "   {:<40} {:>9.1}x   {goal}",
        "jit-cache faster than ccache by",
        times.ccache / times.ours
    );
    if let Some(floor) = times.floor {
        println!(
            "   {:<40} {:>9.2}x   (goal <= 1.3x)",
            "jit-cache over the floor",
            times.ours / floor
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn ninja_after_clean(dir: &Path, nvcc: &Path, runs: usize) {
    let project = dir.join("project");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/launcher-project"),
        &project,
    );
    let units = [
        ("scale.o", "-c", "-arch=sm_90", "../src/scale.cu"),
        ("add.o", "-c", "-arch=sm_90", "../src/add.cu"),
        ("kern.cubin", "-cubin", "-arch=sm_90", "../src/kern.cu"),
        ("kern.ptx", "-ptx", "-arch=compute_90", "../src/kern_ptx.cu"),
        (
            "fat.fatbin",
            "-fatbin",
            "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=compute_90",
            "../src/fat.cu",
        ),
    ];
    let mut results = Vec::new();
    for (name, prefix) in [
        ("jit-cache nvcc", format!("{LAUNCHER} nvcc")),
        ("ccache nvcc", format!("ccache {}", nvcc.display())),
    ] {
        let build = project.join(name.replace(' ', "-"));
        std::fs::create_dir_all(&build).expect("mkdir");
        let mut text = format!(
            "rule cu\n  command = {prefix} -I../include -O2 $mode $arch -MD -MF $out.d $in -o $out\n  depfile = $out.d\n  deps = gcc\n"
        );
        for (out, mode, arch, src) in units {
            text.push_str(&format!(
                "build {out}: cu {src}\n  mode = {mode}\n  arch = {arch}\n"
            ));
        }
        std::fs::write(build.join("build.ninja"), text).expect("write build.ninja");
        let ninja = |args: &[&str]| {
            let mut cmd = Command::new("ninja");
            cmd.arg("-C")
                .arg(&build)
                .args(args)
                .env("JIT_CACHE_DIR", dir.join("ninja-jit"))
                .env("NVCC", nvcc)
                .env("CCACHE_DIR", dir.join("ninja-ccache"))
                .env("CCACHE_DIRECT", "1")
                .stdout(Stdio::null());
            time_cmd(&mut cmd)
        };
        ninja(&[]);
        let mut times = Vec::new();
        for _ in 0..runs {
            ninja(&["-t", "clean"]);
            times.push(ms(ninja(&["-j", "2"])));
        }
        results.push((name, median(times)));
    }
    println!(
        "\n3. ninja build of the test project ({} units) after `ninja -t clean`, warm, -j 2",
        units.len()
    );
    for (name, t) in &results {
        println!("   {:<40} {:>9.1}ms", name, t);
    }
    println!(
        "   {:<40} {:>9.1}x   (goal >= 3x)",
        "jit-cache faster by",
        results[1].1 / results[0].1
    );
}

fn eight_identical(dir: &Path, nvcc: &Path) {
    let work = dir.join("eight");
    let bin = work.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let log_dir = dir.join("wrapper-log");
    std::fs::create_dir_all(&log_dir).expect("mkdir");
    let log = log_dir.join("eight-compiles.log");
    // A compiler named nvcc (ccache recognises it by name) that counts compiles.
    let wrapper = bin.join("nvcc");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*|*\" -dryrun \"*) ;; *\" -E \"*) ;; *) echo x >> '{}' ;; esac\nexec '{}' \"$@\"\n",
            log.display(),
            nvcc.display()
        ),
    )
    .expect("write wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(
        work.join("k.cu"),
        "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 8.0f; }\n",
    )
    .expect("write source");
    let mut counts = Vec::new();
    for who in ["jit-cache nvcc", "ccache nvcc"] {
        let _ = std::fs::remove_file(&log);
        let children: Vec<_> = (0..8)
            .map(|_| {
                let mut cmd = if who == "ccache nvcc" {
                    ccache(&work.join("ccache"), &wrapper, &work)
                } else {
                    launcher(&work.join("jit"), &wrapper, &work)
                };
                cmd.args(["-arch=sm_90", "-cubin", "k.cu", "-o", "k.cubin"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        for mut child in children {
            assert!(child.wait().expect("wait").success());
        }
        let n = std::fs::read_to_string(&log)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        counts.push((who, n));
    }
    println!("\n4. 8 concurrent identical command lines, cold cache: compiles");
    for (who, n) in counts {
        println!("   {:<40} {:>9}", who, n);
    }
}

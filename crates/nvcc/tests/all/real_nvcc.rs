//! Against the real nvcc (CUDA 13.5 pip on these machines). Each test is one or a few ~0.6 s
//! compiles in its own temp dir, so they run in parallel.

use crate::support::{real_nvcc, write};
use nvcc::{compile_many, CompileJob, Error, OutputKind, Severity};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const EM_CUDA: u16 = 190;

const KERNEL: &str = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n";

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The SM number a CUDA ELF was built for: byte 1 of `e_flags` (0x5a for sm_90) in nvcc 13's ABI.
fn elf_sm(elf: &[u8]) -> u32 {
    (u32_at(elf, 48) >> 8) & 0xff
}

#[test]
fn cubin_is_an_elf_for_em_cuda_built_for_sm_90() {
    let Some(nvcc) = real_nvcc() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let source = write(dir.path(), "k.cu", KERNEL);
    let job = CompileJob::new(&source, dir.path().join("k.cubin"), OutputKind::Cubin).arch("sm_90");
    let compiled = nvcc
        .compile(&job)
        .expect("a valid kernel compiles to a cubin");
    let bytes = std::fs::read(&compiled.output).expect("read the cubin");
    assert_eq!(&bytes[..4], b"\x7fELF", "a cubin is an ELF file");
    assert_eq!(u16_at(&bytes, 18), EM_CUDA, "e_machine is EM_CUDA (190)");
    assert_eq!(elf_sm(&bytes), 90, "e_flags name sm_90");
    assert!(
        compiled
            .headers
            .iter()
            .any(|h| h.ends_with("cuda_runtime.h")),
        "nvcc's implicit cuda_runtime.h include is in the depfile: {:?}",
        compiled.headers
    );
    assert!(
        !compiled.headers.contains(&source),
        "the source itself is not a header"
    );
}

#[test]
fn ptx_names_target_sm_90_and_version_is_parsed() {
    let Some(nvcc) = real_nvcc() else { return };
    let version = nvcc.version().expect("nvcc --version parses");
    let mut parts = version.split('.');
    assert!(
        parts
            .next()
            .is_some_and(|m| m.parse::<u32>().is_ok_and(|m| m >= 11))
            && parts.next().is_some_and(|m| m.parse::<u32>().is_ok()),
        "version is MAJOR.MINOR, got {version:?}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let source = write(dir.path(), "k.cu", KERNEL);
    let job = CompileJob::new(&source, dir.path().join("k.ptx"), OutputKind::Ptx).arch("sm_90");
    let compiled = nvcc.compile(&job).expect("a valid kernel compiles to PTX");
    let ptx = std::fs::read_to_string(&compiled.output).expect("PTX is text");
    assert!(
        ptx.lines().any(|l| l.trim() == ".target sm_90"),
        "the PTX names its target"
    );
}

/// The fat binary container: a 16-byte header (magic 0xBA55ED50, version, header size, payload
/// size), then entries each with a header (kind: 1 PTX, 2 ELF; header size at +4; padded payload
/// size at +8; SM number at +28) followed by the payload.
fn fatbin_entries(bytes: &[u8]) -> Vec<(u16, u32, Vec<u8>)> {
    assert_eq!(u32_at(bytes, 0), 0xBA55_ED50, "fatbin magic");
    let header_size = usize::from(u16_at(bytes, 6));
    let end = header_size + usize::try_from(u64_at(bytes, 8)).expect("size fits");
    let mut entries = Vec::new();
    let mut at = header_size;
    while at < end.min(bytes.len()) {
        let kind = u16_at(bytes, at);
        let entry_header = usize::try_from(u32_at(bytes, at + 4)).expect("fits");
        let payload = usize::try_from(u64_at(bytes, at + 8)).expect("fits");
        let sm = u32_at(bytes, at + 28);
        entries.push((
            kind,
            sm,
            bytes[at + entry_header..at + entry_header + payload].to_vec(),
        ));
        at += entry_header + payload;
    }
    entries
}

#[test]
fn fatbin_with_two_gencodes_holds_both_cubins() {
    let Some(nvcc) = real_nvcc() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let source = write(dir.path(), "k.cu", KERNEL);
    let job = CompileJob::new(&source, dir.path().join("k.fatbin"), OutputKind::Fatbin)
        .gencode("compute_80", "sm_80")
        .gencode("compute_90", "sm_90");
    let compiled = nvcc
        .compile(&job)
        .expect("a valid kernel compiles to a fatbin");
    let bytes = std::fs::read(&compiled.output).expect("read the fatbin");
    let entries = fatbin_entries(&bytes);
    let mut arches = BTreeSet::new();
    for (kind, sm, payload) in &entries {
        assert_eq!(*kind, 2, "only cubins were requested (code=sm_XX)");
        assert_eq!(&payload[..4], b"\x7fELF", "each entry holds an ELF");
        assert_eq!(u16_at(payload, 18), EM_CUDA, "each ELF is for EM_CUDA");
        assert_eq!(
            elf_sm(payload),
            *sm,
            "entry header and ELF agree on the arch"
        );
        arches.insert(*sm);
    }
    assert_eq!(
        arches,
        BTreeSet::from([80, 90]),
        "both gencode targets are in the fatbin"
    );
}

#[test]
fn depfile_lists_user_include_dir_and_device_only_headers() {
    let Some(nvcc) = real_nvcc() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    // Distinct contents: gcc's `#pragma once` treats identical files with equal mtimes as one file
    // and would skip all but the first.
    let user = write(root, "user.h", "#pragma once\n#define USER_H 1\n");
    let via_include = write(
        root,
        "inc dir/through_include.h",
        "#pragma once\n#define INC_H 1\n",
    );
    let device90 = write(root, "device90.h", "#pragma once\n#define DEV90_H 1\n");
    let device80 = write(root, "device80.h", "#pragma once\n#define DEV80_H 1\n");
    let host_only = write(root, "host_only.h", "#pragma once\n#define HOST_H 1\n");
    let source = write(
        root,
        "k.cu",
        "#include \"user.h\"\n#include <through_include.h>\n\
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n#include \"device90.h\"\n#endif\n\
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 800\n#include \"device80.h\"\n#endif\n\
#ifndef __CUDA_ARCH__\n#include \"host_only.h\"\n#endif\n\
extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n",
    );
    // Relative paths and a working directory: the headers come back resolved against it.
    let job = CompileJob::new("k.cu", "k.cubin", OutputKind::Cubin)
        .arch("sm_90")
        .include_dir("inc dir")
        .working_dir(root);
    let compiled = nvcc.compile(&job).expect("the kernel compiles");
    let headers: Vec<PathBuf> = compiled.headers.clone();
    for (header, why) in [
        (&user, "a quoted user header"),
        (
            &via_include,
            "a header found through -I (in a directory with a space)",
        ),
        (
            &device90,
            "a header included only under __CUDA_ARCH__ >= 900",
        ),
    ] {
        assert!(headers.contains(header), "{why} is listed: {headers:?}");
    }
    // A cubin is the device pass alone: a host-only header cannot change it, and its dependency
    // file (written by that pass) does not list it.
    assert!(
        !headers.contains(&host_only),
        "a host-only header does not affect a cubin: {headers:?}"
    );
    assert!(
        !headers.contains(&device80),
        "a header for an arch not targeted is not listed: {headers:?}"
    );
    assert!(!headers.contains(&source), "the source is not a header");
    let leftovers: Vec<_> = std::fs::read_dir(root)
        .expect("list temp dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".d"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "the scratch depfile is removed: {leftovers:?}"
    );
}

#[test]
fn syntax_error_yields_a_diagnostic_with_file_and_line() {
    let Some(nvcc) = real_nvcc() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let source = write(
        dir.path(),
        "bad.cu",
        "extern \"C\" __global__ void k(float* x) {\n  x[0] = 1.0f\n}\n",
    );
    let output = dir.path().join("bad.cubin");
    let job = CompileJob::new(&source, &output, OutputKind::Cubin).arch("sm_90");
    let err = nvcc
        .compile(&job)
        .expect_err("a syntax error fails the compile");
    let Error::Failed(failure) = &err else {
        panic!("expected Error::Failed, got {err}");
    };
    assert!(
        failure.status.is_some_and(|s| !s.success()),
        "the exit status is recorded and non-zero"
    );
    assert_eq!(
        failure.command[0],
        nvcc.path().as_os_str(),
        "the command starts with nvcc"
    );
    let diagnostic = failure
        .diagnostics
        .iter()
        .find(|d| d.severity == Severity::Error)
        .expect("an error diagnostic is parsed");
    assert_eq!(
        diagnostic.file.as_deref(),
        Some(source.as_path()),
        "it names the file"
    );
    assert_eq!(
        diagnostic.line,
        Some(3),
        "it names the line where the missing ';' is noticed"
    );
    let shown = err.to_string();
    assert!(
        shown.contains("bad.cu:3: error:"),
        "Display shows the diagnostic: {shown}"
    );
    assert!(!output.exists(), "no output is left by a failed compile");
}

#[test]
fn compile_many_keeps_job_order_and_isolates_a_failure() {
    let Some(nvcc) = real_nvcc() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let good = write(dir.path(), "good.cu", KERNEL);
    let bad = write(dir.path(), "bad.cu", "this is not CUDA\n");
    let job = |src: &Path, out: &str| {
        CompileJob::new(src, dir.path().join(out), OutputKind::Ptx).arch("sm_90")
    };
    let jobs = [job(&good, "a.ptx"), job(&bad, "b.ptx"), job(&good, "c.ptx")];
    let results = compile_many(&nvcc, &jobs, Some(2));
    assert_eq!(results.len(), 3, "one result per job");
    let first = results[0].as_ref().expect("job 0 compiles");
    assert_eq!(
        first.output,
        dir.path().join("a.ptx"),
        "result 0 belongs to job 0"
    );
    assert!(
        matches!(&results[1], Err(Error::Failed(f)) if f.diagnostics.iter().any(|d| d.file.as_deref() == Some(bad.as_path()))),
        "job 1 fails with diagnostics naming its own source"
    );
    let third = results[2]
        .as_ref()
        .expect("job 2 compiles despite job 1 failing");
    assert_eq!(
        third.output,
        dir.path().join("c.ptx"),
        "result 2 belongs to job 2"
    );
}

#[test]
fn identity_inputs_cover_companions_version_host_compiler_and_env() {
    let Some(nvcc) = real_nvcc() else { return };
    let identity = nvcc.identity_inputs().expect("identity inputs gather");
    assert_eq!(identity.nvcc, nvcc.path(), "the binary itself");
    for name in ["ptxas", "fatbinary", "nvlink", "nvcc.profile", "cicc"] {
        assert!(
            identity
                .companions
                .iter()
                .any(|p| p.file_name().is_some_and(|f| f == name)),
            "{name} is a companion: {:?}",
            identity.companions
        );
    }
    assert!(
        identity
            .companions
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "bc")),
        "libdevice bitcode is a companion"
    );
    assert!(
        identity
            .version_output
            .contains(&format!("release {}", identity.version)),
        "the parsed version comes from the version text"
    );
    assert!(
        !identity.host_compiler_version.trim().is_empty(),
        "the host compiler answered"
    );
    let names: Vec<&str> = identity.env.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        nvcc::RELEVANT_ENV,
        "every relevant variable is recorded, set or not"
    );
}

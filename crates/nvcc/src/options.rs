//! nvcc 13.5's option table (`nvcc --help`): every option by its short and long name, whether
//! it takes a value (after `=` or in the next argument; joined to the short name for `-I`, `-D`,
//! `-U`, `-O`, `-L`, `-l`), and what it does. One table for every reader of nvcc command lines,
//! so that no two of them disagree on which argument is an option's value.

/// What an option does, as a cache or a launcher needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Selects a cacheable output kind.
    Mode(crate::OutputKind),
    /// `-dc`: an object with relocatable device code.
    DeviceC,
    /// `-o`.
    Output,
    /// `-MD`: a dependency file listing every header.
    DepAll,
    /// `-MMD`: a dependency file without system headers.
    DepNonSystem,
    /// `-MF`: the dependency file's path.
    DepFile,
    /// `-MT`: the dependency rule's target.
    DepTarget,
    /// `-MP`: a phony rule per header.
    DepPhony,
    /// `--options-file`: more arguments, read from files.
    OptionsFile,
    /// A search-path or host-compiler option (`-I`, `-isystem`, `-include`, `-Xcompiler`,
    /// `-ccbin`): it decides which headers the compile reads.
    Search,
    /// Any other option that changes the output.
    Keyed,
    /// nvcc does something other than compile one source into one output file.
    NotCached,
}

/// One nvcc option.
#[derive(Debug, PartialEq, Eq)]
pub struct Opt {
    /// The short name, with its dash (`-arch`); the canonical spelling when rendered.
    pub short: &'static str,
    /// The long name, with its dashes (`--gpu-architecture`); empty when there is none.
    pub long: &'static str,
    /// Whether it takes a value.
    pub value: bool,
    /// Whether the value may follow the short name directly (`-Iinc`).
    pub joined: bool,
    /// What it does.
    pub role: Role,
}

const fn o(short: &'static str, long: &'static str, value: bool, role: Role) -> Opt {
    Opt {
        short,
        long,
        value,
        joined: false,
        role,
    }
}

const fn j(short: &'static str, long: &'static str, role: Role) -> Opt {
    Opt {
        short,
        long,
        value: true,
        joined: true,
        role,
    }
}

use crate::OutputKind;
use Role::*;

/// nvcc 13.5's options (`nvcc --help`).
pub const OPTIONS: &[Opt] = &[
    // Modes.
    o("-c", "--compile", false, Mode(OutputKind::Object)),
    o("-cubin", "--cubin", false, Mode(OutputKind::Cubin)),
    o("-ptx", "--ptx", false, Mode(OutputKind::Ptx)),
    o("-fatbin", "--fatbin", false, Mode(OutputKind::Fatbin)),
    o("-dc", "--device-c", false, DeviceC),
    o("-cuda", "--cuda", false, NotCached),
    o("-optix-ir", "--optix-ir", false, NotCached),
    o("-ltoir", "--ltoir", false, NotCached),
    o("-enable-tile", "--enable-tile", false, NotCached),
    o("-tile-preview", "--tile-preview", true, NotCached),
    o("-tile-only", "--tile-only", false, NotCached),
    o("-simt-only", "--simt-only", false, NotCached),
    o("-tilebc", "--tilebc", false, NotCached),
    o("-tilecubin", "--tilecubin", false, NotCached),
    o("-tilefatbin", "--tilefatbin", false, NotCached),
    o("-Xtileiras", "--tileiras-options", true, NotCached),
    o("-E", "--preprocess", false, NotCached),
    o("-M", "--generate-dependencies", false, NotCached),
    o("-MM", "--generate-nonsystem-dependencies", false, NotCached),
    o("-dw", "--device-w", false, NotCached),
    o("-dlink", "--device-link", false, NotCached),
    o("-link", "--link", false, NotCached),
    o("-lib", "--lib", false, NotCached),
    o("-run", "--run", false, NotCached),
    o("-shared", "--shared", false, NotCached),
    // Dependency files.
    o("-MD", "--generate-dependencies-with-compile", false, DepAll),
    o(
        "-MMD",
        "--generate-nonsystem-dependencies-with-compile",
        false,
        DepNonSystem,
    ),
    o("-MF", "--dependency-output", true, DepFile),
    o("-MP", "--generate-dependency-targets", false, DepPhony),
    o("-MT", "--dependency-target-name", true, DepTarget),
    // Files.
    o("-o", "--output-file", true, Output),
    o("-optf", "--options-file", true, OptionsFile),
    o("-include", "--pre-include", true, Search),
    j("-I", "--include-path", Search),
    o("-isystem", "--system-include", true, Search),
    o("-ccbin", "--compiler-bindir", true, Search),
    o("-Xcompiler", "--compiler-options", true, Search),
    j("-D", "--define-macro", Keyed),
    j("-U", "--undefine-macro", Keyed),
    j("-l", "--library", Keyed),
    j("-L", "--library-path", Keyed),
    j("-O", "--optimize", Keyed),
    // Options that change the output: keyed.
    o("-objtemp", "--objdir-as-tempdir", false, Keyed),
    o(
        "-allow-unsupported-compiler",
        "--allow-unsupported-compiler",
        false,
        Keyed,
    ),
    o("-cudart", "--cudart", true, Keyed),
    o("-cudadevrt", "--cudadevrt", true, Keyed),
    o("-pg", "--profile", false, Keyed),
    o("-g", "--debug", false, Keyed),
    o("-G", "--device-debug", false, Keyed),
    o("-lineinfo", "--generate-line-info", false, Keyed),
    o("-opt-info", "--optimization-info", true, Keyed),
    o("-Ofc", "--Ofast-compile", true, Keyed),
    o("-dopt", "--dopt", true, Keyed),
    o("-dlto", "--dlink-time-opt", false, Keyed),
    o("-lto", "--lto", false, Keyed),
    o("-gen-opt-lto", "--gen-opt-lto", false, Keyed),
    o(
        "-ftemplate-backtrace-limit",
        "--ftemplate-backtrace-limit",
        true,
        Keyed,
    ),
    o("-ftemplate-depth", "--ftemplate-depth", true, Keyed),
    o("-noeh", "--no-exceptions", false, Keyed),
    o("-x", "--x", true, Keyed),
    o("-std", "--std", true, Keyed),
    o("-stdlib", "--stdlib", true, Keyed),
    o(
        "-nohdinitlist",
        "--no-host-device-initializer-list",
        false,
        Keyed,
    ),
    o(
        "-nohdmoveforward",
        "--no-host-device-move-forward",
        false,
        Keyed,
    ),
    o(
        "-expt-relaxed-constexpr",
        "--expt-relaxed-constexpr",
        false,
        Keyed,
    ),
    o("-extended-lambda", "--extended-lambda", false, Keyed),
    o(
        "-expt-extended-lambda",
        "--expt-extended-lambda",
        false,
        Keyed,
    ),
    o("-m", "--machine", true, Keyed),
    o("-m64", "--m64", false, Keyed),
    o("-Xlinker", "--linker-options", true, Keyed),
    o("-Xptxas", "--ptxas-options", true, Keyed),
    // Accepted by nvcc though `--help` does not list them (FlashInfer passes the first with
    // every module): `UNLISTED`.
    o("-Xfatbin", "--fatbin-options", true, Keyed),
    o("-Xcudafe", "--cudafe-options", true, Keyed),
    o("-Xnvlink", "--nvlink-options", true, Keyed),
    o(
        "-static-global-template-stub",
        "--static-global-template-stub",
        true,
        Keyed,
    ),
    o(
        "-device-entity-has-hidden-visibility",
        "--device-entity-has-hidden-visibility",
        true,
        Keyed,
    ),
    o("-t", "--threads", true, Keyed),
    o("-fmax-errors", "--fmax-errors", true, Keyed),
    o("-split-compile", "--split-compile", true, Keyed),
    o(
        "-split-compile-extended",
        "--split-compile-extended",
        true,
        Keyed,
    ),
    o("-nodlink", "--no-device-link", false, Keyed),
    o("-arch", "--gpu-architecture", true, Keyed),
    o("-code", "--gpu-code", true, Keyed),
    o("-gencode", "--generate-code", true, Keyed),
    o("-rdc", "--relocatable-device-code", true, Keyed),
    o("-e", "--entries", true, Keyed),
    o("-maxrregcount", "--maxrregcount", true, Keyed),
    o("-use_fast_math", "--use_fast_math", false, Keyed),
    o("-ftz", "--ftz", true, Keyed),
    o("-prec-div", "--prec-div", true, Keyed),
    o("-prec-sqrt", "--prec-sqrt", true, Keyed),
    o("-fmad", "--fmad", true, Keyed),
    o(
        "-extra-device-vectorization",
        "--extra-device-vectorization",
        false,
        Keyed,
    ),
    o("-default-stream", "--default-stream", true, Keyed),
    o("-w", "--disable-warnings", false, Keyed),
    o(
        "-keep-device-functions",
        "--keep-device-functions",
        false,
        Keyed,
    ),
    o("-src-in-ptx", "--source-in-ptx", false, Keyed),
    o("-restrict", "--restrict", false, Keyed),
    o("-Wreorder", "--Wreorder", false, Keyed),
    o(
        "-Wdefault-stream-launch",
        "--Wdefault-stream-launch",
        false,
        Keyed,
    ),
    o(
        "-Wmissing-launch-bounds",
        "--Wmissing-launch-bounds",
        false,
        Keyed,
    ),
    o(
        "-Wext-lambda-captures-this",
        "--Wext-lambda-captures-this",
        false,
        Keyed,
    ),
    o(
        "-Wno-deprecated-declarations",
        "--Wno-deprecated-declarations",
        false,
        Keyed,
    ),
    o(
        "-Wno-deprecated-gpu-targets",
        "--Wno-deprecated-gpu-targets",
        false,
        Keyed,
    ),
    o("-Wconversion", "--Wconversion", false, Keyed),
    o("-Werror", "--Werror", true, Keyed),
    o("-res-usage", "--resource-usage", false, Keyed),
    o("-ewp", "--extensible-whole-program", false, Keyed),
    o("-no-compress", "--no-compress", false, Keyed),
    o("-err-no", "--display-error-number", false, Keyed),
    o("-no-err-no", "--no-display-error-number", false, Keyed),
    o("-diag-error", "--diag-error", true, Keyed),
    o("-diag-suppress", "--diag-suppress", true, Keyed),
    o("-diag-warn", "--diag-warn", true, Keyed),
    o("-brief-diag", "--brief-diagnostics", true, Keyed),
    o("-jtd", "--jump-table-density", true, Keyed),
    o("-reloc-ptx", "--relocatable-ptx", false, Keyed),
    o(
        "-device-stack-protector",
        "--device-stack-protector",
        true,
        Keyed,
    ),
    o("-compress-mode", "--compress-mode", true, Keyed),
    o("-frandom-seed", "--frandom-seed", true, Keyed),
    o("--no-align-double", "", false, Keyed),
    o("-utf-8", "--utf-8", false, Keyed),
    o(
        "-skip-ptx-semantics-check",
        "--skip-ptx-semantics-check",
        false,
        Keyed,
    ),
    // Options that make nvcc do something else, or that the cache cannot see through.
    o("-odir", "--output-directory", true, NotCached),
    o("-arbin", "--archiver-binary", true, NotCached),
    o("-ldir", "--libdevice-directory", true, NotCached),
    o("-target-dir", "--target-directory", true, NotCached),
    o("-use-local-env", "--use-local-env", false, NotCached),
    o(
        "-force-cl-env-setup",
        "--force-cl-env-setup",
        false,
        NotCached,
    ),
    o("-apply-controls", "--apply-controls", true, NotCached),
    o("-Xarchive", "--archive-options", true, NotCached),
    o("-Xnvprune", "--nvprune-options", true, NotCached),
    // Forwarding unknown options changes nothing when every option is known, as a cacheable
    // command's are (an unknown option is never cached); CMake always passes the first.
    o(
        "-forward-unknown-to-host-compiler",
        "--forward-unknown-to-host-compiler",
        false,
        Keyed,
    ),
    o(
        "-forward-unknown-to-host-linker",
        "--forward-unknown-to-host-linker",
        false,
        Keyed,
    ),
    o(
        "-forward-unknown-opts",
        "--forward-unknown-opts",
        false,
        Keyed,
    ),
    o("-noprof", "--dont-use-profile", false, NotCached),
    o("-dryrun", "--dryrun", false, NotCached),
    o("-v", "--verbose", false, NotCached),
    o("-v2", "--verbose2", false, NotCached),
    o(
        "-fdevice-syntax-only",
        "--fdevice-syntax-only",
        false,
        NotCached,
    ),
    o(
        "-fdevice-time-trace",
        "--fdevice-time-trace",
        true,
        NotCached,
    ),
    o(
        "-fdevice-time-trace-granularity",
        "--fdevice-time-trace-granularity",
        true,
        NotCached,
    ),
    o("-keep", "--keep", false, NotCached),
    o("-keep-dir", "--keep-dir", true, NotCached),
    o("-save-temps", "--save-temps", false, NotCached),
    o("-clean", "--clean-targets", false, NotCached),
    o("-time", "--time", true, NotCached),
    o("-run-args", "--run-args", true, NotCached),
    o("-idp", "--input-drive-prefix", true, NotCached),
    o("-ddp", "--dependency-drive-prefix", true, NotCached),
    o("-dp", "--drive-prefix", true, NotCached),
    o("-prune", "--prune", false, NotCached),
    o("-qpp-config", "--qpp-config", false, NotCached),
    o(
        "-astoolspatch",
        "--compile-as-tools-patch",
        false,
        NotCached,
    ),
    o("-code-ls", "--list-gpu-code", false, NotCached),
    o("-arch-ls", "--list-gpu-arch", false, NotCached),
    o("-hls", "--host-linker-script", true, NotCached),
    o("-aug-hls", "--augment-host-linker-script", false, NotCached),
    o("-r", "--relocatable-link", false, NotCached),
    o("-concat", "--concat", false, NotCached),
    o("-fdevice-sanitize", "--fdevice-sanitize", true, NotCached),
    o("-jobserver", "--jobserver", false, NotCached),
    o("-safety-compat", "--safety-compatibility", false, NotCached),
    o("-h", "--help", false, NotCached),
    o("-V", "--version", false, NotCached),
];

impl Opt {
    /// The name a person knows it by: the long one when there is one.
    pub fn long_or_short(&self) -> &'static str {
        if self.long.is_empty() {
            self.short
        } else {
            self.long
        }
    }
}

/// Options nvcc accepts though its `--help` lists none of them (checked against every release
/// the suite runs: `tests/all/tables.rs`): a release's own `--help` cannot say whether it has
/// them, so [`crate::release::ReleaseOptions`] takes them as had.
pub const UNLISTED: &[&str] = &["-Xfatbin", "-Xcudafe"];

/// The option spelled exactly `name` (its short or long name, without a value).
pub fn find(name: &str) -> Option<&'static Opt> {
    OPTIONS
        .iter()
        .find(|o| o.short == name || (!o.long.is_empty() && o.long == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_spelled_with_dashes() {
        let mut seen = std::collections::HashSet::new();
        for o in OPTIONS {
            assert!(o.short.starts_with('-'), "{o:?}");
            assert!(o.long.is_empty() || o.long.starts_with("--"), "{o:?}");
            assert!(seen.insert(o.short), "{} twice", o.short);
            assert!(o.long.is_empty() || seen.insert(o.long), "{} twice", o.long);
            assert!(!o.joined || o.value, "a joined option takes a value: {o:?}");
        }
        assert!(find("-Wno-deprecated-gpu-targets").is_some_and(|o| !o.value));
        assert!(find("--generate-code").is_some_and(|o| o.value));
    }
}

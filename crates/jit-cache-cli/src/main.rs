//! `jit-cache`: the kernel cache's command line.
//!
//! Exit codes: 0 success, 1 a compile failed, 2 usage, 3 cache error.

mod args;
mod fleet;
mod launcher;
mod out;
mod pack;
mod real_nvcc;
mod shim;
mod shim_marker;

use args::{Cli, Command, SpecArgs};
use clap::Parser;
use jit_cache::{Answer, Cache, CacheOptions, Error, GcPolicy, KernelSpec, Outcome, RootMode};
use out::say;
use serde_json::json;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

const EXIT_COMPILE: u8 = 1;
const EXIT_CACHE: u8 = 3;

fn main() -> ExitCode {
    // `jit-cache nvcc ...`, `jit-cache /path/to/nvcc ...` or a symlink named `nvcc`: nvcc's
    // arguments, not ours.
    if let Some(code) = launcher::dispatch() {
        return code;
    }
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            if cli.json {
                say!("{}", json!({ "error": e.to_string() }));
            } else {
                eprintln!("jit-cache: {e}");
            }
            ExitCode::from(if e.compile_failure().is_some() {
                EXIT_COMPILE
            } else {
                EXIT_CACHE
            })
        }
    }
}

fn open(cli: &Cli) -> Result<Cache, Error> {
    let root = match &cli.cache_dir {
        Some(dir) => dir.clone(),
        None => jit_cache::default_root().ok_or_else(|| Error::UnsafeRoot {
            path: Default::default(),
            reason:
                "no cache directory: pass --cache-dir or set JIT_CACHE_DIR, XDG_CACHE_HOME or HOME"
                    .into(),
        })?,
    };
    let mode = if cli.team {
        RootMode::Team
    } else {
        RootMode::Private
    };
    let mut options = CacheOptions::default().mode(mode);
    if let Some(remote) = remote(cli) {
        options = options.remote(remote);
    }
    Cache::open_with(root, options)
}

/// The remote tier from `--remote`/`--remote-mode` over `JIT_CACHE_REMOTE*`.
fn remote(cli: &Cli) -> Option<jit_cache::Remote> {
    fleet::remote(cli.remote.as_ref(), cli.remote_mode)
}

/// A caller's name as a terminal may show it: control characters (a newline, an escape
/// sequence in a stored entry's key) written as escapes, so a name can neither forge a line of
/// the listing nor drive the terminal.
fn printable(name: &str) -> String {
    name.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

fn run(cli: &Cli) -> Result<u8, Error> {
    // Listing a pack needs no cache.
    if let Command::Pack {
        command: args::PackCommand::Ls { file },
    } = &cli.command
    {
        return pack::ls(cli, file);
    }
    // Nor does making a shim.
    if let Command::Shim { dir } = &cli.command {
        return Ok(shim::run(cli.json, dir));
    }
    let cache = open(cli)?;
    match &cli.command {
        Command::Build { spec, jobs } => build(cli, &cache, spec, *jobs),
        Command::Explain { spec } => {
            let mut out = Vec::new();
            for s in spec.specs()? {
                let explanation = cache.explain(&s)?;
                if cli.json {
                    out.push(serde_json::to_value(&explanation).unwrap_or_default());
                } else {
                    say!("{explanation}");
                }
            }
            if cli.json {
                say!("{}", json!({ "explain": out }));
            }
            Ok(0)
        }
        Command::Stats => {
            let stats = cache.stats()?;
            if cli.json {
                let launcher: serde_json::Map<String, serde_json::Value> =
                    launcher::counts(cache.root())
                        .into_iter()
                        .map(|(line, count)| (line.to_string(), count.into()))
                        .collect();
                say!(
                    "{}",
                    json!({ "root": cache.root(), "stats": stats, "launcher": launcher,
                            "remote": cache.remote_stats() })
                );
            } else {
                say!("root:            {}", cache.root().display());
                say!("entries:         {}", stats.entries);
                say!("bytes:           {}", stats.bytes);
                say!("builds recorded: {}", stats.builds_recorded);
                say!("failures:        {}", stats.failures);
                say!("staging:         {}", stats.staging);
                say!("trash:           {}", stats.trash);
                let asked = stats.hits
                    + stats.built
                    + stats.fetched
                    + stats.not_cached.values().sum::<u64>();
                say!("hits:            {}", stats.hits);
                say!("built:           {}", stats.built);
                say!("fetched:         {}", stats.fetched);
                for (why, count) in &stats.not_cached {
                    say!("not cached:      {count} ({why})");
                }
                if asked > 0 {
                    say!(
                        "hit rate:        {:.1}% of {asked} requests",
                        100.0 * stats.hits as f64 / asked as f64
                    );
                }
                for (line, count) in launcher::counts(cache.root()) {
                    say!("launcher {line}: {count}");
                }
                say!("filesystem:      {}", stats.filesystem);
                say!("protocol:        {}", stats.protocol);
                let remote = cache.remote_stats();
                say!(
                    "remote:          {} hits, {} misses, {} uploads, {} bytes fetched, {} bytes uploaded",
                    remote.hits, remote.misses, remote.uploads, remote.bytes_fetched, remote.bytes_uploaded
                );
                say!(
                    "remote faults:   {} errors, {} rejected, {} leases waited, {} failures fetched, {} shared",
                    remote.errors, remote.rejected, remote.leases_waited, remote.failures_fetched, remote.failures_shared
                );
            }
            Ok(0)
        }
        Command::Ls => {
            let entries = cache.entries()?;
            if cli.json {
                say!("{}", json!({ "entries": entries }));
            } else {
                for e in entries {
                    say!(
                        "{:<24} {:<7} {:>9} {}",
                        printable(&e.name),
                        e.kind,
                        e.bytes,
                        e.path.display()
                    );
                }
            }
            Ok(0)
        }
        Command::Verify => {
            let report = cache.verify()?;
            if cli.json {
                say!("{}", json!({ "verify": report }));
            } else {
                say!(
                    "checked {}, corrupt {}",
                    report.checked,
                    report.corrupt.len()
                );
                for (path, why) in &report.corrupt {
                    say!("  moved aside {}: {why}", path.display());
                }
            }
            Ok(0)
        }
        Command::Gc { max_size, max_age } => {
            let report = cache.gc(GcPolicy {
                max_bytes: *max_size,
                max_age: *max_age,
            })?;
            print_gc(cli, "gc", &report);
            Ok(0)
        }
        Command::Clear => {
            let report = cache.clear()?;
            print_gc(cli, "clear", &report);
            Ok(0)
        }
        Command::Pack { command } => pack::run(cli, &cache, command),
        Command::Shim { dir } => Ok(shim::run(cli.json, dir)),
    }
}

fn print_gc(cli: &Cli, what: &str, report: &jit_cache::GcReport) {
    if cli.json {
        say!("{}", json!({ what: report }));
    } else {
        say!(
            "{what}: evicted {} ({} bytes), skipped busy {}, swept {}",
            report.evicted,
            report.bytes_freed,
            report.skipped_busy,
            report.swept
        );
    }
}

fn build(cli: &Cli, cache: &Cache, spec_args: &SpecArgs, jobs: Option<usize>) -> Result<u8, Error> {
    let specs: Vec<KernelSpec> = spec_args.specs()?;
    let bar = (specs.len() > 1 && !cli.json && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new(specs.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let start = Instant::now();
    let results = cache.build_many(&specs, jobs, &|p| {
        if let Some(bar) = &bar {
            bar.set_message(p.spec.name.clone());
            bar.inc(1);
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let elapsed_us = start.elapsed().as_micros() as u64;
    let mut code = 0;
    let mut rows = Vec::new();
    for (spec, result) in specs.iter().zip(&results) {
        match result {
            Ok(answer) => {
                if cli.json {
                    rows.push(answer_json(spec, answer));
                } else {
                    if let Some(w) = &answer.warning {
                        eprintln!("jit-cache: warning: {w}");
                    }
                    say!(
                        "{}: {} {}",
                        spec.name,
                        answer.outcome,
                        lasting_path(spec, answer).display()
                    );
                }
            }
            Err(e) => {
                let compile = e.compile_failure().is_some();
                code = code.max(if compile { EXIT_COMPILE } else { EXIT_CACHE });
                if cli.json {
                    rows.push(json!({
                        "name": spec.name, "error": e.to_string(),
                        "diagnostics": e.compile_failure().map(|f| serde_json::to_value(&f.diagnostics).unwrap_or_default()),
                        "cause": e.compile_failure().map(|f| serde_json::to_value(&f.cause).unwrap_or_default()),
                    }));
                } else {
                    eprintln!("{}: error: {e}", spec.name);
                }
            }
        }
    }
    if cli.json {
        say!("{}", json!({ "results": rows, "elapsed_us": elapsed_us }));
    }
    // Exit codes: a compile failure wins over success; a cache error over both.
    Ok(if code == EXIT_CACHE { EXIT_CACHE } else { code })
}

/// A path to the answer's artifact that exists after this command ends, for the text and JSON
/// forms alike. A cached artifact's entry outlives the command; an uncached one (whatever made it
/// so: a full, read-only or failing cache, an input changed while it compiled) lives in a private
/// directory removed with the answer, so its bytes are copied to a directory of its own under
/// the temporary directory, which is left for the caller (and named in a note). Whether it is
/// cached is the artifact's own answer, not the warning's presence.
fn lasting_path(spec: &KernelSpec, answer: &Answer) -> std::path::PathBuf {
    if answer.artifact.is_cached() {
        return answer.artifact.path().to_path_buf();
    }
    let kept = std::env::temp_dir().join(format!(
        "jit-cache-uncached.{}.{}",
        spec.name,
        std::process::id()
    ));
    let file = kept.join(
        answer
            .artifact
            .path()
            .file_name()
            .unwrap_or_else(|| std::ffi::OsStr::new("artifact")),
    );
    let copied = std::fs::create_dir_all(&kept)
        .and_then(|()| std::fs::write(&file, answer.artifact.bytes()));
    match copied {
        Ok(()) => {
            eprintln!(
                "jit-cache: note: `{}` is not cached; its artifact is kept at {} (remove it when done)",
                spec.name,
                file.display()
            );
            file
        }
        Err(e) => {
            eprintln!(
                "jit-cache: warning: keep a copy of `{}` at {}: {e}",
                spec.name,
                file.display()
            );
            answer.artifact.path().to_path_buf()
        }
    }
}

fn answer_json(spec: &KernelSpec, answer: &Answer) -> serde_json::Value {
    let (outcome, reasons) = match &answer.outcome {
        Outcome::Hit => ("hit", Vec::new()),
        Outcome::Built => ("built", Vec::new()),
        Outcome::Fetched => ("fetched", Vec::new()),
        Outcome::Rebuilt { reasons } => {
            ("rebuilt", reasons.iter().map(ToString::to_string).collect())
        }
        _ => ("other", Vec::new()),
    };
    json!({
        "name": spec.name,
        "outcome": outcome,
        "reasons": reasons,
        "path": lasting_path(spec, answer),
        "bytes": answer.artifact.bytes().len(),
        "warning": answer.warning,
    })
}

//! `jit-cache pack export|import|ls`.

use crate::args::{Cli, PackCommand};
use crate::out::say;
use jit_cache::{Cache, Error, PackFilter};
use serde_json::json;
use std::path::Path;

pub(crate) fn run(cli: &Cli, cache: &Cache, command: &PackCommand) -> Result<u8, Error> {
    match command {
        PackCommand::Export {
            output,
            name,
            arches,
            kinds,
        } => {
            let mut filter = PackFilter::default();
            if let Some(glob) = name {
                filter = filter.name(glob.clone());
            }
            for arch in arches {
                filter = filter.arch(arch.clone());
            }
            for kind in kinds {
                filter = filter.kind(*kind);
            }
            let report = cache.export_pack(output, &filter)?;
            if cli.json {
                say!("{}", json!({ "export": report, "pack": output }));
            } else {
                say!(
                    "exported {} entries, {} bytes, to {}",
                    report.entries,
                    report.bytes,
                    output.display()
                );
                for (path, why) in &report.skipped_damaged {
                    say!("  left out damaged {}: {why}", path.display());
                }
            }
            Ok(0)
        }
        PackCommand::Import { file } => {
            let report = cache.import_pack(file)?;
            if cli.json {
                say!("{}", json!({ "import": report, "pack": file }));
            } else {
                say!(
                    "imported {}, present {}, skipped {} of {} entries ({} bytes read, {} bytes shared, {} flushes)",
                    report.imported,
                    report.present,
                    report.skipped.len(),
                    report.entries,
                    report.bytes_read,
                    report.bytes_shared,
                    report.flushes
                );
                if let Some(why) = &report.not_shared {
                    say!("  files written, not shared: {why}");
                }
                for (entry, why) in &report.skipped {
                    say!("  skipped {entry}: {why}");
                }
            }
            Ok(0)
        }
        PackCommand::Ls { file } => ls(cli, file),
    }
}

pub(crate) fn ls(cli: &Cli, file: &Path) -> Result<u8, Error> {
    let entries = jit_cache::list_pack(file)?;
    if cli.json {
        say!("{}", json!({ "pack": file, "entries": entries }));
    } else {
        for e in entries {
            let bytes: u64 = e.files.iter().map(|(_, n)| n).sum();
            let what = e.output.as_deref().unwrap_or(e.kind.name());
            say!(
                "{:<24} {:<7} {:>9} {} {}",
                e.name,
                what,
                bytes,
                e.arches.join(","),
                e.toolchain.as_deref().unwrap_or("")
            );
        }
    }
    Ok(0)
}

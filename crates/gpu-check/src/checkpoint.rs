//! The checkpoint: generate a safetensors file, stream it into device memory with `direct-io`
//! through pinned slots, verify every byte on the device, and compare GB/s with PyTorch's
//! `safetensors.torch.load_file(..., device="cuda")` and the disk's O_DIRECT ceiling.
//!
//! Each measured read starts cold for that file: it is fsynced and dropped from the page cache with
//! `posix_fadvise(POSIX_FADV_DONTNEED)`, which touches only this file (no machine-wide setting).

use crate::args::Args;
use crate::table::Table;
use anyhow::{bail, Context, Result};
use direct_io::{
    CachePolicy, Checkpoint, CudaSink, Engine, EngineChoice, EngineConfig, RingConfig,
};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Writes a checkpoint of about `bytes` bytes: tensors of several dtypes and odd shapes, so that
/// offsets are unaligned and some tensors span several slots. The content is a seeded xorshift
/// stream, so wrong bytes cannot hide as zeros.
fn generate(path: &Path, bytes: u64) -> Result<u64> {
    let mut tensors = Vec::new();
    let mut total = 0u64;
    let mut i = 0u64;
    while total < bytes {
        let (dtype, size, shape): (&str, u64, Vec<u64>) = match i % 4 {
            0 => ("F32", 4, vec![4096, 4096 + (i % 3)]),
            1 => ("F16", 2, vec![1001, 8191]),
            2 => ("BF16", 2, vec![3, 7, 1_000_003]),
            _ => ("U8", 1, vec![12_345_677]),
        };
        let len = size * shape.iter().product::<u64>();
        tensors.push((format!("t{i}"), dtype, shape, total, total + len));
        total += len;
        i += 1;
    }
    let mut header = String::from("{");
    for (n, (name, dtype, shape, start, end)) in tensors.iter().enumerate() {
        if n > 0 {
            header.push(',');
        }
        let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
        header.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{start},{end}]}}",
            shape.join(",")
        ));
    }
    header.push('}');
    let mut file = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    file.write_all(&(header.len() as u64).to_le_bytes())?;
    file.write_all(header.as_bytes())?;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut chunk = vec![0u8; 8 << 20];
    let mut left = total;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    let file = file.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(total)
}

/// Drops this file's pages from the page cache.
fn evict(path: &Path) -> Result<()> {
    let file = std::fs::File::open(path)?;
    file.sync_all()?;
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise on a valid descriptor with a length of 0 (to the end) only drops
    // clean cached pages of this file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        bail!("posix_fadvise DONTNEED {}: error {rc}", path.display());
    }
    Ok(())
}

fn gbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

pub fn run(args: &Args, table: &mut Table) -> Result<bool> {
    let path = args.work.join("checkpoint.safetensors");
    let bytes = generate(&path, (args.checkpoint_gib * (1u64 << 30) as f64) as u64)?;
    let checkpoint = Checkpoint::open(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut ok = true;

    // Ours: direct-io into device memory through pinned slots.
    evict(&path)?;
    let mut sink =
        CudaSink::new(0, checkpoint.tensor_lengths()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut engine = Engine::new(EngineChoice::Auto, EngineConfig::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ring = RingConfig {
        slots: 8,
        slot_size: 16 << 20,
    };
    let start = Instant::now();
    let report = checkpoint
        .load(&mut engine, CachePolicy::Direct, ring, &mut sink)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    sink.stream().synchronize()?;
    let ours = start.elapsed().as_secs_f64();
    table.row(
        "checkpoint size",
        format!(
            "{:.2} GiB, {} tensors",
            bytes as f64 / (1u64 << 30) as f64,
            checkpoint.tensors().len()
        ),
        "",
    );
    table.row(
        format!("ours: direct-io ({:?}) -> device", engine.kind()),
        format!("{:.2} GB/s", gbps(report.bytes, ours)),
        "",
    );

    // Verify every tensor on the device against the file, by copying it back.
    let file = std::fs::File::open(&path)?;
    let mut verified = 0u64;
    let mut wrong = 0u64;
    for (info, device) in checkpoint.tensors().iter().zip(sink.buffers()) {
        let back = sink.stream().clone_dtoh(device)?;
        let mut expected = vec![0u8; info.len as usize];
        file.read_exact_at(&mut expected, info.offset)?;
        wrong += back.iter().zip(&expected).filter(|(a, b)| a != b).count() as u64;
        verified += info.len;
    }
    ok &= wrong == 0 && verified == bytes;
    table.row(
        "bytes verified on the device",
        format!("{verified} ({wrong} wrong)"),
        if ok { "OK" } else { "WRONG BYTES" },
    );
    drop(sink);

    // PyTorch's loader on the same file.
    evict(&path)?;
    let script = "import sys,time,torch\nfrom safetensors.torch import load_file\ntorch.zeros(1,device='cuda');torch.cuda.synchronize()\nt=time.perf_counter();d=load_file(sys.argv[1],device='cuda');torch.cuda.synchronize();e=time.perf_counter()-t\nprint(sum(v.numel()*v.element_size() for v in d.values()),e)\n";
    match Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
    {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let mut it = text.split_whitespace();
            let (n, secs): (u64, f64) = (
                it.next().and_then(|v| v.parse().ok()).unwrap_or(0),
                it.next().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN),
            );
            table.row(
                "safetensors.torch.load_file(device=cuda)",
                format!("{:.2} GB/s", gbps(n, secs)),
                format!("ours {:.2}x", secs / ours),
            );
        }
        Ok(out) => table.row(
            "safetensors.torch.load_file(device=cuda)",
            "failed",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
                .to_string(),
        ),
        Err(e) => table.row(
            "safetensors.torch.load_file(device=cuda)",
            "not run",
            format!("python3: {e}"),
        ),
    }

    // The disk's O_DIRECT ceiling: dd with large direct reads.
    evict(&path)?;
    let start = Instant::now();
    let status = Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["of=/dev/null", "bs=64M", "iflag=direct"])
        .stderr(std::process::Stdio::null())
        .status()
        .context("run dd")?;
    let dd = start.elapsed().as_secs_f64();
    if status.success() {
        let size = std::fs::metadata(&path)?.len();
        table.row(
            "O_DIRECT ceiling (dd bs=64M iflag=direct)",
            format!("{:.2} GB/s", gbps(size, dd)),
            format!(
                "ours at {:.0}%",
                100.0 * gbps(report.bytes, ours) / gbps(size, dd)
            ),
        );
    }
    std::fs::remove_file(&path)?;
    Ok(ok)
}

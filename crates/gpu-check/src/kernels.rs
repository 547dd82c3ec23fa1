//! Kernels: build through jit-cache (cold, then hits), load with cudarc, launch, check on the CPU.

use crate::args::Args;
use crate::table::Table;
use anyhow::{Context, Result};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use jit_cache::{Cache, CacheOptions, KernelSpec, Outcome};
use std::time::Instant;

fn specs(args: &Args) -> Vec<(String, KernelSpec)> {
    ["vector_add", "reduce_sum", "gemm_f16"]
        .iter()
        .map(|name| {
            let spec = KernelSpec::from_file(args.kernels.join(format!("{name}.cu")))
                .include_dir(args.kernels.join("include"));
            (name.to_string(), spec)
        })
        .collect()
}

pub fn run(args: &Args, nvcc: &nvcc::Nvcc, table: &mut Table) -> Result<bool> {
    let root = args.work.join("cache");
    let options = CacheOptions::default().nvcc(nvcc.clone());
    let mut ok = true;
    // Cold: a fresh cache, one handle per build so each time is a process's.
    for (name, spec) in specs(args) {
        let start = Instant::now();
        let built = Cache::open_with(&root, options.clone())?.get_or_build(&spec)?;
        let cold = start.elapsed();
        let start = Instant::now();
        let again = Cache::open_with(&root, options.clone())?.get_or_build(&spec)?;
        let warm = start.elapsed();
        let hit = again.outcome == Outcome::Hit && again.artifact.bytes() == built.artifact.bytes();
        ok &= hit;
        table.row(
            format!("kernel {name}: cold build / warm hit"),
            format!(
                "{:.0} ms / {:.2} ms",
                cold.as_secs_f64() * 1e3,
                warm.as_secs_f64() * 1e3
            ),
            if hit { "hit OK" } else { "NOT A HIT" },
        );
    }
    let ctx = jit_cache::cuda::context(0)?;
    let stream = ctx.default_stream();
    let cache = Cache::open_with(&root, options)?;
    let mut functions = Vec::new();
    for (name, spec) in specs(args) {
        let built = cache.get_or_build(&spec)?;
        let start = Instant::now();
        let function = jit_cache::cuda::load_function(&ctx, &built.artifact, &name)?;
        table.row(
            format!("cudarc load {name} (cubin)"),
            format!("{:.2} ms", start.elapsed().as_secs_f64() * 1e3),
            "loaded",
        );
        functions.push((name, function));
    }

    // vector_add on 1M elements.
    let n: u32 = 1 << 20;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| (n - i) as f32 * 0.25).collect();
    let (da, db) = (stream.clone_htod(&a)?, stream.clone_htod(&b)?);
    let mut dc = stream.alloc_zeros::<f32>(n as usize)?;
    let add = &functions
        .iter()
        .find(|f| f.0 == "vector_add")
        .context("vector_add loaded")?
        .1;
    let mut launch = stream.launch_builder(add);
    launch.arg(&da).arg(&db).arg(&mut dc).arg(&n);
    // SAFETY: vector_add(const float*, const float*, float*, unsigned) matches these arguments,
    // and the grid covers n threads over buffers of n elements.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }?;
    let c = stream.clone_dtoh(&dc)?;
    let wrong = c
        .iter()
        .enumerate()
        .filter(|(i, v)| **v != a[*i] + b[*i])
        .count();
    ok &= wrong == 0;
    table.row(
        "vector_add, 1M floats vs CPU",
        format!("{wrong} wrong"),
        if wrong == 0 { "OK" } else { "WRONG" },
    );

    // reduce_sum over 1M floats with exactly representable values.
    let input: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let expected: f64 = input.iter().map(|v| *v as f64).sum();
    let din = stream.clone_htod(&input)?;
    let mut dout = stream.alloc_zeros::<f32>(1)?;
    let reduce = &functions
        .iter()
        .find(|f| f.0 == "reduce_sum")
        .context("reduce_sum loaded")?
        .1;
    let blocks = n.div_ceil(512);
    let mut launch = stream.launch_builder(reduce);
    launch.arg(&din).arg(&mut dout).arg(&n);
    // SAFETY: reduce_sum(const float*, float*, unsigned) with 256 threads per block, each block
    // reducing 512 inputs, as the kernel expects.
    unsafe {
        launch.launch(LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        })
    }?;
    let got = stream.clone_dtoh(&dout)?[0] as f64;
    let close = (got - expected).abs() <= expected * 1e-6;
    ok &= close;
    table.row(
        "reduce_sum, 1M floats vs CPU",
        format!("{got} vs {expected}"),
        if close { "OK" } else { "WRONG" },
    );
    Ok(ok)
}

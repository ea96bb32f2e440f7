//! Prints gemm GFLOP/s (2·M·N·K / time) on the default adapter (honours
//! `WGPU_BACKEND`), and the first-call time of each layout (mostly pipeline
//! compilation); best of several runs, plus GFLOP per CPU-second of the whole
//! process (steadier than wall time on a shared machine). `WGPU_TP_GEMM_VARIANT`
//! picks the kernel. `cargo run --release --example gemm_speed [f16] [sizes...]`;
//! with `f16`, A and B are f16 (accumulated in f32, C f32): on adapters with
//! cooperative matrices `Auto` runs the tensor-core kernel.

use std::time::Instant;

use wgpu_tp::kernels::{self, GemmOptions};
use wgpu_tp::{Mesh, Result};

fn main() -> Result<()> {
    let mesh = Mesh::simulated(1)?;
    let r = &mesh.ranks()[0];
    println!("adapter: {}", mesh.adapter_summary());
    // First call per layout: compile (the GEMM pipeline once, the pack kernel
    // once) + tiny run.
    for (ta, tb, n) in [
        (false, false, 8),
        (false, false, 7),
        (true, false, 8),
        (false, true, 8),
        (false, true, 7),
        (true, true, 8),
    ] {
        let a = r.upload(&[8, 8], &[1.0; 64])?;
        let b = r.upload(&[8, n], &vec![1.0; 8 * n])?;
        let b = if tb { b.reshape(&[n, 8])? } else { b };
        let built = r.device().pipelines_built();
        let t = Instant::now();
        let opts = GemmOptions::new().trans_a(ta).trans_b(tb);
        kernels::gemm(&a, &b, opts)?.to_vec()?;
        println!(
            "first call ta={ta} tb={tb} n={n}: {:.0} ms, {} pipeline(s) built",
            t.elapsed().as_secs_f64() * 1e3,
            r.device().pipelines_built() - built
        );
    }
    let f16 = std::env::args().any(|a| a == "f16");
    if f16 {
        println!(
            "f16 operands, cooperative matrices: {}",
            r.device().has_coop_f16()
        );
    }
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![256, 512, 1024]
    } else {
        sizes
    };
    for s in sizes {
        let data: Vec<f32> = (0..s * s).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
        let a = r.upload(&[s, s], &data)?;
        let (a, b) = if f16 {
            let h = kernels::cast(&a, wgpu_tp::DType::F16)?;
            (h.clone(), h)
        } else {
            (a.clone(), a)
        };
        for (ta, tb) in [(false, false), (false, true), (true, false)] {
            let opts = GemmOptions::new()
                .trans_a(ta)
                .trans_b(tb)
                .out_dtype(f16.then_some(wgpu_tp::DType::F32));
            kernels::gemm(&a, &b, opts)?;
            mesh.synchronize()?;
            // Best of several runs: the machine may be shared.
            let reps = (4e9 / (2.0 * (s * s * s) as f64)).clamp(3.0, 30.0) as usize;
            let mut dt = f64::INFINITY;
            let cpu0 = cpu_seconds();
            for _ in 0..reps {
                let t = Instant::now();
                kernels::gemm(&a, &b, opts)?;
                mesh.synchronize()?;
                dt = dt.min(t.elapsed().as_secs_f64());
            }
            let cpu = (cpu_seconds() - cpu0) / reps as f64;
            println!(
                "{s}^3 ta={ta} tb={tb}: {:.2} GFLOP/s ({:.1} ms; {:.2} GFLOP per CPU-second)",
                2.0 * (s * s * s) as f64 / dt / 1e9,
                dt * 1e3,
                2.0 * (s * s * s) as f64 / cpu / 1e9,
            );
        }
    }
    Ok(())
}

/// User + system CPU time of this process (all threads), from /proc (Linux
/// only; 0 elsewhere). Less sensitive than wall time to other load on a
/// shared machine.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

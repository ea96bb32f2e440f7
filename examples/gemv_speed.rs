//! The small-M GEMM (one decoding token times a weight) at GPT-2 124M's
//! layer shapes: the buffer kernel (`gemv_with_candidate`, the guess) and
//! each texture knob (`gemv_texture_with`, CPU adapters' kept textures),
//! interleaved round by round in one process, best of 40 rounds each (the
//! least disturbed on a shared machine), with GB/s of weights and the
//! texture's time against the buffer's. Honours `WGPU_BACKEND`.
//! `cargo run --release --example gemv_speed [rows...]` (default 1).

use std::time::Instant;

use wgpu_tp::kernels::{self, gemv};
use wgpu_tp::{DType, Mesh, Result};

fn main() -> Result<()> {
    let mesh = Mesh::simulated(1)?;
    let r = &mesh.ranks()[0];
    println!("adapter: {}", mesh.adapter_summary());
    let rows: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let rows = if rows.is_empty() { vec![1] } else { rows };
    let knobs = gemv::TEXTURE_CANDIDATES;
    // GPT-2's attention, its projection, the MLP's two, a block of the head.
    for (n, k) in [
        (2304, 768),
        (768, 768),
        (3072, 768),
        (768, 3072),
        (12800, 768),
    ] {
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
            .collect();
        let wide = r.upload(&[n, k], &w)?;
        for dtype in [DType::F32, DType::BF16] {
            let b = kernels::cast(&wide, dtype)?;
            for &m in &rows {
                if m * k > 16384 {
                    println!("n {n} k {k} {dtype} rows {m}: A past the texture entries' 64 KiB");
                    continue;
                }
                let a = r.upload(&[m, k], &vec![0.25; m * k])?;
                let run = |i: usize| -> Result<()> {
                    match i {
                        0 => gemv::gemv_with_candidate(&a, &b, true, 2).map(drop),
                        _ => gemv::gemv_texture_with(&a, &b, knobs[i - 1]).map(drop),
                    }
                };
                // Pipelines built, textures made and kept.
                for i in 0..=knobs.len() {
                    run(i)?;
                    run(i)?;
                }
                mesh.synchronize()?;
                let mut best = vec![f64::MAX; knobs.len() + 1];
                for _ in 0..40 {
                    for (i, best) in best.iter_mut().enumerate() {
                        let t = Instant::now();
                        for _ in 0..3 {
                            run(i)?;
                        }
                        mesh.synchronize()?;
                        *best = best.min(t.elapsed().as_secs_f64() / 3.0);
                    }
                }
                let bytes = (n * k * dtype.size_bytes()) as f64;
                let mut line = format!(
                    "n {n} k {k} {dtype} rows {m}: buffer {:.2} ms {:.1} GB/s",
                    best[0] * 1e3,
                    bytes / best[0] / 1e9
                );
                for (knob, t) in knobs.iter().zip(&best[1..]) {
                    line += &format!(
                        " | texture {}/{} {:.2} ms {:.1} GB/s ({:.2}×)",
                        knob.0,
                        knob.1,
                        t * 1e3,
                        bytes / t / 1e9,
                        t / best[0]
                    );
                }
                println!("{line}");
            }
        }
    }
    Ok(())
}

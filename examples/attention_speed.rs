//! Causal attention's forward and backward at GPT-2 124M's training shape
//! (2 × 256 tokens, 12 heads of 64) on each kind of entries the products
//! can take (the settings' `attention_entries`, `WGPU_TP_ATTENTION_ENTRIES`:
//! the scalar entries, the vec4 ones with operands in buffers, and in
//! textures where the adapter is a CPU one), interleaved round by round in
//! one process, best of 11 rounds each.
//! Honours `WGPU_BACKEND`.
//! `cargo run --release --example attention_speed`

use std::time::Instant;

use wgpu_tp::kernels::{self, AttentionShape};
use wgpu_tp::{AttentionEntries, Mesh, Result};

fn main() -> Result<()> {
    let mesh = Mesh::simulated(1)?;
    let r = &mesh.ranks()[0];
    println!("adapter: {}", mesh.adapter_summary());
    let (b, t, h, d) = (2, 256, 12, 64);
    let s = AttentionShape::new(b, t, h, d);
    let qkv: Vec<f32> = (0..b * t * 3 * h * d)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let qkv = r.upload(&[b * t, 3 * h * d], &qkv)?;
    let d_out = r.upload(&[b * t, h * d], &vec![0.01; b * t * h * d])?;
    let kinds = [
        ("scalar", AttentionEntries::Scalar),
        ("buffers", AttentionEntries::Buffers),
        ("textures", AttentionEntries::Textures),
    ];
    let mut best = [[f64::MAX; 2]; 3];
    // Round 0 builds the pipelines.
    for round in 0..12 {
        for ((_, kind), best) in kinds.iter().zip(&mut best) {
            wgpu_tp::update_settings(|s| s.attention_entries = Some(*kind))?;
            let t0 = Instant::now();
            let f = kernels::attention_forward(&qkv, s)?;
            mesh.synchronize()?;
            let t1 = Instant::now();
            kernels::attention_backward(&qkv, &f.probs, &d_out, s)?;
            mesh.synchronize()?;
            if round > 0 {
                best[0] = best[0].min((t1 - t0).as_secs_f64());
                best[1] = best[1].min(t1.elapsed().as_secs_f64());
            }
        }
    }
    for ((kind, _), [f, bw]) in kinds.iter().zip(best) {
        let (f0, b0) = (best[0][0], best[0][1]);
        println!(
            "{kind:>8}: forward {:.2} ms ({:.2}× scalar), backward {:.2} ms ({:.2}×)",
            f * 1e3,
            f / f0,
            bw * 1e3,
            bw / b0
        );
    }
    Ok(())
}

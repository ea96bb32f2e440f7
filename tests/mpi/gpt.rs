//! The `gpt` scenario: loss, every gradient and two AdamW steps of a GPT on
//! `MeshBuilder::mpi()`, bit-identical to the same model on a single-process
//! mesh of the same size (built and run on rank 0), with the same
//! communication counts.

use wgpu_tp::nn::{AdamW, Gpt, GptConfig, Params};
use wgpu_tp::{Mesh, MeshBuilder};

use super::collectives::data;

/// Loss bits, then (name, bits) of every gradient and, after two steps,
/// every parameter.
type Run = (Vec<u32>, Vec<(String, Vec<u32>)>, Vec<(String, Vec<u32>)>);

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn train(mesh: &Mesh, sp: bool) -> wgpu_tp::Result<Run> {
    // Uneven on purpose: 11 tokens of vocabulary, 3 heads, 14 tokens.
    let mut cfg = GptConfig::new(11, 8, 12, 3, 2);
    (cfg.ffn, cfg.sequence_parallel) = (20, sp);
    let mut gpt = Gpt::new(mesh, cfg, 7)?;
    let ids: Vec<i32> = data(1, 0, 14)
        .iter()
        .map(|v| ((v + 1.0) * 5.0) as i32 % 11)
        .collect();
    let targets: Vec<i32> = data(2, 0, 14)
        .iter()
        .map(|v| ((v + 1.0) * 5.0) as i32 % 11)
        .collect();
    let mut opt = AdamW::new(1e-2);
    let mut losses = Vec::new();
    let mut grads = Vec::new();
    for step in 0..2 {
        gpt.zero_grad();
        let loss = gpt.loss(&ids, &targets, 7)?;
        losses.extend(bits(&loss.to_host()?));
        loss.backward()?;
        if step == 0 {
            for (n, p) in gpt.named_parameters() {
                grads.push((n, bits(&p.master_grad()?.unwrap_or_default())));
            }
        }
        opt.step(&mut gpt)?;
    }
    let params = gpt
        .named_parameters()
        .into_iter()
        .map(|(n, p)| Ok((n, bits(&p.master()?))))
        .collect::<wgpu_tp::Result<Vec<_>>>()?;
    Ok((losses, grads, params))
}

pub fn run(mesh: &Mesh) -> Result<usize, String> {
    let e = |e: wgpu_tp::Error| e.to_string();
    let (me, p) = (mesh.process_index(), mesh.size());
    let single = if me == 0 {
        Some(MeshBuilder::new().ranks(p).build().map_err(e)?)
    } else {
        None
    };
    for sp in [false, true] {
        mesh.reset_comm_stats();
        let got = train(mesh, sp).map_err(|e| format!("sp={sp}: {e}"))?;
        let stats = mesh.comm_stats();
        let Some(single) = &single else { continue };
        single.reset_comm_stats();
        let want = train(single, sp).map_err(e)?;
        if got.0 != want.0 {
            return Err(format!(
                "sp={sp}: losses differ: {:?} vs {:?}",
                got.0, want.0
            ));
        }
        for (what, a, b) in [
            ("gradient", &got.1, &want.1),
            ("parameter", &got.2, &want.2),
        ] {
            if a.len() != b.len() || a.is_empty() {
                return Err(format!("sp={sp}: {} vs {} {what}s", a.len(), b.len()));
            }
            for ((n, x), (_, y)) in a.iter().zip(b) {
                if x != y {
                    return Err(format!(
                        "sp={sp}: {what} {n} differs from the single-process run"
                    ));
                }
            }
        }
        if stats != single.comm_stats() {
            return Err(format!(
                "sp={sp}: communication differs: {stats:?} vs single-process {:?}",
                single.comm_stats()
            ));
        }
        println!(
            "gpt sp={sp} P={p}: loss {:?}, {} gradients and parameters bit-identical",
            got.0.iter().map(|b| f32::from_bits(*b)).collect::<Vec<_>>(),
            got.1.len()
        );
    }
    Ok(me)
}

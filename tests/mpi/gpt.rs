//! The `gpt` scenario: loss, every gradient and two AdamW steps of a GPT
//! (and of a Llama-family model whose ranks share key/value heads) on
//! `MeshBuilder::mpi()`, bit-identical to the same model on a single-process
//! mesh of the same size (built and run on rank 0), with the same
//! communication counts.

use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{
    AdamW, ColumnParallelConfig, ColumnParallelLinear, Overlap, Params, RowParallelConfig,
    RowParallelLinear, load_safetensors, save_safetensors, to_safetensors_bytes,
};
use wgpu_tp::{Collective, DTensor, Mesh, MeshBuilder, Placement};

use super::collectives::data;

/// Loss bits, then (name, bits) of every gradient and, after two steps,
/// every parameter.
type Run = (Vec<u32>, Vec<(String, Vec<u32>)>, Vec<(String, Vec<u32>)>);

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A GPT variant: plain, sequence-parallel, or with dropout (whose masks
/// depend on each rank's global index).
#[derive(Clone, Copy, Debug)]
enum Variant {
    Plain,
    SequenceParallel,
    Dropout,
}

fn train(mesh: &Mesh, v: Variant) -> wgpu_tp::Result<Run> {
    // Uneven on purpose: 11 tokens of vocabulary, 3 heads, 14 tokens.
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    let opts = LoadOptions::default().sequence_parallel(matches!(v, Variant::SequenceParallel));
    if matches!(v, Variant::Dropout) {
        (cfg.embd_pdrop, cfg.resid_pdrop, cfg.attn_pdrop) = (0.2, 0.2, 0.1);
    }
    let mut gpt = CausalLm::new_with(mesh, cfg, 7, opts)?;
    gpt.set_mode(matches!(v, Variant::Dropout), 3);
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
    for sp in [Variant::Plain, Variant::SequenceParallel, Variant::Dropout] {
        mesh.reset_comm_stats();
        let got = train(mesh, sp).map_err(|e| format!("{sp:?}: {e}"))?;
        let stats = mesh.comm_stats();
        let Some(single) = &single else { continue };
        single.reset_comm_stats();
        let want = train(single, sp).map_err(e)?;
        if got.0 != want.0 {
            return Err(format!(
                "{sp:?}: losses differ: {:?} vs {:?}",
                got.0, want.0
            ));
        }
        for (what, a, b) in [
            ("gradient", &got.1, &want.1),
            ("parameter", &got.2, &want.2),
        ] {
            if a.len() != b.len() || a.is_empty() {
                return Err(format!("{sp:?}: {} vs {} {what}s", a.len(), b.len()));
            }
            for ((n, x), (_, y)) in a.iter().zip(b) {
                if x != y {
                    return Err(format!(
                        "{sp:?}: {what} {n} differs from the single-process run"
                    ));
                }
            }
        }
        if stats != single.comm_stats() {
            return Err(format!(
                "{sp:?}: communication differs: {stats:?} vs single-process {:?}",
                single.comm_stats()
            ));
        }
        println!(
            "gpt {sp:?} P={p}: loss {:?}, {} gradients and parameters bit-identical",
            got.0.iter().map(|b| f32::from_bits(*b)).collect::<Vec<_>>(),
            got.1.len()
        );
    }
    ring_mlp(mesh, single.as_ref())?;
    checkpoint(mesh, single.as_ref())?;
    llama(mesh, single.as_ref())?;
    quantized(mesh, single.as_ref())?;
    Ok(me)
}

/// A Q4_K_M GGUF model (SmolLM2-shaped, 4 query over 2 key/value heads,
/// K-quant blocks split over the processes): logits, loss and the input
/// gradients reaching the f32 norms bit-identical to the single-process
/// mesh.
fn quantized(mesh: &Mesh, single: Option<&Mesh>) -> Result<(), String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/gguf/smollm2_q4_k_m/model.gguf"
    );
    let run = |m: &Mesh| -> wgpu_tp::Result<Run> {
        let model = CausalLm::from_gguf(m, path)?;
        let ids: Vec<i32> = (0..16).map(|i| (i * 7 + 3) % 320).collect();
        let logits = wgpu_tp::no_grad(|| model.logits(&ids, 8))?.to_host()?;
        let loss = model.loss(&ids, &ids, 8)?;
        let losses = bits(&loss.to_host()?);
        loss.backward()?;
        let mut grads = vec![("logits".to_string(), bits(&logits))];
        for (n, p) in model.named_parameters() {
            if let Some(g) = p.master_grad()? {
                grads.push((n, bits(&g)));
            }
        }
        Ok((losses, grads, Vec::new()))
    };
    let got = run(mesh).map_err(|e| format!("quantized: {e}"))?;
    let Some(single) = single else { return Ok(()) };
    let want = run(single).map_err(|e| format!("quantized single-process: {e}"))?;
    if got != want {
        return Err(
            "quantized: logits, loss or gradients differ from the single-process run".into(),
        );
    }
    println!(
        "quantized GGUF P={}: logits, loss and {} gradients bit-identical",
        mesh.size(),
        got.1.len() - 1
    );
    Ok(())
}

/// A Llama-family step (9 query over 3 key/value heads, so ranks share
/// key/value heads at P = 2 and 4): loss, every gradient and the parameters
/// after two AdamW steps bit-identical to the single-process mesh.
fn llama(mesh: &Mesh, single: Option<&Mesh>) -> Result<(), String> {
    use wgpu_tp::models::LlamaConfig;
    let run = |m: &Mesh| -> wgpu_tp::Result<Run> {
        let mut model = CausalLm::new(m, LlamaConfig::new(13, 18, 20, 2, 9, 3), 5)?;
        let ids: Vec<i32> = (0..10).map(|i| (i * 7 + 3) % 13).collect();
        let targets: Vec<i32> = (0..10).map(|i| (i * 5 + 1) % 13).collect();
        let mut opt = AdamW::new(1e-2);
        let (mut losses, mut grads) = (Vec::new(), Vec::new());
        for step in 0..2 {
            model.zero_grad();
            let loss = model.loss(&ids, &targets, 5)?;
            losses.extend(bits(&loss.to_host()?));
            loss.backward()?;
            if step == 0 {
                for (n, p) in model.named_parameters() {
                    grads.push((n, bits(&p.master_grad()?.unwrap_or_default())));
                }
            }
            opt.step(&mut model)?;
        }
        let params = model
            .named_parameters()
            .into_iter()
            .map(|(n, p)| Ok((n, bits(&p.master()?))))
            .collect::<wgpu_tp::Result<Vec<_>>>()?;
        Ok((losses, grads, params))
    };
    let got = run(mesh).map_err(|e| format!("llama: {e}"))?;
    let Some(single) = single else { return Ok(()) };
    let want = run(single).map_err(|e| format!("llama single-process: {e}"))?;
    if got != want {
        return Err(
            "llama: loss, gradients or parameters differ from the single-process run".into(),
        );
    }
    println!(
        "llama P={}: loss {:?}, {} gradients and parameters bit-identical",
        mesh.size(),
        got.0.iter().map(|b| f32::from_bits(*b)).collect::<Vec<_>>(),
        got.1.len()
    );
    Ok(())
}

/// A sequence-parallel MLP with `Overlap::Ring` (the ring steps go through
/// MPI point to point) over 13 tokens: output, input gradient and weight
/// gradients bit-identical to the single-process mesh.
fn ring_mlp(mesh: &Mesh, single: Option<&Mesh>) -> Result<(), String> {
    let run = |m: &Mesh| -> wgpu_tp::Result<Vec<Vec<u32>>> {
        let (t, d, h) = (13, 6, 10);
        let mut c = ColumnParallelConfig::new(d, h);
        (c.sequence_parallel, c.overlap) = (true, Overlap::Ring);
        let mut r = RowParallelConfig::new(h, d);
        (r.sequence_parallel, r.overlap) = (true, Overlap::Ring);
        let fc1 =
            ColumnParallelLinear::from_master(m, c, &data(3, 0, d * h), Some(&data(4, 0, h)))?;
        let fc2 = RowParallelLinear::from_master(m, r, &data(5, 0, h * d), Some(&data(6, 0, d)))?;
        let x = DTensor::from_host(m, &[t, d], &data(7, 0, t * d), Placement::Shard(0))?
            .requires_grad();
        let y = fc2.forward(&fc1.forward(&x)?)?;
        let dy = DTensor::from_host(m, &[t, d], &data(8, 0, t * d), Placement::Shard(0))?;
        y.backward_with(&dy)?;
        let mut out = vec![
            bits(&y.to_host()?),
            bits(
                &x.grad()
                    .map(|g| g.to_host())
                    .transpose()?
                    .unwrap_or_default(),
            ),
        ];
        for (_, p) in fc1
            .named_parameters()
            .into_iter()
            .chain(fc2.named_parameters())
        {
            out.push(bits(&p.master_grad()?.unwrap_or_default()));
        }
        Ok(out)
    };
    mesh.reset_comm_stats();
    let got = run(mesh).map_err(|e| format!("ring MLP: {e}"))?;
    let rings = mesh.comm_calls(Collective::SendRecv);
    if let Some(single) = single {
        let want = run(single).map_err(|e| e.to_string())?;
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            if a != b || a.is_empty() {
                let diff = a.iter().zip(b).filter(|(x, y)| x != y).count();
                return Err(format!(
                    "ring MLP output {i} (y, dx, then fc1's and fc2's gradients) differs from the single-process mesh in {diff} of {} values",
                    b.len()
                ));
            }
        }
        if mesh.size() > 1 && rings == 0 {
            return Err("the ring MLP sent no ring steps".into());
        }
        println!(
            "ring MLP P={}: y, dx and 4 gradients bit-identical, {rings} ring steps",
            mesh.size()
        );
    }
    Ok(())
}

/// A checkpoint of the MPI model is the single-process checkpoint's bytes:
/// every process takes part, process 0 alone writes, and every process
/// loads it back into a differently seeded model.
fn checkpoint(mesh: &Mesh, single: Option<&Mesh>) -> Result<(), String> {
    let e = |e: wgpu_tp::Error| e.to_string();
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    let gpt = CausalLm::new(mesh, cfg.clone(), 7).map_err(e)?;
    let bytes = to_safetensors_bytes(&gpt).map_err(e)?;
    let dir = std::env::var("WGPU_TP_MPI_TMP").map_err(|_| "WGPU_TP_MPI_TMP is not set")?;
    let path = std::path::Path::new(&dir).join("gpt.safetensors");
    save_safetensors(&gpt, &path).map_err(e)?;
    // The file is complete on every process once process 0 is past this.
    let one = mesh.ranks()[0].upload(&[1], &[1.0]).map_err(e)?;
    wgpu_tp::comm::all_reduce(mesh, &[one], wgpu_tp::ReduceOp::Sum).map_err(e)?;
    let mut other = CausalLm::new(mesh, cfg.clone(), 8).map_err(e)?;
    load_safetensors(&mut other, &path).map_err(e)?;
    if to_safetensors_bytes(&other).map_err(e)? != bytes {
        return Err("the loaded checkpoint differs from the saved one".into());
    }
    if let Some(single) = single {
        let want = to_safetensors_bytes(&CausalLm::new(single, cfg, 7).map_err(e)?).map_err(e)?;
        let file = std::fs::read(&path).map_err(|e| e.to_string())?;
        if bytes != want || file != want {
            return Err("the checkpoint differs from the single-process one".into());
        }
        println!(
            "checkpoint P={}: {} bytes, the same as one process's",
            mesh.size(),
            want.len()
        );
    }
    Ok(())
}

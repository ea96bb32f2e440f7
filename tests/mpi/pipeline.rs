//! The `pipeline` scenarios: a GPT split into two stages along `pp` over
//! MPI processes.
//! - `pipeline`: at np = 4 (pp 2 × tp 2) and np = 8 (pp 2 × dp 2 × tp 2),
//!   each process runs its stage 1F1B over two micro-batches, gradients
//!   averaged over `dp`, two AdamW steps. For every rank, a digest of its
//!   stage's loss, first gradients, final parameters and the communication
//!   of its dp and tp groups equals the same rank's on a single-process
//!   mesh of the same axes (built on rank 0), and it sent 2 + 1 messages
//!   per step (activations or gradients, and the tied table's gradient),
//!   the last stage one more (the loss);
//!   then three tokens generated through the stages, the same everywhere;
//! - `pipeline_fault` (np = 4): the last rank fails before the step; its
//!   pipeline peer, waiting for a gradient, gets a time-out naming the `pp`
//!   axis and the rank, its tensor-parallel peer one naming `tp`, and rank
//!   0 one naming `pp`: never a hang.

use wgpu_tp::comm;
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{AdamW, DataParallel, Params, Pipeline, PipelineStage, Sampling, StageDecoder};
use wgpu_tp::{Collective, CommStats, Error, Mesh, MeshBuilder};

const SEQ: usize = 5;
const ROWS: usize = 8;

fn axes(p: usize) -> &'static [(&'static str, usize)] {
    match p {
        8 => &[("pp", 2), ("dp", 2), ("tp", 2)],
        _ => &[("pp", 2), ("dp", 1), ("tp", 2)],
    }
}

/// FNV-1a over words.
fn digest(words: impl IntoIterator<Item = u32>, h: &mut u32) {
    for w in words {
        for b in w.to_le_bytes() {
            *h = (*h ^ b as u32).wrapping_mul(16_777_619);
        }
    }
}

fn digest_stats(s: &CommStats, h: &mut u32) {
    for (k, c) in s {
        digest([*k as u32, c.calls as u32, c.bytes as u32], h);
    }
}

fn stages(m: &Mesh, pipeline: &Pipeline) -> wgpu_tp::Result<(Vec<Mesh>, Vec<CausalLm>)> {
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    let groups = m.axis_groups("tp")?;
    let stages = groups
        .iter()
        .map(|g| CausalLm::stage(g, cfg.clone(), 7, pipeline, LoadOptions::default()))
        .collect::<wgpu_tp::Result<Vec<_>>>()?;
    Ok((groups, stages))
}

/// What [`train`] gives: per root rank this process drives, the digest of
/// its stage's run; the last stages' losses; each rank's pp sends per step.
type Trained = (Vec<(usize, u32)>, Vec<f32>, Vec<u64>);

/// Two steps of every stage this process drives.
fn train(m: &Mesh) -> wgpu_tp::Result<Trained> {
    let pipeline = Pipeline::new(m, "pp", 2)?;
    let dp = DataParallel::new(m, "dp")?;
    let (groups, mut stages) = stages(m, &pipeline)?;
    let axis = |name: &str| m.axes().iter().position(|a| a.0 == name).unwrap_or(0);
    let coords: Vec<Vec<usize>> = groups
        .iter()
        .map(|g| m.coords_of(g.root_rank(0)?))
        .collect::<wgpu_tp::Result<_>>()?;
    let ids: Vec<i32> = (0..ROWS * SEQ).map(|i| ((i * 7 + 3) % 11) as i32).collect();
    let targets: Vec<i32> = (0..ROWS * SEQ).map(|i| ((i * 5 + 1) % 11) as i32).collect();
    let mut opts: Vec<AdamW> = stages.iter().map(|_| AdamW::new(1e-2)).collect();
    // Every root rank this process drives, with its stage.
    let mine: Vec<(usize, usize)> = groups
        .iter()
        .enumerate()
        .flat_map(|(k, g)| (0..g.size()).filter_map(move |r| Some((g.root_rank(r).ok()?, k))))
        .filter(|(r, _)| m.local_position(*r).is_some())
        .collect();
    let mut hashes: Vec<u32> = vec![0x811c_9dc5; mine.len()];
    let (mut losses, mut sends) = (Vec::new(), Vec::new());
    for step in 0..2 {
        for a in ["pp", "dp", "tp"] {
            m.axis_groups(a)?.iter().for_each(Mesh::reset_comm_stats);
        }
        let spans: Vec<std::ops::Range<usize>> = coords
            .iter()
            .map(|c| {
                dp.batch_rows(ROWS, c[axis("dp")])
                    .map(|r| r.start * SEQ..r.end * SEQ)
            })
            .collect::<wgpu_tp::Result<_>>()?;
        let batches: Vec<(&[i32], &[i32])> = spans
            .iter()
            .map(|s| (&ids[s.clone()], &targets[s.clone()]))
            .collect();
        let mut refs: Vec<&mut dyn PipelineStage> = stages
            .iter_mut()
            .map(|s| s as &mut dyn PipelineStage)
            .collect();
        let got = pipeline.forward_backward(&mut refs, &batches, SEQ)?;
        losses.extend(&got);
        for p in 0..2 {
            let mut reps: Vec<&mut dyn Params> = stages
                .iter_mut()
                .zip(&coords)
                .filter(|(_, c)| c[axis("pp")] == p)
                .map(|(s, _)| s as &mut dyn Params)
                .collect();
            if !reps.is_empty() {
                dp.average_gradients(&mut reps)?;
            }
        }
        for (&(r, k), h) in mine.iter().zip(&mut hashes) {
            digest([got[k].to_bits()], h);
            if step == 0 {
                for (_, p) in stages[k].named_parameters() {
                    let g = p.master_grad()?.unwrap_or_default();
                    digest(g.iter().map(|x| x.to_bits()), h);
                }
            }
            for a in ["dp", "tp"] {
                digest_stats(&m.group_of(&[a], r)?.comm_stats(), h);
            }
            // A send counts where it is sent: over MPI on the sender's
            // process only, so each rank's pp group shows its own sends.
            sends.push(m.group_of(&["pp"], r)?.comm_calls(Collective::Send));
        }
        for (s, opt) in stages.iter_mut().zip(&mut opts) {
            opt.step(s)?;
            s.zero_grad();
        }
    }
    // Then three tokens generated through the stages.
    let refs: Vec<&dyn StageDecoder> = stages.iter().map(|s| s as &dyn StageDecoder).collect();
    let pick = Sampling::GreedyWithPenalty {
        repetition_penalty: 50.0,
    };
    let tokens = pipeline.generate(&refs, &ids[..3], 3, pick)?;
    for (&(_, k), h) in mine.iter().zip(&mut hashes) {
        for (_, p) in stages[k].named_parameters() {
            digest(p.master()?.iter().map(|x| x.to_bits()), h);
        }
        digest(tokens.iter().map(|&t| t as u32), h);
    }
    Ok((
        mine.iter().map(|x| x.0).zip(hashes).collect(),
        losses,
        sends,
    ))
}

pub fn run(mesh: &Mesh) -> Result<usize, String> {
    let e = |e: Error| e.to_string();
    let (me, p) = (mesh.process_index(), mesh.size());
    let m = mesh.with_axes(axes(p)).map_err(e)?;
    let (got, losses, sends) = train(&m).map_err(e)?;
    let [(_, mine)] = got[..] else {
        return Err(format!("one rank per process, got {got:?}"));
    };
    // Per step: 2 micro-batches' activations (or gradients), the tied
    // table's gradient, and from the last stage the loss.
    let want = if me < p / 2 { 3 } else { 4 };
    if sends != [want, want] {
        return Err(format!(
            "rank {me} sent {sends:?} messages per step, not {want}"
        ));
    }
    let t = mesh.ranks()[0]
        .upload_i32(&[1], &[mine as i32])
        .map_err(e)?;
    let all = comm::all_gather(mesh, &[t], 0).map_err(e)?;
    let all = all[0].to_vec_i32().map_err(e)?;
    if me == 0 {
        let single = MeshBuilder::new().axes(axes(p)).build().map_err(e)?;
        let (want, want_losses, _) = train(&single).map_err(e)?;
        for (r, h) in want {
            if all[r] as u32 != h {
                return Err(format!(
                    "axes {:?}: rank {r}'s loss, gradients, parameters or communication differ \
                     from the single-process mesh",
                    axes(p)
                ));
            }
        }
        println!(
            "pipeline {:?}: every rank bit-identical to one process; losses {want_losses:?}",
            axes(p)
        );
    } else if me == p - 1 {
        println!("pipeline {:?}: losses {losses:?}", axes(p));
    }
    Ok(me)
}

pub fn fault(mesh: &Mesh) -> Result<usize, String> {
    let (me, p) = (mesh.process_index(), mesh.size());
    let m = mesh
        .with_axes(&[("pp", 2), ("tp", p / 2)])
        .map_err(|e| e.to_string())?;
    let pipeline = Pipeline::new(&m, "pp", 2).map_err(|e| e.to_string())?;
    let (_, mut stages) = stages(&m, &pipeline).map_err(|e| e.to_string())?;
    if me == p - 1 {
        println!("FAILED on purpose rank {me}");
        return Err("failed on purpose".into());
    }
    let ids: Vec<i32> = (0..4 * SEQ).map(|i| (i % 11) as i32).collect();
    let mut refs: Vec<&mut dyn PipelineStage> = stages
        .iter_mut()
        .map(|s| s as &mut dyn PipelineStage)
        .collect();
    let err = match pipeline.forward_backward(&mut refs, &[(&ids, &ids)], SEQ) {
        Err(err @ Error::Timeout { .. }) => err.to_string(),
        other => return Err(format!("rank {me}: expected a time-out, got {other:?}")),
    };
    // Rank p/2 - 1 (stage 0) waits for the failed rank's gradient; rank
    // p - 2 (stage 1) for its all-reduce; rank 0 for rank p/2's gradient.
    let (axis, rank) = match me {
        0 => ("pp", p / 2),
        r if r == p / 2 - 1 => ("pp", p - 1),
        r if r == p - 2 => ("tp", p - 1),
        _ => return Ok(me),
    };
    match err.contains(&format!("\"{axis}\"")) && err.contains(&format!("[{rank}]")) {
        true => Ok(me),
        false => Err(format!(
            "rank {me}: the time-out does not name axis {axis} and rank {rank}: {err}"
        )),
    }
}

/// `pipeline_mismatch` (np = 2): rank 0 sends 8 values where rank 1
/// expects 4, then 4 where it expects 8. Both are `Error`s on rank 1 (the
/// first MPI's truncation, returned rather than aborting the job; the
/// second the message's own header), and a collective afterwards still works.
pub fn mismatch(mesh: &Mesh) -> Result<usize, String> {
    let e = |e: Error| e.to_string();
    let me = mesh.process_index();
    let m = mesh.with_axes(&[("pp", 2), ("tp", 1)]).map_err(e)?;
    let line = m.group_of(&["pp"], 0).map_err(e)?;
    let rank = &mesh.ranks()[0];
    if me == 0 {
        for n in [8, 4] {
            let t = rank.upload(&[n], &vec![1.0; n]).map_err(e)?;
            comm::send(&line, 0, 1, comm::Channel::Activation, &t).map_err(e)?;
        }
        comm::wait_sends(&line).map_err(e)?;
    } else {
        for (n, what) in [(4, "larger"), (8, "smaller")] {
            match comm::recv(
                &line,
                0,
                1,
                comm::Channel::Activation,
                &[n],
                wgpu_tp::DType::F32,
            ) {
                Err(err) => println!("rank 1: a {what} message than expected: {err}"),
                Ok(_) => return Err(format!("a {what} message was received as {n} values")),
            }
        }
    }
    let t = rank.upload(&[2], &[1.0, 2.0]).map_err(e)?;
    let sum = comm::all_reduce(mesh, &[t], wgpu_tp::ReduceOp::Sum).map_err(e)?;
    match sum[0].to_vec().map_err(e)? == [2.0, 4.0] {
        true => Ok(me),
        false => Err("the collective after the errors is wrong".into()),
    }
}

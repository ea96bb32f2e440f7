//! The `axes` scenarios: a mesh of MPI processes with named axes.
//! - `axes`: at np = 4 (dp 2 × tp 2) and np = 8 (pp 2 × dp 2 × tp 2), each
//!   process trains its GPT replica on its tensor-parallel sub-mesh and its
//!   slice of the batch, gradients averaged over `dp` (`DataParallel`), two
//!   AdamW steps: loss, gradients and parameters bit-identical to the same
//!   replica on a single-process mesh of the same axes (built on rank 0),
//!   with the same communication per axis;
//! - `axes_fault`: the last rank fails before a tensor-parallel collective;
//!   its group's other rank gets a time-out naming the axis and the rank,
//!   and the other group is not held up.

use wgpu_tp::comm;
use wgpu_tp::models::{CausalLm, Gpt2Config};
use wgpu_tp::nn::{AdamW, DataParallel, Params};
use wgpu_tp::{CommStats, Error, Mesh, MeshBuilder, ReduceOp};

/// Loss bits per step, then (name, bits) of the averaged gradients of the
/// first step and of the parameters after the last.
type Run = (Vec<u32>, Vec<(String, Vec<u32>)>, Vec<(String, Vec<u32>)>);

const SEQ: usize = 5;

fn axes(p: usize) -> &'static [(&'static str, usize)] {
    match p {
        8 => &[("pp", 2), ("dp", 2), ("tp", 2)],
        _ => &[("dp", 2), ("tp", 2)],
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Two steps of every replica this process drives (one per tp group), the
/// gradients averaged over `dp`; the run of the replica at `keep`'s rank.
fn train(m: &Mesh, keep: usize) -> wgpu_tp::Result<(Run, CommStats, CommStats)> {
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    let groups = m.axis_groups("tp")?;
    let mut reps = groups
        .iter()
        .map(|g| CausalLm::new(g, cfg.clone(), 7))
        .collect::<wgpu_tp::Result<Vec<_>>>()?;
    let dp = DataParallel::new(m, "dp")?;
    let mut opts: Vec<AdamW> = reps.iter().map(|_| AdamW::new(1e-2)).collect();
    let ids: Vec<i32> = (0..4 * SEQ).map(|i| ((i * 7 + 3) % 11) as i32).collect();
    let targets: Vec<i32> = (0..4 * SEQ).map(|i| ((i * 5 + 1) % 11) as i32).collect();
    let at = groups
        .iter()
        .position(|g| (0..g.size()).any(|r| g.root_rank(r).ok() == Some(keep)))
        .unwrap_or(0);
    let dp_index = m.coords_of(keep)?[m.axes().iter().position(|a| a.0 == "dp").unwrap_or(0)];
    let dp_group = m.group_of(&["dp"], keep)?;
    let (mut run, mut tp_stats, mut dp_stats) =
        (Run::default(), CommStats::new(), CommStats::new());
    for step in 0..2 {
        groups[at].reset_comm_stats();
        dp_group.reset_comm_stats();
        for (g, gpt) in groups.iter().zip(&reps) {
            let d = m.coords_of(g.root_rank(0)?)?;
            let d = d[m.axes().iter().position(|a| a.0 == "dp").unwrap_or(0)];
            let rows = dp.batch_rows(4, d)?;
            let span = rows.start * SEQ..rows.end * SEQ;
            let loss = gpt.loss(&ids[span.clone()], &targets[span], SEQ)?;
            if d == dp_index && std::ptr::eq(g, &groups[at]) {
                run.0.extend(bits(&loss.to_host()?));
            } else {
                loss.to_host()?;
            }
            loss.backward()?;
        }
        let mut refs: Vec<&mut dyn Params> =
            reps.iter_mut().map(|r| r as &mut dyn Params).collect();
        dp.average_gradients(&mut refs)?;
        if step == 0 {
            for (n, p) in reps[at].named_parameters() {
                run.1.push((n, bits(&p.master_grad()?.unwrap_or_default())));
            }
        }
        for (gpt, opt) in reps.iter_mut().zip(&mut opts) {
            opt.step(gpt)?;
            gpt.zero_grad();
        }
        (tp_stats, dp_stats) = (groups[at].comm_stats(), dp_group.comm_stats());
    }
    for (n, p) in reps[at].named_parameters() {
        run.2.push((n, bits(&p.master()?)));
    }
    Ok((run, tp_stats, dp_stats))
}

pub fn run(mesh: &Mesh) -> Result<usize, String> {
    let e = |e: Error| e.to_string();
    let (me, p) = (mesh.process_index(), mesh.size());
    let m = mesh.with_axes(axes(p)).map_err(e)?;
    let info = m.parallel_group_info(me).map_err(e)?;
    let coords = m.coords().map_err(e)?;
    if info.iter().map(|g| g.index).collect::<Vec<_>>() != coords {
        return Err(format!("coords {coords:?} disagree with {info:?}"));
    }
    let got = train(&m, me).map_err(e)?;
    if me == 0 {
        let single = MeshBuilder::new().axes(axes(p)).build().map_err(e)?;
        let want = train(&single, 0).map_err(e)?;
        if got.0 != want.0 {
            return Err(format!(
                "axes {:?}: loss, gradients or parameters differ from the single-process mesh",
                axes(p)
            ));
        }
        if (&got.1, &got.2) != (&want.1, &want.2) {
            return Err(format!(
                "axes {:?}: per-axis communication differs: tp {:?} / dp {:?} vs {:?} / {:?}",
                axes(p),
                got.1,
                got.2,
                want.1,
                want.2
            ));
        }
        println!(
            "axes {:?}: loss {:?}, {} gradients and parameters bit-identical; {}",
            axes(p),
            got.0
                .0
                .iter()
                .map(|b| f32::from_bits(*b))
                .collect::<Vec<_>>(),
            got.0.1.len(),
            info.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(me)
}

pub fn fault(mesh: &Mesh) -> Result<usize, String> {
    let (me, p) = (mesh.process_index(), mesh.size());
    let m = mesh
        .with_axes(&[("dp", p / 2), ("tp", 2)])
        .map_err(|e| e.to_string())?;
    let tp = m.axis("tp").map_err(|e| e.to_string())?;
    let t = tp.ranks()[0]
        .upload(&[4], &[1.0; 4])
        .map_err(|e| e.to_string())?;
    comm::all_reduce(&tp, std::slice::from_ref(&t), ReduceOp::Sum).map_err(|e| e.to_string())?;
    if me == p - 1 {
        println!("FAILED on purpose rank {me}");
        return Err("failed on purpose".into());
    }
    match comm::all_reduce(&tp, &[t], ReduceOp::Sum) {
        Ok(_) if me < p - 2 => Ok(me),
        Err(err @ Error::Timeout { .. }) if me == p - 2 => {
            let msg = err.to_string();
            let names = msg.contains("\"tp\"") && msg.contains(&format!("[{}]", p - 1));
            match names {
                true => Ok(me),
                false => Err(format!(
                    "the time-out does not name the axis and rank: {msg}"
                )),
            }
        }
        other => Err(format!("rank {me}: unexpected {other:?}")),
    }
}

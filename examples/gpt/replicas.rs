//! Parallelism beyond tensor parallelism in the GPT example: `--axes
//! pp=S,dp=D,tp=T` splits the model into S pipeline stages (each a
//! `CausalLm::stage` on its own T tensor-parallel ranks, S micro-batches a
//! step, 1F1B) and makes D data-parallel replicas of that, each on its own slice
//! of the batch, gradients averaged over `dp`; `--zero` shards AdamW over
//! `dp` (ZeRO-1). Without `pp` every stage is the whole model.

use std::collections::BTreeMap;

use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{AdamW, DataParallel, Params, Pipeline, PipelineStage, ZeroAdamW};
use wgpu_tp::{DTensor, Mesh, Placement};

use super::Args;

/// The sizes of `pp`, `dp` and `tp`.
pub type Axes = (usize, usize, usize);

/// `pp=S,dp=D,tp=T` (any order, any subset; a missing axis has size 1).
pub fn parse_axes(s: &str) -> Result<Axes, String> {
    let (mut pp, mut dp, mut tp) = (1, 1, 1);
    for part in s.split(',') {
        let (name, n) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: give axes as pp=S,dp=D,tp=T"))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("{part:?}: the size must be a whole number"))?;
        match (name.trim(), n) {
            (_, 0) => return Err(format!("{part:?}: an axis needs at least one rank")),
            ("pp", n) => pp = n,
            ("dp", n) => dp = n,
            ("tp", n) => tp = n,
            (other, _) => {
                return Err(format!(
                    "unknown axis {other:?}: this example has pp, dp and tp"
                ));
            }
        }
    }
    Ok((pp, dp, tp))
}

/// The mesh's axes: `--axes`, else `tp` = `--ranks`.
pub fn axes(args: &Args) -> [(&'static str, usize); 3] {
    let (pp, dp, tp) = args.axes.unwrap_or((1, 1, args.ranks));
    [("pp", pp), ("dp", dp), ("tp", tp)]
}

/// The pipeline along `pp`: as many micro-batches as stages.
pub fn pipeline(mesh: &Mesh) -> wgpu_tp::Result<Pipeline> {
    let pp = mesh.axis_size("pp")?;
    Pipeline::new(mesh, "pp", pp)
}

/// One stage per tensor-parallel group this process drives (every stage of
/// every replica in one process, its own with --mpi), initialised alike.
/// Without `pp` each is the whole model, which may compute in f16
/// (`--f16`); pipeline stages pass f32 activations.
pub fn build_replicas(
    mesh: &Mesh,
    pipeline: &Pipeline,
    (cfg, opts): (&Gpt2Config, LoadOptions),
    seed: u64,
) -> wgpu_tp::Result<Vec<CausalLm>> {
    mesh.axis_groups("tp")?
        .iter()
        .map(|g| match pipeline.stages() {
            1 => CausalLm::new_with(g, cfg.clone(), seed, opts),
            _ => CausalLm::stage(g, cfg.clone(), seed, pipeline, opts),
        })
        .collect()
}

/// A stage's data-parallel index.
fn dp_index(stage: &CausalLm) -> wgpu_tp::Result<usize> {
    let g = stage.stage_mesh();
    let root = g.root();
    let at = root.axes().iter().position(|a| a.0 == "dp").unwrap_or(0);
    Ok(root.coords_of(g.root_rank(0)?)?[at])
}

/// Forward and backward of every stage on its replica's slice of the batch
/// (1F1B over micro-batches), the gradients averaged over `dp` per stage;
/// returns the mean loss over the batch.
pub fn dp_step(
    stages: &mut [CausalLm],
    (pipeline, dp): (&Pipeline, &DataParallel),
    (ids, targets): (&[i32], &[i32]),
    seq: usize,
) -> wgpu_tp::Result<f32> {
    let rows = ids.len() / seq;
    let spans = stages
        .iter()
        .map(|s| {
            let r = dp.batch_rows(rows, dp_index(s)?)?;
            Ok(r.start * seq..r.end * seq)
        })
        .collect::<wgpu_tp::Result<Vec<_>>>()?;
    let batches: Vec<(&[i32], &[i32])> = spans
        .iter()
        .map(|s| (&ids[s.clone()], &targets[s.clone()]))
        .collect();
    let mut refs: Vec<&mut dyn PipelineStage> = stages
        .iter_mut()
        .map(|s| s as &mut dyn PipelineStage)
        .collect();
    let losses = pipeline.forward_backward(&mut refs, &batches, seq)?;
    for_each_stage(stages, |reps| dp.average_gradients(reps))?;
    // The mean over the replicas: one value per stage, on its group.
    let values = stages
        .iter()
        .zip(&losses)
        .map(|(s, &l)| DTensor::from_host(s.stage_mesh(), &[1], &[l], Placement::Replicate))
        .collect::<wgpu_tp::Result<Vec<_>>>()?;
    dp.mean(&values)
}

/// Call `f` with the replicas of each pipeline stage this process drives.
fn for_each_stage(
    stages: &mut [CausalLm],
    mut f: impl FnMut(&mut [&mut dyn Params]) -> wgpu_tp::Result<()>,
) -> wgpu_tp::Result<()> {
    let mut by_stage: BTreeMap<usize, Vec<&mut dyn Params>> = BTreeMap::new();
    for s in stages.iter_mut() {
        let k = s.stage_index().0;
        by_stage.entry(k).or_default().push(s);
    }
    by_stage.values_mut().try_for_each(|reps| f(reps))
}

/// AdamW per stage, or sharded over `dp` with `--zero` (one per stage).
pub enum Optimiser {
    Plain(Vec<AdamW>),
    Zero(Vec<ZeroAdamW>),
}

impl Optimiser {
    pub fn new(args: &Args, dp: &DataParallel, stages: usize) -> Optimiser {
        match args.zero {
            true => Optimiser::Zero((0..stages).map(|_| ZeroAdamW::new(dp, args.lr)).collect()),
            false => Optimiser::Plain((0..stages).map(|_| AdamW::new(args.lr)).collect()),
        }
    }

    /// One update of every stage, then zero their gradients.
    pub fn step(&mut self, stages: &mut [CausalLm]) -> wgpu_tp::Result<()> {
        match self {
            Optimiser::Plain(opts) => {
                for (s, opt) in stages.iter_mut().zip(opts) {
                    opt.step(s)?;
                }
            }
            Optimiser::Zero(zs) => {
                let mut next = zs.iter_mut();
                for_each_stage(stages, |reps| match next.next() {
                    Some(z) => z.step(reps),
                    None => Ok(()),
                })?;
            }
        }
        stages.iter_mut().for_each(|s| s.zero_grad());
        Ok(())
    }
}

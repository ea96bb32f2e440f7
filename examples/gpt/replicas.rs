//! Data parallelism in the GPT example: `--axes dp=D,tp=T` makes D replicas
//! of the model, each on its own T tensor-parallel ranks and its own slice
//! of the batch, their gradients averaged over `dp`; `--zero` shards AdamW
//! over `dp` (ZeRO-1).

use wgpu_tp::Mesh;
use wgpu_tp::models::{Gpt, GptConfig};
use wgpu_tp::nn::{AdamW, DataParallel, Params, ZeroAdamW};

use super::Args;

/// `dp=D,tp=T` (either order; a missing axis has size 1).
pub fn parse_axes(s: &str) -> Result<(usize, usize), String> {
    let (mut dp, mut tp) = (1, 1);
    for part in s.split(',') {
        let (name, n) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: give axes as dp=D,tp=T"))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("{part:?}: the size must be a whole number"))?;
        match (name.trim(), n) {
            (_, 0) => return Err(format!("{part:?}: an axis needs at least one rank")),
            ("dp", n) => dp = n,
            ("tp", n) => tp = n,
            (other, _) => {
                return Err(format!(
                    "unknown axis {other:?}: this example has dp and tp"
                ));
            }
        }
    }
    Ok((dp, tp))
}

/// The mesh's axes: `--axes`, else `tp` = `--ranks`.
pub fn axes(args: &Args) -> [(&'static str, usize); 2] {
    let (dp, tp) = args.axes.unwrap_or((1, args.ranks));
    [("dp", dp), ("tp", tp)]
}

/// One model per tensor-parallel group this process drives (all D in one
/// process, its own with --mpi), initialised alike.
pub fn build_replicas(mesh: &Mesh, cfg: GptConfig, seed: u64) -> wgpu_tp::Result<Vec<Gpt>> {
    mesh.axis_groups("tp")?
        .iter()
        .map(|g| Gpt::new(g, cfg, seed))
        .collect()
}

/// Forward and backward of every replica on its slice of the batch, the
/// gradients averaged over `dp`; returns the mean loss over the batch.
pub fn dp_step(
    replicas: &mut [Gpt],
    dp: &DataParallel,
    (ids, targets): (&[i32], &[i32]),
    seq: usize,
) -> wgpu_tp::Result<f32> {
    let rows = ids.len() / seq;
    let mut losses = Vec::with_capacity(replicas.len());
    for gpt in replicas.iter() {
        let tp = gpt.named_parameters()[0].1.value.mesh().clone();
        let d = tp.root().coords_of(tp.root_rank(0)?)?[0];
        let r = dp.batch_rows(rows, d)?;
        let span = r.start * seq..r.end * seq;
        let loss = gpt.loss(&ids[span.clone()], &targets[span], seq)?;
        loss.backward()?;
        losses.push(loss);
    }
    let mut refs: Vec<&mut dyn Params> =
        replicas.iter_mut().map(|r| r as &mut dyn Params).collect();
    dp.average_gradients(&mut refs)?;
    dp.mean(&losses)
}

/// AdamW per replica, or sharded over `dp` with `--zero`.
pub enum Optimiser {
    Plain(Vec<AdamW>),
    Zero(ZeroAdamW),
}

impl Optimiser {
    pub fn new(args: &Args, dp: &DataParallel, replicas: usize) -> Optimiser {
        match args.zero {
            true => Optimiser::Zero(ZeroAdamW::new(dp, args.lr)),
            false => Optimiser::Plain((0..replicas).map(|_| AdamW::new(args.lr)).collect()),
        }
    }

    /// One update of every replica, then zero their gradients.
    pub fn step(&mut self, replicas: &mut [Gpt]) -> wgpu_tp::Result<()> {
        match self {
            Optimiser::Plain(opts) => {
                for (gpt, opt) in replicas.iter_mut().zip(opts) {
                    opt.step(gpt)?;
                }
            }
            Optimiser::Zero(z) => {
                let mut refs: Vec<&mut dyn Params> =
                    replicas.iter_mut().map(|r| r as &mut dyn Params).collect();
                z.step(&mut refs)?;
            }
        }
        replicas.iter_mut().for_each(|r| r.zero_grad());
        Ok(())
    }
}

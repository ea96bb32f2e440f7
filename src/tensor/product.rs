//! The unrecorded shard-by-shard product behind [`DTensor::matmul`] and
//! [`DTensor::linear`] (placements and shapes checked by `matmul_plan.rs`), and
//! [`DTensor::linears`]: several layers of one input (attention's q, k and
//! v) in shared small-M dispatches where nothing is recorded: decoding
//! paid a CPU adapter's fixed cost per dispatch for each product, however
//! few its columns.

use super::autograd::tracking;
use super::dtensor::DTensor;
use super::elementwise::expect_placed_not_partial;
use super::grouped;
use super::matmul_plan::{MatmulOptions, Plan, plan};
use super::paired;
use super::placement::Placement;
use super::tied_head;
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::Result;
use crate::kernels::gemv::group::{Operands, fits, gemv_group};
use crate::kernels::{Activation, GemmOptions};

/// The bias in f32, as the kernels read it.
fn bias32(bias: Option<&DTensor>) -> Result<Option<DTensor>> {
    bias.map(|b| b.cast(DType::F32)).transpose()
}

/// `act(x·w (+ bias)) (⊙ up)` (or `x·wᵀ`), in the kernel, unrecorded.
pub(super) fn product(
    x: &DTensor,
    w: &DTensor,
    bias: Option<&DTensor>,
    opts: MatmulOptions,
    (activation, up): (Option<Activation>, Option<&DTensor>),
) -> Result<DTensor> {
    let Plan {
        t,
        n,
        placement,
        unit,
    } = plan(x, w, bias, opts, up)?;
    if activation.is_some() {
        // An activation of partial sums is not one of their sum.
        expect_placed_not_partial("DTensor::linear_activation", placement)?;
    }
    let b32 = bias32(bias)?;
    let out_dtype = opts.out_dtype.unwrap_or(x.dtype());
    // Ranks on one device: a dispatch for every four of them.
    let grouped = if opts.transpose_w && out_dtype == DType::F32 {
        grouped::shards(x, w, (b32.as_ref(), up), activation)?
    } else {
        None
    };
    if let Some(shards) = grouped {
        return Ok(x.with_shards_in_units(shards, vec![t, n], placement, unit));
    }
    let shards = (0..x.shards().len())
        .map(|r| {
            // Block by block where w or y is past one binding (a tied head).
            tied_head::product(
                &x.shards()[r],
                &w.shards()[r],
                GemmOptions {
                    trans_b: opts.transpose_w,
                    out_dtype: Some(out_dtype),
                    bias: b32.as_ref().map(|b| &b.shards()[r]),
                    activation,
                    multiply: up.map(|u| &u.shards()[r]),
                    ..Default::default()
                },
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(x.with_shards_in_units(shards, vec![t, n], placement, unit))
}

impl DTensor {
    /// `self·wᵀ (+ bias)` for each `(w, bias)` of `layers`: several layers
    /// of one input, such as attention's q, k and v projections. Each
    /// result is [`DTensor::linear`]'s, with the same bits; every layer is
    /// checked before anything is recorded. Where nothing is recorded
    /// (decoding under [`no_grad`](crate::no_grad)), `self` is f32 and the
    /// small-M kernel's grouped form takes the products (on a CPU adapter
    /// that binds 16 storage buffers, at most 8 rows, all with a bias or
    /// none), they share dispatches, four a dispatch: every layer's and
    /// rank's where the ranks share a device, else each rank's layers. On
    /// one device that binds 20, adjacent layers whose weights share a
    /// shape and have no biases are read in one pass, a pair a rank, where
    /// that takes fewer dispatches (`paired.rs`).
    /// Otherwise (a GPU, the tape) each layer is [`DTensor::linear`].
    pub fn linears(&self, layers: &[(&DTensor, Option<&DTensor>)]) -> Result<Vec<DTensor>> {
        self.linears_with(layers, &[])
    }

    /// [`DTensor::linears`], where `sources[l]`, when given, says which
    /// rank's product of layer `l` each rank's repeats (`sources[l][r] ≤ r`;
    /// a held key/value projection's copies of one replicated input): on
    /// one device each such product is made once and aliased onto the
    /// ranks that repeat it.
    pub(crate) fn linears_with(
        &self,
        layers: &[(&DTensor, Option<&DTensor>)],
        sources: &[Option<&[usize]>],
    ) -> Result<Vec<DTensor>> {
        let one_by_one = || {
            layers
                .iter()
                .map(|&(w, b)| self.linear(w, b, MatmulOptions::default()))
                .collect()
        };
        let mut inputs = vec![self];
        for (w, b) in layers {
            inputs.push(w);
            inputs.extend(b);
        }
        // Every layer's checks first: a refused call records nothing.
        let opts = MatmulOptions {
            transpose_w: true,
            out_dtype: None,
        };
        let plans = layers
            .iter()
            .map(|&(w, b)| plan(self, w, b, opts, None))
            .collect::<Result<Vec<_>>>()?;
        if layers.len() < 2 || self.dtype() != DType::F32 || tracking(&inputs) {
            return one_by_one();
        }
        // Cast once checked and unrecorded (nothing tracks them here).
        let b32s = (layers.iter())
            .map(|&(_, b)| bias32(b))
            .collect::<Result<Vec<_>>>()?;
        let ranks = self.shards().len();
        // Layer by layer, rank by rank.
        let operands: Vec<Operands> = layers
            .iter()
            .zip(&b32s)
            .flat_map(|(&(w, _), b32)| {
                (0..ranks).map(move |r| Operands {
                    a: &self.shards()[r],
                    b: &w.shards()[r],
                    bias: b32.as_ref().map(|b| &b.shards()[r]),
                    mul: None,
                })
            })
            .collect();
        // All products together where every shard is on one device, else
        // each rank's layers together.
        let pick = |idx: &[usize]| idx.iter().map(|&i| operands[i]).collect::<Vec<_>>();
        let all: Vec<usize> = (0..operands.len()).collect();
        let sets: Vec<Vec<usize>> = if fits(&operands) {
            vec![all]
        } else {
            let per_rank: Vec<Vec<usize>> = (0..ranks)
                .map(|r| (0..layers.len()).map(|l| l * ranks + r).collect())
                .collect();
            if ranks < 2 || !per_rank.iter().all(|set| fits(&pick(set))) {
                return one_by_one();
            }
            per_rank
        };
        const OP: &str = "DTensor::linears";
        let shared = sets.len() == 1 && self.placement() == Placement::Replicate;
        // The operand each one repeats (itself where it repeats none).
        let source: Vec<usize> = (0..operands.len())
            .map(|i| {
                let (l, r) = (i / ranks, i % ranks);
                match sources.get(l).copied().flatten() {
                    Some(src)
                        if shared && src.len() == ranks && src[r] < r && src[src[r]] == src[r] =>
                    {
                        l * ranks + src[r]
                    }
                    _ => i,
                }
            })
            .collect();
        let kept: Vec<usize> = (0..operands.len()).filter(|&i| source[i] == i).collect();
        let mut at = vec![usize::MAX; operands.len()];
        let mut made = Vec::with_capacity(kept.len());
        for &i in &kept {
            let o = &operands[i];
            at[i] = made.len();
            made.push((o.a.rank()).alloc(OP, &[o.a.shape()[0], o.b.shape()[0]], DType::F32)?);
        }
        let outs_of = |idx: &[usize]| idx.iter().map(|&i| &made[at[i]]).collect::<Vec<_>>();
        if sets.len() == 1 {
            // Adjacent layers whose weights share a shape read in one pass,
            // a pair a rank, where that takes fewer dispatches.
            match paired::adjacent(&operands, &kept, (layers.len(), ranks)) {
                Some(p) => {
                    if !p.singles.is_empty() {
                        gemv_group(&pick(&p.singles), &outs_of(&p.singles), None)?;
                    }
                    paired::both(&p.pairs, &outs_of(&p.firsts), &outs_of(&p.seconds))?;
                }
                None => gemv_group(&pick(&kept), &outs_of(&kept), None)?,
            }
        } else {
            for set in &sets {
                gemv_group(&pick(set), &outs_of(set), None)?;
            }
        }
        let outs = (0..operands.len())
            .map(|i| match source[i] == i {
                true => Ok(made[at[i]].clone()),
                false => made[at[source[i]]].alias_on(&operands[i].a.rank()),
            })
            .collect::<Result<Vec<LocalTensor>>>()?;
        let mut outs = outs.into_iter();
        Ok(plans
            .into_iter()
            .map(|pl| {
                let shards: Vec<LocalTensor> = outs.by_ref().take(ranks).collect();
                self.with_shards_in_units(shards, vec![pl.t, pl.n], pl.placement, pl.unit)
            })
            .collect())
    }
}

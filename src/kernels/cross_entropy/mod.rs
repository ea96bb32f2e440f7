//! Vocab-parallel softmax cross-entropy, one rank's pieces
//! (`shaders/cross_entropy.wgsl`).
//!
//! A rank holds logits `z` `[T, Vr]` for global vocab columns
//! `[start, start + Vr)` ([`VocabShard`]); columns with global index
//! `≥ valid_vocab` are padding and count as −∞ (no part in any sum, zero
//! gradient). Per row, with `m` the global max, `S = Σ_j exp(z_j − m)` and
//! `K = valid_vocab`:
//!
//! `loss = (1 − α)(ln S + m − z_t) + α(ln S + m − Σ_j z_j / K)`,
//! `dz_j = s · (exp(z_j − m)/S − (1 − α)·[j = t] − α/K)`,
//!
//! with `s` the incoming per-row loss gradient. A layer computes [`row_max`]
//! → all-reduce-max → [`row_sum_exp`], [`target_logit`] (and [`row_sum`]
//! when α > 0) → all-reduce-sum → [`ce_loss`]; [`ce_grad`] needs no
//! communication. [`cross_entropy`] runs the chain on one rank.
//!
//! Targets outside the global vocab (other than `ignore_index`) are the
//! layer's check; these kernels treat them as not owned. Logits stored in
//! token-row blocks (past one binding) run block by block.
//!
//! What a call asks for ([`VocabShard`], [`CrossEntropyOptions`]) and the
//! uniform checked from it are in `options.rs`; the operand checks and the
//! recording every entry shares in `launch.rs`; the gradient in `grad.rs`.

mod grad;
mod launch;
mod options;

pub use self::grad::ce_grad;
pub use self::options::{CrossEntropyOptions, VocabShard};

use self::launch::{ROW_WORKGROUP, logits_shape, row_operand, run};
use self::options::Params;
use super::norm::RowsReduce;
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};

/// How the row reductions sum on `z`'s device: a workgroup per row on
/// GPUs, where an invocation per row leaves most of the GPU idle and reads
/// uncoalesced (21 ms per reduction of a GPT-2 step's logits on an H100);
/// an invocation per row on CPU adapters (no barriers there).
fn reduce_for(z: &LocalTensor) -> RowsReduce {
    if z.device().is_gpu() {
        RowsReduce::Tree
    } else {
        RowsReduce::Serial
    }
}

/// Record a row reduction (`entry` or its `_tree` form) into `[T]`.
fn row_reduce(
    entry: [&'static str; 2],
    op: &'static str,
    p: &Params,
    ins: [Option<&LocalTensor>; 6],
    t: usize,
    reduce: RowsReduce,
) -> Result<LocalTensor> {
    match reduce {
        RowsReduce::Serial => run(entry[0], op, p, ins, &[t], t as u64, ROW_WORKGROUP),
        RowsReduce::Tree => {
            let wg = u64::from(ins[0].map_or(64, |z| z.device().grid_workgroup()));
            run(entry[1], op, p, ins, &[t], t as u64 * wg, wg)
        }
    }
}

/// `[T]`: the max of each row over this shard's valid columns; a row with no
/// valid column gives −3.4e38 (finite, so `z − m` downstream stays finite).
pub fn row_max(z: &LocalTensor, shard: VocabShard) -> Result<LocalTensor> {
    row_max_with(z, shard, reduce_for(z))
}

/// [`row_max`] with the reduction forced (for tests; the max is exact, so
/// both give the same bits).
pub fn row_max_with(z: &LocalTensor, shard: VocabShard, reduce: RowsReduce) -> Result<LocalTensor> {
    const OP: &str = "row_max";
    let (t, v) = logits_shape(OP, z)?;
    let p = Params::new(OP, t, v, shard, &CrossEntropyOptions::default())?;
    let ins = [Some(z), None, None, None, None, None];
    row_reduce(["max_rows", "max_rows_tree"], OP, &p, ins, t, reduce)
}

/// `[T]`: `Σ_j exp(z_j − max)` over this shard's valid columns, where `max`
/// (`[T]`) is the global row max (after the all-reduce).
pub fn row_sum_exp(z: &LocalTensor, max: &LocalTensor, shard: VocabShard) -> Result<LocalTensor> {
    row_sum_exp_with(z, max, shard, reduce_for(z))
}

/// [`row_sum_exp`] with the reduction forced (for tests): the tree sums in
/// another order than the serial loop, so other bits within f32 rounding.
pub fn row_sum_exp_with(
    z: &LocalTensor,
    max: &LocalTensor,
    shard: VocabShard,
    reduce: RowsReduce,
) -> Result<LocalTensor> {
    const OP: &str = "row_sum_exp";
    let (t, v) = logits_shape(OP, z)?;
    row_operand(OP, z, max, t, DType::F32)?;
    let p = Params::new(OP, t, v, shard, &CrossEntropyOptions::default())?;
    let ins = [Some(z), Some(max), None, None, None, None];
    row_reduce(
        ["sum_exp_rows", "sum_exp_rows_tree"],
        OP,
        &p,
        ins,
        t,
        reduce,
    )
}

/// `[T]`: `z[t − start]` where this shard owns target `t` (I32 `[T]`;
/// `start ≤ t < start + Vr` and `t < valid_vocab`), else 0.
pub fn target_logit(
    z: &LocalTensor,
    targets: &LocalTensor,
    shard: VocabShard,
) -> Result<LocalTensor> {
    const OP: &str = "target_logit";
    let (t, v) = logits_shape(OP, z)?;
    row_operand(OP, z, targets, t, DType::I32)?;
    let p = Params::new(OP, t, v, shard, &CrossEntropyOptions::default())?;
    let ins = [Some(z), None, None, None, None, Some(targets)];
    run("target_logit", OP, &p, ins, &[t], t as u64, ROW_WORKGROUP)
}

/// `[T]`: `Σ_j z_j` over this shard's valid columns (for label smoothing).
pub fn row_sum(z: &LocalTensor, shard: VocabShard) -> Result<LocalTensor> {
    row_sum_with(z, shard, reduce_for(z))
}

/// [`row_sum`] with the reduction forced (for tests; as [`row_sum_exp_with`]).
pub fn row_sum_with(z: &LocalTensor, shard: VocabShard, reduce: RowsReduce) -> Result<LocalTensor> {
    const OP: &str = "row_sum";
    let (t, v) = logits_shape(OP, z)?;
    let p = Params::new(OP, t, v, shard, &CrossEntropyOptions::default())?;
    let ins = [Some(z), None, None, None, None, None];
    row_reduce(["sum_rows", "sum_rows_tree"], OP, &p, ins, t, reduce)
}

/// `[T]` per-row loss from the globally reduced pieces (all `[T]` F32 on one
/// rank): `ln S + m − z_t`, or with label smoothing α over
/// `num_classes` = K (the global `valid_vocab`)
/// `(1 − α)(ln S + m − z_t) + α(ln S + m − Σz/K)`; `sum_logits` is required
/// when α > 0 and ignored otherwise. Rows whose target is `ignore_index` get 0.
pub fn ce_loss(
    max: &LocalTensor,
    sum_exp: &LocalTensor,
    target_logit: &LocalTensor,
    sum_logits: Option<&LocalTensor>,
    targets: &LocalTensor,
    num_classes: usize,
    opts: &CrossEntropyOptions,
) -> Result<LocalTensor> {
    const OP: &str = "ce_loss";
    let t = max.len();
    row_operand(OP, max, max, t, DType::F32)?;
    row_operand(OP, max, sum_exp, t, DType::F32)?;
    row_operand(OP, max, target_logit, t, DType::F32)?;
    row_operand(OP, max, targets, t, DType::I32)?;
    let shard = VocabShard {
        start: 0,
        valid_vocab: num_classes,
    };
    let p = Params::new(OP, t, 0, shard, opts)?;
    let sum_logits = if p.alpha > 0.0 {
        let s = sum_logits
            .ok_or_else(|| Error::invalid(OP, "label smoothing needs sum_logits (see row_sum)"))?;
        row_operand(OP, max, s, t, DType::F32)?;
        Some(s)
    } else {
        None
    };
    let ins = [
        None,
        Some(max),
        Some(sum_exp),
        Some(target_logit),
        sum_logits,
        Some(targets),
    ];
    run("loss", OP, &p, ins, &[t], t as u64, ROW_WORKGROUP)
}

/// What [`cross_entropy`] returns: the per-row loss and the row statistics its
/// gradient ([`cross_entropy_backward`]) reuses.
#[derive(Clone, Debug)]
pub struct CrossEntropy {
    /// `[T]` per-row loss (0 for ignored rows).
    pub loss: LocalTensor,
    /// `[T]` row max of the logits.
    pub max: LocalTensor,
    /// `[T]` `Σ_j exp(z_j − max)`.
    pub sum_exp: LocalTensor,
}

/// Softmax cross-entropy of logits `z` `[T, V]` (the whole, unpadded vocab on
/// one rank) against I32 targets `[T]`: the per-row loss plus saved row
/// statistics. Same maths as the vocab-parallel pieces with one shard.
pub fn cross_entropy(
    z: &LocalTensor,
    targets: &LocalTensor,
    opts: &CrossEntropyOptions,
) -> Result<CrossEntropy> {
    let (_, v) = logits_shape("cross_entropy", z)?;
    let shard = VocabShard::full(v);
    let max = row_max(z, shard)?;
    let sum_exp = row_sum_exp(z, &max, shard)?;
    let tl = target_logit(z, targets, shard)?;
    let zsum = if opts.label_smoothing > 0.0 {
        Some(row_sum(z, shard)?)
    } else {
        None
    };
    let loss = ce_loss(&max, &sum_exp, &tl, zsum.as_ref(), targets, v, opts)?;
    Ok(CrossEntropy { loss, max, sum_exp })
}

/// Gradient of [`cross_entropy`] w.r.t. `z` (`[T, V]`) for the incoming
/// per-row loss gradient `row_scale` (`[T]`); `saved` is the forward's result
/// and `opts` must match it.
pub fn cross_entropy_backward(
    z: &LocalTensor,
    targets: &LocalTensor,
    saved: &CrossEntropy,
    row_scale: &LocalTensor,
    opts: &CrossEntropyOptions,
) -> Result<LocalTensor> {
    let (_, v) = logits_shape("cross_entropy_backward", z)?;
    ce_grad(
        z,
        &saved.max,
        &saved.sum_exp,
        targets,
        row_scale,
        VocabShard::full(v),
        opts,
    )
}

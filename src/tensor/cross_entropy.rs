//! [`DTensor::vocab_parallel_cross_entropy`]: softmax cross-entropy of
//! vocab-sharded logits (Megatron's `vocab_parallel_cross_entropy`).
//!
//! Logits `z` `[tokens, vocab]` are `Shard(1)`; targets are replicated host
//! ids. Per row, with three all-reduces of O(tokens) size and never a gather
//! of the logits:
//! 1. `m = all-reduce-max(max_j z_rj)`
//! 2. `pred = all-reduce-sum(z[t − start_r])` (0 on ranks that do not own t)
//! 3. `S = all-reduce-sum(Σ_j exp(z_j − m))`
//! 4. `loss = ln S + m − pred`; with label smoothing α one more
//!    all-reduce-sum of `Σ_j z_j` gives `(1 − α)·loss + α·(ln S + m − Σz/K)`
//!    with K the *global* (unpadded) vocab.
//!
//! The VJP (`cross_entropy_grad.rs`) needs no communication:
//! `dz = g·(softmax − (1−α)·onehot − α/K)`. Columns at or past `valid_vocab`
//! (vocab padded to a multiple of P) are masked out, so padding never
//! changes the loss.

use super::autograd::record;
use super::cross_entropy_config::{CrossEntropyConfig, Reduction, vocab_shard};
use super::cross_entropy_grad::{Saved, logits_grad};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::LocalTensor;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels;

const OP: &str = "DTensor::vocab_parallel_cross_entropy";

/// All-reduce per-rank row statistics (skipped, not counted, on one rank).
fn all_reduce_rows(
    like: &DTensor,
    parts: Vec<LocalTensor>,
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    if like.mesh().size() == 1 {
        return Ok(parts);
    }
    let shape = parts[0].shape().to_vec();
    like.with_shards(parts, shape, Placement::Partial(op))
        .redistribute(Placement::Replicate)
        .map(|d| d.shards().to_vec())
}

/// The checks before any work: shapes, placement, targets. Returns
/// (valid vocab, rows counted in the mean).
fn check(logits: &DTensor, targets: &[i32], config: &CrossEntropyConfig) -> Result<(usize, usize)> {
    config.check(OP)?;
    if logits.shape().len() != 2 || logits.shape()[0] != targets.len() {
        return Err(Error::shape(
            OP,
            format!("[{}, vocab]", targets.len()),
            logits.shape(),
        ));
    }
    if logits.mesh().size() > 1 && logits.placement() != Placement::Shard(1) {
        return Err(Error::invalid(
            OP,
            format!(
                "logits must be placed Shard(1), got {:?}",
                logits.placement()
            ),
        ));
    }
    if logits.dtype() == DType::I32 {
        return Err(Error::DTypeMismatch {
            op: OP,
            expected: DType::F32,
            got: DType::I32,
        });
    }
    let vocab = logits.shape()[1];
    let valid_vocab = config.valid_vocab.unwrap_or(vocab);
    if valid_vocab > vocab || valid_vocab == 0 {
        return Err(Error::invalid(
            OP,
            format!("valid_vocab {valid_vocab} must be in 1..={vocab}"),
        ));
    }
    let mut counted = 0;
    for &t in targets {
        if Some(t) == config.ignore_index {
            continue;
        }
        if t < 0 || t as usize >= valid_vocab {
            return Err(Error::OutOfRange {
                op: OP,
                what: "target",
                value: t as i64,
                bound: valid_vocab,
            });
        }
        counted += 1;
    }
    Ok((valid_vocab, counted))
}

impl DTensor {
    /// Softmax cross-entropy of these logits `[tokens, vocab]` (`Shard(1)`,
    /// f32 or f16) against host `targets` (`[tokens]`, each in
    /// `0..valid_vocab` or the ignore index) → the loss, `Replicate`, f32:
    /// `[tokens]` for [`Reduction::None`], else `[1]`. Three all-reduces of
    /// one value per row (four with label smoothing), never a gather of the
    /// logits. f16 logits are widened: the softmax and its sums run in f32,
    /// and their gradient comes back in f16. Its VJP communicates nothing.
    pub fn vocab_parallel_cross_entropy(
        &self,
        targets: &[i32],
        config: &CrossEntropyConfig,
    ) -> Result<DTensor> {
        let (valid_vocab, counted) = check(self, targets, config)?;
        record(OP, &[self], || {
            let (dtype, logits) = (self.dtype(), self.cast(DType::F32)?);
            let (mesh, opts) = (logits.mesh(), config.options());
            let z = logits.shards();
            // `r` below is a position in the shards; the vocab offset is its global rank's.
            let shard = |r: usize| vocab_shard(&logits, z[r].rank_index(), valid_vocab);
            let tgt = mesh
                .ranks()
                .iter()
                .map(|r| r.upload_i32(&[targets.len()], targets))
                .collect::<Result<Vec<_>>>()?;
            let each = |f: &dyn Fn(usize) -> Result<LocalTensor>| {
                (0..z.len()).map(f).collect::<Result<Vec<_>>>()
            };
            let max = all_reduce_rows(
                &logits,
                each(&|r| kernels::row_max(&z[r], shard(r)))?,
                ReduceOp::Max,
            )?;
            let pred = all_reduce_rows(
                &logits,
                each(&|r| kernels::target_logit(&z[r], &tgt[r], shard(r)))?,
                ReduceOp::Sum,
            )?;
            let sum_exp = all_reduce_rows(
                &logits,
                each(&|r| kernels::row_sum_exp(&z[r], &max[r], shard(r)))?,
                ReduceOp::Sum,
            )?;
            let sum_z = if opts.label_smoothing > 0.0 {
                Some(all_reduce_rows(
                    &logits,
                    each(&|r| kernels::row_sum(&z[r], shard(r)))?,
                    ReduceOp::Sum,
                )?)
            } else {
                None
            };
            let loss = each(&|r| {
                kernels::ce_loss(
                    &max[r],
                    &sum_exp[r],
                    &pred[r],
                    sum_z.as_ref().map(|s| &s[r]),
                    &tgt[r],
                    valid_vocab,
                    &opts,
                )
            })?;
            let (loss, shape) = reduce(loss, config.reduction, counted)?;
            let y = logits.with_shards(loss, shape, Placement::Replicate);
            let saved = Saved {
                logits: logits.detach(),
                dtype,
                targets: tgt,
                max,
                sum_exp,
                counted,
                valid_vocab,
                config: config.clone(),
            };
            Ok((y, move |dy: &DTensor| {
                Ok(vec![Some(logits_grad(&saved, dy)?)])
            }))
        })
    }
}

/// Per-row losses `[t]` combined as `reduction` says, with their shape.
fn reduce(
    loss: Vec<LocalTensor>,
    reduction: Reduction,
    counted: usize,
) -> Result<(Vec<LocalTensor>, Vec<usize>)> {
    let t = loss[0].len();
    if reduction == Reduction::None {
        return Ok((loss, vec![t]));
    }
    let scale = if reduction == Reduction::Mean {
        1.0 / counted.max(1) as f32
    } else {
        1.0
    };
    let reduced = loss
        .iter()
        .map(|l| {
            let s = kernels::sum_rows(&l.reshape(&[t, 1])?)?;
            if scale == 1.0 {
                Ok(s)
            } else {
                kernels::scale(&s, scale)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((reduced, vec![1]))
}

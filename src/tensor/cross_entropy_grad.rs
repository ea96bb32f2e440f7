//! The VJP of [`DTensor::vocab_parallel_cross_entropy`]: the gradient of the
//! logits, `dz = g·(softmax − (1−α)·onehot − α/K)` per row, from what the
//! forward kept (the row maxima and exp-sums are already all-reduced), so
//! no communication.

use super::autograd::placed;
use super::cross_entropy_config::{CrossEntropyConfig, Reduction, vocab_shard};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels;

const OP: &str = "DTensor::vocab_parallel_cross_entropy (backward)";

/// What the forward keeps for the VJP.
pub(super) struct Saved {
    /// The logits, widened to f32.
    pub(super) logits: DTensor,
    /// The logits' own dtype: their gradient comes back in it.
    pub(super) dtype: DType,
    pub(super) targets: Vec<LocalTensor>,
    pub(super) max: Vec<LocalTensor>,
    pub(super) sum_exp: Vec<LocalTensor>,
    pub(super) counted: usize,
    pub(super) valid_vocab: usize,
    pub(super) config: CrossEntropyConfig,
}

/// Each row's factor `g`: `dloss` per row for [`Reduction::None`], the
/// scalar `dloss` broadcast to every row (over the counted rows for a mean)
/// otherwise.
fn row_scale(s: &Saved, dloss: &DTensor) -> Result<Vec<LocalTensor>> {
    let t = s.logits.shape()[0];
    let dloss = placed(dloss, Placement::Replicate)?.cast(DType::F32)?;
    let per_row = match s.config.reduction {
        Reduction::Mean => 1.0 / s.counted.max(1) as f32,
        _ => 1.0,
    };
    if s.config.reduction == Reduction::None {
        if dloss.shape() != [t] {
            return Err(Error::shape(OP, [t], dloss.shape()));
        }
        return Ok(dloss.shards().to_vec());
    }
    if dloss.shape() != [1] {
        return Err(Error::shape(OP, [1], dloss.shape()));
    }
    // Broadcast the scalar gradient to every row: zeros[t,1] + g.
    dloss
        .shards()
        .iter()
        .map(|g| {
            let z = g.rank().zeros(&[t, 1], DType::F32)?;
            let b = kernels::add_row(&z, g)?;
            kernels::scale(&b.reshape(&[t])?, per_row)
        })
        .collect()
}

/// The logits' gradient (`Shard(1)`, in the logits' dtype) for the loss's
/// gradient `dloss`.
pub(super) fn logits_grad(s: &Saved, dloss: &DTensor) -> Result<DTensor> {
    let logits = &s.logits;
    let row_scale = row_scale(s, dloss)?;
    let opts = s.config.options();
    // Position r in the shards; the vocab offset is its global rank's.
    let grads = (0..logits.shards().len())
        .map(|r| {
            kernels::ce_grad(
                &logits.shards()[r],
                &s.max[r],
                &s.sum_exp[r],
                &s.targets[r],
                &row_scale[r],
                vocab_shard(logits, logits.shards()[r].rank_index(), s.valid_vocab),
                &opts,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    logits
        .with_shards(grads, logits.shape().to_vec(), logits.placement())
        .cast(s.dtype)
}

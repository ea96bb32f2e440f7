//! [`DTensor::dropout`]: inverted dropout whose mask depends on the logical
//! tensor, not on its sharding.
//!
//! `y = x·m/(1 − p)` with a mask `m ∈ {0, 1}` drawn per logical element by
//! the counter-based kernel [`kernels::dropout`] from `(seed, step, layer id,
//! global element index)`. A `Shard(d)` rank computes each element's global
//! index from its shard's offset, so P = 1, 3 and 4 give bit-identical
//! masks, and replicated (or partial) tensors get the same mask on every
//! rank. The VJP applies the same mask to `dy`. Nothing is communicated.

use super::autograd::{placed, record};
use super::dtensor::DTensor;
use super::placement::{Placement, local_shape_in_units};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::{self, PhiloxKey, ShardWindow};
use crate::shard::split_range_in_units;

/// Apply the mask of `key` to every shard of `x` (f32), each at its logical offset.
fn masked(x: &DTensor, p: f32, key: PhiloxKey) -> Result<DTensor> {
    let size = x.mesh().size();
    let shards = x
        .shards()
        .iter()
        .map(|s| {
            // The offset is the shard's global rank's, not its position.
            let r = s.rank_index();
            let window = match x.placement() {
                Placement::Shard(d) => Some(ShardWindow {
                    dim: d,
                    start: split_range_in_units(x.shape()[d], size, r, x.shard_unit()).start,
                    total: x.shape()[d],
                }),
                // Replicate and Partial shards are full-shape: the mask
                // applies alike to every term of a partial sum.
                _ => None,
            };
            kernels::dropout(s, p, key, window)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(x.with_shards(shards, x.shape().to_vec(), x.placement()))
}

/// `x·m/(1 − p)` in x's dtype (an f16 `x` masked and scaled in f32).
fn masked_as(x: &DTensor, p: f32, key: PhiloxKey) -> Result<DTensor> {
    masked(&x.cast(DType::F32)?, p, key)?.cast(x.dtype())
}

fn zeros_like(x: &DTensor) -> Result<DTensor> {
    let p = x.mesh().size();
    let shards = x
        .mesh()
        .ranks()
        .iter()
        .map(|r| {
            r.zeros(
                &local_shape_in_units(x.shape(), x.placement(), p, r.index(), x.shard_unit()),
                x.dtype(),
            )
        })
        .collect::<Result<Vec<LocalTensor>>>()?;
    DTensor::from_shards_in_units(x.mesh(), shards, x.shape(), x.placement(), x.shard_unit())
}

/// `dy` placed as the input's gradient: like `x`, except that a `Partial`
/// x takes `dy` as it comes (the mask is linear, so it applies to any form
/// of the same logical gradient).
fn grad_placed(x: Placement, dy: &DTensor) -> Result<DTensor> {
    match x {
        Placement::Partial(_) => Ok(dy.clone()),
        p => placed(dy, p),
    }
}

impl DTensor {
    /// Inverted dropout: `self·m/(1 − p)` (f32 or f16, any placement; f16 is
    /// masked and scaled in f32, then rounded), placed like `self`, with the
    /// mask of `key` drawn per logical element, so every sharding of one
    /// logical tensor gets the same mask. `p = 0` returns `self` (no
    /// kernel runs); `p = 1` gives zeros, as PyTorch does. Communicates
    /// nothing; the VJP masks `dy` alike.
    pub fn dropout(&self, p: f32, key: PhiloxKey) -> Result<DTensor> {
        const OP: &str = "DTensor::dropout";
        let x = self;
        if x.dtype() == DType::I32 {
            return Err(Error::DTypeMismatch {
                op: OP,
                expected: DType::F32,
                got: x.dtype(),
            });
        }
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(OP, format!("p = {p} must lie in [0, 1]")));
        }
        if p == 0.0 {
            return Ok(x.clone());
        }
        let placement = x.placement();
        if p == 1.0 {
            return record(OP, &[x], || {
                Ok((zeros_like(x)?, move |dy: &DTensor| {
                    Ok(vec![Some(zeros_like(&grad_placed(placement, dy)?)?)])
                }))
            });
        }
        record(OP, &[x], || {
            Ok((masked_as(x, p, key)?, move |dy: &DTensor| {
                Ok(vec![Some(masked_as(&grad_placed(placement, dy)?, p, key)?)])
            }))
        })
    }
}

//! [`DTensor::redistribute`]: moving a tensor between placements with the
//! collectives (a new `Shard` placement splits plainly, in units of 1).
//!
//! | from -> to | how |
//! |---|---|
//! | Partial -> Replicate | all-reduce |
//! | Shard(d) -> Replicate | all-gather along d |
//! | Partial -> Shard(d) | reduce-scatter along d |
//! | Replicate -> Shard(d) | local slice, no communication |
//! | Shard(d) -> Shard(e) | all-to-all |
//! | Replicate -> Partial(Sum) | rank 0 keeps the value, the others hold zeros |
//!
//! f16 tensors move as f32 (cast, redistribute, cast back): collectives move
//! 32-bit words, and a Partial sum is then accumulated in f32 and rounded once.

use super::autograd::record;
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::comm;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels;
use crate::shard::split_range_in_units;

impl DTensor {
    /// Move to another placement with the collectives of the module table.
    /// Backward moves the gradient back to this tensor's placement (a
    /// `Partial(Sum)` tensor's gradient is `Replicate`): the conjugate
    /// collective, as a [`Mapping`](super::Mapping)'s backward.
    pub fn redistribute(&self, to: Placement) -> Result<DTensor> {
        self.redistribute_in_units(to, 1)
    }

    /// [`DTensor::redistribute`] with a `Shard(d)` result split in whole
    /// units of `unit` (the first ranks take one more): e.g. an attention
    /// output split by heads re-split in a quantized weight's blocks.
    pub fn redistribute_in_units(&self, to: Placement, unit: usize) -> Result<DTensor> {
        Self::check_placement("DTensor::redistribute", self.shape(), to)?;
        record("DTensor::redistribute", &[self], || {
            let y = self.move_to(to, unit)?;
            let (from, unit) = (self.placement(), self.shard_unit());
            Ok((y, move |dy: &DTensor| {
                let back = match from {
                    Placement::Partial(ReduceOp::Sum) => Placement::Replicate,
                    Placement::Partial(ReduceOp::Max) => {
                        return Err(Error::invalid(
                            "DTensor::redistribute (backward)",
                            "no gradient through a Partial(Max) reduction: take the maximum \
                             with an operation that has one (e.g. the vocab-parallel loss)",
                        ));
                    }
                    p => p,
                };
                Ok(vec![Some(dy.move_to(back, unit)?)])
            }))
        })
    }

    /// [`DTensor::redistribute`] unrecorded, a new `Shard(d)` split in whole
    /// units of `unit`.
    pub(crate) fn move_to(&self, to: Placement, unit: usize) -> Result<DTensor> {
        const OP: &str = "DTensor::redistribute";
        Self::check_units(OP, self.shape(), to, unit)?;
        if self.placement() == to
            && (self.shard_unit() == unit || !matches!(to, Placement::Shard(_)))
        {
            return Ok(self.clone());
        }
        if self.placement() == to || (unit > 1 && self.placement() != Placement::Replicate) {
            // Collectives split in units of 1: gather, then slice in units.
            return self.move_to(Placement::Replicate, 1)?.move_to(to, unit);
        }
        if self.dtype() == DType::F16 && self.placement() != to {
            return self.cast(DType::F32)?.move_to(to, unit)?.cast(DType::F16);
        }
        let mesh = self.mesh();
        let shards = match (self.placement(), to) {
            (a, b) if a == b => return Ok(self.clone()),
            (Placement::Partial(op), Placement::Replicate) => {
                comm::all_reduce(mesh, self.shards(), op)?
            }
            (Placement::Shard(d), Placement::Replicate) => {
                comm::all_gather(mesh, self.shards(), d)?
            }
            (Placement::Partial(op), Placement::Shard(d)) => {
                comm::reduce_scatter(mesh, self.shards(), d, op)?
            }
            (Placement::Replicate, Placement::Shard(d)) => {
                let p = mesh.size();
                self.shards()
                    .iter()
                    .map(|s| {
                        let r = s.rank_index();
                        let range = split_range_in_units(self.shape()[d], p, r, unit);
                        kernels::narrow(s, d, range.start, range.len())
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            (Placement::Shard(d), Placement::Shard(e)) => {
                comm::all_to_all(mesh, self.shards(), e, d)?
            }
            (Placement::Replicate, Placement::Partial(ReduceOp::Sum)) => self
                .shards()
                .iter()
                .map(|s| {
                    // Global rank 0, wherever it lives, keeps the value.
                    if s.rank_index() == 0 {
                        Ok(s.clone())
                    } else {
                        s.rank().zeros(s.shape(), s.dtype())
                    }
                })
                .collect::<Result<Vec<_>>>()?,
            (Placement::Replicate, Placement::Partial(ReduceOp::Max)) => self.shards().to_vec(),
            (Placement::Shard(_), Placement::Partial(_))
            | (Placement::Partial(_), Placement::Partial(_)) => {
                return self.move_to(Placement::Replicate, 1)?.move_to(to, unit);
            }
            (from, to) => {
                return Err(Error::invalid(
                    OP,
                    format!("no path from {from:?} to {to:?}"),
                ));
            }
        };
        Ok(self.with_shards_in_units(shards, self.shape().to_vec(), to, unit))
    }
}

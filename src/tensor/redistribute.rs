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

use super::dtensor::{DTensor, Placement};
use crate::comm;
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels;
use crate::shard::split_range_in_units;

impl DTensor {
    /// Move to another placement with the collectives of the module table.
    pub fn redistribute(&self, to: Placement) -> Result<DTensor> {
        const OP: &str = "DTensor::redistribute";
        Self::check_placement(OP, self.shape(), to)?;
        if self.dtype() == DType::F16 && self.placement() != to {
            return self.cast(DType::F32)?.redistribute(to)?.cast(DType::F16);
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
                    .enumerate()
                    .map(|(r, s)| {
                        let range = split_range_in_units(self.shape()[d], p, r, 1);
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
                .enumerate()
                .map(|(r, s)| {
                    if r == 0 {
                        Ok(s.clone())
                    } else {
                        s.rank().zeros(s.shape(), s.dtype())
                    }
                })
                .collect::<Result<Vec<_>>>()?,
            (Placement::Replicate, Placement::Partial(ReduceOp::Max)) => self.shards().to_vec(),
            (Placement::Shard(_), Placement::Partial(_))
            | (Placement::Partial(_), Placement::Partial(_)) => {
                return self.redistribute(Placement::Replicate)?.redistribute(to);
            }
            (from, to) => {
                return Err(Error::invalid(
                    OP,
                    format!("no path from {from:?} to {to:?}"),
                ));
            }
        };
        Ok(self.with_shards(shards, self.shape().to_vec(), to))
    }
}

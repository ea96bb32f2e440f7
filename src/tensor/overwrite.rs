//! Writing into a tensor's own buffers: host values over each rank's shard
//! (checkpoint loading without a second copy of the model on the devices),
//! zeros over one row (an embedding's padding row), and giving each rank a
//! buffer of its own before an in-place update.

use super::aliased::{one_buffer, one_buffer_each};
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::element::DType;
use crate::error::Result;
use crate::shard::{host_narrow, split_range_in_units};

impl DTensor {
    /// Zero global row `row` of a 2-D f32 tensor in place, wherever its
    /// shards hold it: the rank whose rows hold it under `Shard(0)`, every
    /// rank's columns of it otherwise, once where a replicated value's
    /// ranks share one buffer.
    pub(crate) fn zero_row(&self, op: &'static str, row: usize) -> Result<()> {
        let shards = self.shards();
        if one_buffer(shards) {
            let width = shards[0].shape()[1];
            return shards[0].write_f32_at_every_rank(op, row * width, &vec![0.0; width]);
        }
        let (rows, p) = (self.shape()[0], self.mesh().size());
        for local in shards {
            let at = match self.placement() {
                Placement::Shard(0) => {
                    let r = local.rank_index();
                    let range = split_range_in_units(rows, p, r, self.shard_unit());
                    range.contains(&row).then(|| row - range.start)
                }
                _ => Some(row),
            };
            if let Some(at) = at {
                let width = local.shape()[1];
                local.write_f32_at(op, at * width, &vec![0.0; width])?;
            }
        }
        Ok(())
    }

    /// Overwrite the value in place from host `data` of the logical shape,
    /// split like [`DTensor::from_host_in_units`] splits it in units of
    /// `unit`, so views and clones sharing these buffers see the new values.
    /// `Ok(false)`, writing nothing, when it cannot be done in place: a shard
    /// that is not f32 or shares its buffer with other ranks, a `Partial`
    /// placement, or shards that do not fit the split. Every device is
    /// flushed and checked for errors before the first write, so a device
    /// error found midway cannot leave some ranks written.
    pub(crate) fn overwrite_from_host_in_units(
        &self,
        op: &'static str,
        data: &[f32],
        unit: usize,
    ) -> Result<bool> {
        let shards = self.shards();
        // A replicated value whose ranks alias one buffer (a shared
        // device): one write gives every rank the same values.
        let one = self.placement() == Placement::Replicate && one_buffer_each(&[self]);
        if shards
            .iter()
            .any(|s| s.dtype() != DType::F32 || (s.is_shared_across_ranks() && !one))
        {
            return Ok(false);
        }
        if one {
            if shards[0].len() != data.len() {
                return Ok(false);
            }
            shards[0].device().check()?;
            shards[0].write_f32_at_every_rank(op, 0, data)?;
            return Ok(true);
        }
        let (shape, p) = (self.shape(), self.mesh().size());
        // One part per addressable shard, cut at its global rank's range.
        let parts: Vec<Vec<f32>> = match self.placement() {
            Placement::Replicate => vec![data.to_vec(); shards.len()],
            Placement::Shard(d) => shards
                .iter()
                .map(|s| {
                    let range = split_range_in_units(shape[d], p, s.rank_index(), unit);
                    host_narrow(data, shape, d, range)
                })
                .collect(),
            Placement::Partial(_) => return Ok(false),
        };
        if !shards.iter().zip(&parts).all(|(s, v)| s.len() == v.len()) {
            return Ok(false);
        }
        for s in shards {
            s.device().flush();
        }
        for s in shards {
            s.device().check()?;
        }
        for (shard, part) in shards.iter().zip(parts) {
            shard.write_f32(op, &part)?;
        }
        Ok(true)
    }

    /// The same values with a buffer per rank, untracked, when some shard
    /// shares its buffer with other ranks (a replicated collective's result
    /// on a shared-device mesh, which an in-place update would change on
    /// every rank at once); `None` when every rank owns its buffer already.
    /// Copies only the shared shards.
    pub(crate) fn owning_buffers(&self) -> Result<Option<DTensor>> {
        if !self.shards().iter().any(|s| s.is_shared_across_ranks()) {
            return Ok(None);
        }
        let shards = self
            .shards()
            .iter()
            .map(|s| {
                if s.is_shared_across_ranks() {
                    s.deep_copy()
                } else {
                    Ok(s.clone())
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(self.with_shards(
            shards,
            self.shape().to_vec(),
            self.placement(),
        )))
    }
}

//! In-place optimiser steps on a tensor from its gradient and state tensors
//! placed like it: each rank updates its own shard with the same rule
//! (`kernels::optim`), so a sharded model steps exactly like the serial one.
//! State lives in persistent buffers of its own, not the pool's free list,
//! so the first step's temporaries stay pooled and later steps allocate
//! nothing.

use super::dtensor::DTensor;
use super::placement::Placement;
use crate::device::LocalTensor;
use crate::error::Result;
use crate::kernels::optim::{AdamWStep, SgdStep, adamw_step, sgd_step};

impl DTensor {
    /// Persistent zeros shaped, typed and placed like this tensor (optimiser
    /// state), untracked.
    pub(crate) fn zeros_persistent_like(&self) -> Result<DTensor> {
        let shards = self
            .shards()
            .iter()
            .map(|s| s.rank().zeros_persistent(s.shape(), s.dtype()))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.with_shards(shards, self.shape().to_vec(), self.placement()))
    }

    /// Two persistent one-element zeros per rank, of this tensor's dtype
    /// (replicated `[1]` tensors), for state slots a step leaves unused.
    pub(crate) fn spare_slots(&self) -> Result<(DTensor, DTensor)> {
        let (a, b): (Vec<LocalTensor>, Vec<LocalTensor>) = self
            .shards()
            .iter()
            .map(|s| {
                let r = s.rank();
                Ok((
                    r.zeros_persistent(&[1], s.dtype())?,
                    r.zeros_persistent(&[1], s.dtype())?,
                ))
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let spare = |v| self.with_shards(v, vec![1], Placement::Replicate);
        Ok((spare(a), spare(b)))
    }

    /// Whether `state` has one shard per shard of this tensor, of the same
    /// shape on the same rank (state made for this value, not a replaced one).
    pub(crate) fn same_shards(&self, state: &DTensor) -> bool {
        state.shards().len() == self.shards().len()
            && state
                .shards()
                .iter()
                .zip(self.shards())
                .all(|(a, b)| a.shape() == b.shape() && a.rank_index() == b.rank_index())
    }

    /// One SGD step in place, rank by rank: this value from `grad`, with the
    /// momentum buffer `buf` when momentum is on and `spares`
    /// ([`DTensor::spare_slots`]) in the slots SGD leaves unused.
    pub(crate) fn sgd_update(
        &self,
        grad: &DTensor,
        buf: Option<&DTensor>,
        spares: &(DTensor, DTensor),
        step: SgdStep,
    ) -> Result<()> {
        // State pairs with the value by shard position.
        for (i, (w, g)) in self.shards().iter().zip(grad.shards()).enumerate() {
            let buf = buf.map(|b| b.shard_at(i)).transpose()?;
            let spare = [spares.0.shard_at(i)?, spares.1.shard_at(i)?];
            sgd_step(w, g, buf, spare, step)?;
        }
        Ok(())
    }

    /// One AdamW step in place, rank by rank: this value and its moments `m`
    /// and `v` from `grad`.
    pub(crate) fn adamw_update(
        &self,
        grad: &DTensor,
        m: &DTensor,
        v: &DTensor,
        step: AdamWStep,
    ) -> Result<()> {
        for (i, (w, g)) in self.shards().iter().zip(grad.shards()).enumerate() {
            adamw_step(w, g, m.shard_at(i)?, v.shard_at(i)?, step)?;
        }
        Ok(())
    }
}

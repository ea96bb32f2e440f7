//! A row-parallel layer's branch on one rank, `x·wᵀ (+ bias) + residual`,
//! with the bias and the residual added in the small-M product's store
//! (`GemmOptions::{bias, accumulate}`): with one rank the layer's
//! all-reduce is nothing, so the store can finish the branch, one dispatch
//! and one pass over the output fewer per decoded token and layer than
//! [`DTensor::add_row_add`] or `add` after the product. The store adds in
//! their order (`(y + b) + residual`), so the bits are theirs.
//!
//! With more ranks on one shared device, the layer's all-reduce adds the
//! residual in its fold ([`DTensor::reduce_add_residual`]): again the two
//! steps' bits, one dispatch fewer per branch.

use super::autograd::tracking;
use super::dtensor::DTensor;
use super::placement::Placement;
use crate::comm;
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::kernels::{self, GemmOptions, gemv::GEMV_MAX_ROWS};

impl DTensor {
    /// `x·wᵀ (+ bias) + residual` in one small-M product on a one-rank
    /// mesh, unrecorded, or `None` where that does not apply (more ranks,
    /// anything tracked, not f32, more than [`GEMV_MAX_ROWS`] rows, a
    /// weight in blocks, shapes or placements a layer would not pass): the
    /// caller then takes its separate steps, which check and report.
    pub(crate) fn linear_residual_one_rank(
        &self,
        w: &DTensor,
        bias: Option<&DTensor>,
        residual: &DTensor,
    ) -> Result<Option<DTensor>> {
        let mut inputs = vec![self, w, residual];
        inputs.extend(bias);
        let one_rank = inputs.iter().all(|t| t.mesh().size() == 1);
        // The weight may be kept narrow (bf16, f16): the product reads it so.
        let f32s = inputs
            .iter()
            .all(|t| t.dtype() == DType::F32 || std::ptr::eq(*t, w));
        let (Some(&t), Some(&n)) = (self.shape().first(), w.shape().first()) else {
            return Ok(None);
        };
        let shapes = self.shape().len() == 2
            && w.shape().get(1) == self.shape().get(1)
            && residual.shape() == [t, n]
            && bias.is_none_or(|b| b.shape() == [n]);
        if !one_rank
            || !f32s
            || !shapes
            || tracking(&inputs)
            || !(1..=GEMV_MAX_ROWS).contains(&t)
            || residual.placement() != Placement::Replicate
            || w.shards()[0].is_blocked()
        {
            return Ok(None);
        }
        let y = kernels::gemm(
            &self.shards()[0],
            &w.shards()[0],
            GemmOptions {
                trans_b: true,
                bias: bias.map(|b| &b.shards()[0]),
                accumulate: Some(&residual.shards()[0]),
                weight: true,
                ..Default::default()
            },
        )?;
        Ok(Some(residual.with_shards_in_units(
            vec![y],
            vec![t, n],
            Placement::Replicate,
            1,
        )))
    }

    /// `residual + self` with `self` all-reduced first (a `Partial(Sum)`
    /// row-parallel output): the sum and the add in one pass where the
    /// ranks share one device, unrecorded, both f32, `residual`
    /// `Replicate` and shaped like `self` (`comm::all_reduce_sum_add`);
    /// `None` otherwise, for the caller's separate steps.
    pub(crate) fn reduce_add_residual(&self, residual: &DTensor) -> Result<Option<DTensor>> {
        if !self.reduces_into(residual, &[]) {
            return Ok(None);
        }
        let r = &residual.shards()[0];
        let sum = comm::all_reduce_sum_add(self.mesh(), self.shards(), r)?;
        Ok(sum.map(|s| self.replicated(s)))
    }

    /// [`Self::reduce_add_residual`] and the RMSNorm of its result with
    /// `gamma` (`[cols]`, `Replicate`) and `eps`, in the same dispatch for
    /// a few rows on a CPU adapter (`comm::all_reduce_sum_add_norm`): the
    /// sum and `rms_norm`'s bits, both `Replicate`; `None` otherwise.
    pub(crate) fn reduce_add_residual_norm(
        &self,
        residual: &DTensor,
        (gamma, eps): (&DTensor, f32),
    ) -> Result<Option<(DTensor, DTensor)>> {
        if !self.reduces_into(residual, &[gamma]) {
            return Ok(None);
        }
        let (r, g) = (&residual.shards()[0], &gamma.shards()[0]);
        let got = comm::all_reduce_sum_add_norm(self.mesh(), self.shards(), r, (g, eps))?;
        Ok(got.map(|(sum, y)| (self.replicated(sum), self.replicated(y))))
    }

    /// Whether `self` (`Partial(Sum)`) all-reduces into `residual`
    /// (`Replicate`, shaped alike) with the `Replicate` `also`, all f32 on
    /// one mesh and nothing recorded.
    fn reduces_into(&self, residual: &DTensor, also: &[&DTensor]) -> bool {
        let mut all = vec![self, residual];
        all.extend(also);
        self.placement() == Placement::Partial(ReduceOp::Sum)
            && self.shape() == residual.shape()
            && all[1..]
                .iter()
                .all(|t| t.placement() == Placement::Replicate)
            && all
                .iter()
                .all(|t| t.dtype() == DType::F32 && t.mesh().same_as(self.mesh()))
            && !tracking(&all)
    }

    /// `shards` (one per rank) shaped like `self`, `Replicate`.
    fn replicated(&self, shards: Vec<crate::device::LocalTensor>) -> DTensor {
        self.with_shards(shards, self.shape().to_vec(), Placement::Replicate)
    }
}

//! [`DTensor::ring_linear_reduce_scatter`]: a row-parallel product whose
//! partial sums are reduce-scattered along tokens as `P − 1` ring steps,
//! each chunk's partial product computed while the running sum travels
//! ([`ring_reduce_scatter_fused`]); the replicated bias is then added to
//! each rank's rows. Its VJP is the conjugate ring: `dy`'s token chunks
//! gathered ([`ring_all_gather_fused`]), each used as it arrives for
//! `dx_r[c] = dy_c·w_r` and `dw_r += dy_cᵀ·x_r[c]`, and `db = Σ_rows dy`
//! from the gathered `dy` in chunk order, so every rank holds the same bits
//! and the bias needs no all-reduce (docs/MATH.md §5.5). f32 only: the ring
//! moves f32 chunks.

use super::autograd::{placed, record};
use super::checks::expect_aligned;
use super::dtensor::DTensor;
use super::placement::Placement;
use super::ring::{
    concat_token_chunks, expect_token_chunks, ring_all_gather_fused, ring_operands,
    ring_reduce_scatter_fused, token_chunk,
};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::{self, GemmOptions};

const OP: &str = "DTensor::ring_linear_reduce_scatter";

impl DTensor {
    /// `reduce_scatter(self·wᵀ) + bias` for `self` `[T, K]` and `w` `[N, K]`
    /// both split along K (`Shard(1)`, the same per-rank widths: a
    /// row-parallel weight), the bias `[N]` `Replicate`: `y` `[T, N]` placed
    /// `Shard(0)` (tokens split), as `DTensor::matmul`, then
    /// `Mapping::ReduceScatterToParallel(0)` and a bias on each rank's rows
    /// give it, but with no reduce-scatter: `P − 1` ring steps, each step's
    /// GEMMs recorded while its transfer is in flight. Backward gathers `dy`
    /// the same way: `dx` `Shard(1)`, `dw` `Shard(1)` (f32), `db`
    /// `Replicate` with no further communication. x, w and the bias are f32.
    ///
    /// ```
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::{DTensor, Mesh, Placement};
    /// let mesh = Mesh::simulated(2)?;
    /// let x = DTensor::from_host(&mesh, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], Placement::Shard(1))?;
    /// let w = DTensor::from_host(&mesh, &[1, 2], &[1.0, 1.0], Placement::Shard(1))?;
    /// let b = DTensor::from_host(&mesh, &[1], &[0.5], Placement::Replicate)?;
    /// let y = x.ring_linear_reduce_scatter(&w, Some(&b))?;
    /// assert_eq!(y.placement(), Placement::Shard(0));
    /// assert_eq!(y.to_host()?, vec![3.5, 7.5, 11.5]);
    /// # Ok(()) }
    /// ```
    pub fn ring_linear_reduce_scatter(
        &self,
        w: &DTensor,
        bias: Option<&DTensor>,
    ) -> Result<DTensor> {
        let (t, _, n) = ring_operands(OP, self, w)?;
        let p = self.mesh().size();
        if p > 1 {
            for (what, a) in [("x", self), ("w", w)] {
                if a.placement() != Placement::Shard(1) {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "{what} must be split along K (Shard(1), a row-parallel product), \
                             got {:?}",
                            a.placement()
                        ),
                    ));
                }
            }
            expect_aligned(OP, (self, 1, "x's K (dim 1)"), (w, 1, "w's K (dim 1)"))?;
        }
        if let Some(b) = bias {
            check_replicated_bias(b, w, n)?;
        }
        let inputs: Vec<&DTensor> = [Some(self), Some(w), bias].into_iter().flatten().collect();
        record(OP, &inputs, || {
            // Each chunk's partial product is computed while the running sum travels.
            let y = ring_reduce_scatter_fused(self.mesh(), &[t, n], |i, c| {
                let x_rc = token_chunk(&self.shards()[i], p, c)?;
                kernels::gemm(
                    &x_rc,
                    &w.shards()[i],
                    GemmOptions::new().trans_b(true).weight(true),
                )
            })?;
            // The replicated bias, once, on each rank's rows of the reduced sum.
            let y = match bias {
                Some(b) => y.add_row(b)?,
                None => y,
            };
            let (x, w, has_bias) = (self.detach(), w.detach(), bias.is_some());
            Ok((y, move |dy: &DTensor| {
                let dy = placed(dy, Placement::Shard(0))?.cast(DType::F32)?;
                expect_token_chunks(OP, &dy)?;
                let (dx, dw, dys) = backward(&x, &w, &dy)?;
                let db = if has_bias {
                    // From the gathered dy in chunk order: the same bits on every rank.
                    let shards = concat_token_chunks(&dys)?
                        .iter()
                        .map(kernels::sum_rows)
                        .collect::<Result<Vec<_>>>()?;
                    Some(dy.with_shards(shards, vec![n], Placement::Replicate))
                } else {
                    None
                };
                Ok([Some(dx), Some(dw)]
                    .into_iter()
                    .chain(db.map(Some))
                    .collect())
            }))
        })
    }
}

/// The bias `[N]` is f32 and replicated (added once to the reduced sum).
fn check_replicated_bias(b: &DTensor, w: &DTensor, n: usize) -> Result<()> {
    if !b.mesh().same_as(w.mesh()) {
        return Err(Error::invalid(OP, "the bias lives on another mesh"));
    }
    if b.shape() != [n] {
        return Err(Error::shape(OP, [n], b.shape()));
    }
    if b.dtype() != DType::F32 {
        return Err(Error::DTypeMismatch {
            op: OP,
            expected: DType::F32,
            got: b.dtype(),
        });
    }
    if w.mesh().size() > 1 && b.placement() != Placement::Replicate {
        return Err(Error::invalid(
            OP,
            format!(
                "the bias is added once to the reduced sum, so it must be Replicate, got {:?}",
                b.placement()
            ),
        ));
    }
    Ok(())
}

/// `(dx, dw, dy's chunks per rank)`: `dy`'s token chunks ring-gathered, each
/// used as it arrives for `dx_r[c] = dy_c·w_r` and `dw_r += dy_cᵀ·x_r[c]`.
fn backward(
    x: &DTensor,
    w: &DTensor,
    dy: &DTensor,
) -> Result<(DTensor, DTensor, Vec<Vec<LocalTensor>>)> {
    let p = x.mesh().size();
    // One per addressable rank, indexed by position like the shards.
    let mut dw: Vec<Option<LocalTensor>> = vec![None; w.shards().len()];
    let gathered = ring_all_gather_fused(dy, |i, c, dy_c| {
        let x_rc = token_chunk(&x.shards()[i], p, c)?;
        dw[i] = Some(kernels::gemm(
            dy_c,
            &x_rc,
            GemmOptions {
                trans_a: true,
                accumulate: dw[i].as_ref(),
                ..Default::default()
            },
        )?);
        let dx_c = kernels::gemm(dy_c, &w.shards()[i], GemmOptions::new().weight(true))?;
        Ok((dx_c, dy_c.clone()))
    })?;
    let (dxs, dys): (Vec<Vec<_>>, Vec<Vec<_>>) = gathered
        .into_iter()
        .map(|row| row.into_iter().unzip())
        .unzip();
    let dw = dw
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::invalid(OP, "the ring skipped a rank's chunks"))?;
    let dw = w.with_shards_in_units(dw, w.shape().to_vec(), w.placement(), w.shard_unit());
    let dx = x.with_shards_in_units(
        concat_token_chunks(&dxs)?,
        x.shape().to_vec(),
        Placement::Shard(1),
        x.shard_unit(),
    );
    Ok((dx, dw, dys))
}

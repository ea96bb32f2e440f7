//! [`DTensor::ring_gather_linear`]: a column-parallel product of a
//! sequence-parallel input, `y = gather(x)·wᵀ + b`, with the token gather run
//! as `P − 1` ring steps and each arriving chunk multiplied while the next
//! travels ([`ring_all_gather_fused`]). Its VJP is the conjugate ring:
//! `dx`'s per-chunk partials `dy_r[c]·w_r` reduce-scattered along tokens
//! ([`ring_reduce_scatter_fused`]), `dw_r += dy_r[c]ᵀ·x_c` accumulated chunk
//! by chunk, `db_r = Σ_rows dy_r` (docs/MATH.md §5.5). f32 only: the ring
//! moves f32 chunks.

use super::autograd::{placed, record, tracking};
use super::checks::check_bias;
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

const OP: &str = "DTensor::ring_gather_linear";

impl DTensor {
    /// `all_gather(self)·wᵀ + bias` for `self` `[T, K]` split along tokens
    /// (`Shard(0)`, the plain split) and `w` `[N, K]` split along N
    /// (`Shard(0)`, a column-parallel weight), the bias `[N]` split like w's
    /// rows: `y` `[T, N]` placed `Shard(1)` in w's units, as
    /// `Mapping::AllGatherToParallel(0)` then [`DTensor::linear`] give it, but
    /// with no all-gather: `P − 1` ring steps, each step's GEMMs recorded
    /// while its transfer is in flight. Backward does the ring reduce-scatter
    /// of `dx` (`Shard(0)`) the same way, with `dw` (`Shard(0)`, f32)
    /// accumulated per chunk and `db` (`Shard(0)`) the column sums of `dy`.
    /// x, w and the bias are f32.
    ///
    /// ```
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::{DTensor, Mesh, Placement};
    /// let mesh = Mesh::simulated(2)?;
    /// let x = DTensor::from_host(&mesh, &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], Placement::Shard(0))?;
    /// let w = DTensor::from_host(&mesh, &[2, 2], &[1.0, 0.0, 1.0, 1.0], Placement::Shard(0))?;
    /// let y = x.ring_gather_linear(&w, None)?;
    /// assert_eq!(y.placement(), Placement::Shard(1));
    /// assert_eq!(y.to_host()?, vec![1.0, 3.0, 3.0, 7.0, 5.0, 11.0]);
    /// # Ok(()) }
    /// ```
    pub fn ring_gather_linear(&self, w: &DTensor, bias: Option<&DTensor>) -> Result<DTensor> {
        let (t, k, n) = ring_operands(OP, self, w)?;
        expect_token_chunks(OP, self)?;
        let p = self.mesh().size();
        if p > 1 && w.placement() != Placement::Shard(0) {
            return Err(Error::invalid(
                OP,
                format!(
                    "w [N, K] must be split along N (Shard(0), a column-parallel weight), got {:?}",
                    w.placement()
                ),
            ));
        }
        if let Some(b) = bias {
            check_ring_bias(b, w, n)?;
        }
        let inputs: Vec<&DTensor> = [Some(self), Some(w), bias].into_iter().flatten().collect();
        let keep_chunks = tracking(&inputs);
        record(OP, &inputs, || {
            let done = ring_all_gather_fused(self, |i, _, chunk| {
                let y = kernels::gemm(
                    chunk,
                    &w.shards()[i],
                    GemmOptions {
                        trans_b: true,
                        bias: bias.map(|b| &b.shards()[i]),
                        weight: true,
                        ..Default::default()
                    },
                )?;
                // Backward multiplies each chunk again, as it arrived here.
                Ok((y, keep_chunks.then(|| chunk.clone())))
            })?;
            let (ys, chunks): (Vec<Vec<_>>, Vec<Vec<_>>) =
                done.into_iter().map(|row| row.into_iter().unzip()).unzip();
            // The outputs are split like the weight's rows (whole units).
            let y = w.with_shards_in_units(
                concat_token_chunks(&ys)?,
                vec![t, n],
                Placement::Shard(1),
                w.shard_unit(),
            );
            let (w, has_bias) = (w.detach(), bias.is_some());
            Ok((y, move |dy: &DTensor| {
                let chunks = chunks
                    .into_iter()
                    .map(|row| row.into_iter().collect::<Option<Vec<_>>>())
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| Error::invalid(OP, "the forward kept no chunks"))?;
                let dy = placed(dy, Placement::Shard(1))?.cast(DType::F32)?;
                let (dx, dw) = backward(&w, &chunks, &dy, [t, k])?;
                let db = has_bias.then(|| dy.sum_rows()).transpose()?;
                Ok([Some(dx), Some(dw)]
                    .into_iter()
                    .chain(db.map(Some))
                    .collect())
            }))
        })
    }
}

/// The bias `[N]` is f32 and split like w's rows.
fn check_ring_bias(b: &DTensor, w: &DTensor, n: usize) -> Result<()> {
    if !b.mesh().same_as(w.mesh()) {
        return Err(Error::invalid(OP, "the bias lives on another mesh"));
    }
    if b.dtype() != DType::F32 {
        return Err(Error::DTypeMismatch {
            op: OP,
            expected: DType::F32,
            got: b.dtype(),
        });
    }
    if w.mesh().size() == 1 {
        // One rank holds all of it whatever the placement says.
        return match b.shape() {
            [bn] if *bn == n => Ok(()),
            s => Err(Error::shape(OP, [n], s)),
        };
    }
    check_bias(OP, Placement::Shard(1), n, b, (w, 0, "w's rows"))
}

/// `(dx, dw)`: the ring reduce-scatter of `dx`'s per-chunk partials
/// `dy_r[c]·w_r`, with `dw_r += dy_r[c]ᵀ·x_c` accumulated as each chunk's
/// partial is made (`chunks[i][c]` is token chunk c of x as the rank at position i got it).
fn backward(
    w: &DTensor,
    chunks: &[Vec<LocalTensor>],
    dy: &DTensor,
    x_shape: [usize; 2],
) -> Result<(DTensor, DTensor)> {
    let (mesh, p) = (w.mesh(), w.mesh().size());
    // One per addressable rank, indexed by position like the shards.
    let mut dw: Vec<Option<LocalTensor>> = vec![None; w.shards().len()];
    let dx = ring_reduce_scatter_fused(mesh, &x_shape, |i, c| {
        let dy_rc = token_chunk(&dy.shards()[i], p, c)?;
        dw[i] = Some(kernels::gemm(
            &dy_rc,
            &chunks[i][c],
            GemmOptions {
                trans_a: true,
                accumulate: dw[i].as_ref(),
                ..Default::default()
            },
        )?);
        kernels::gemm(&dy_rc, &w.shards()[i], GemmOptions::new().weight(true))
    })?;
    let dw = dw
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::invalid(OP, "the ring skipped a rank's chunks"))?;
    let dw = w.with_shards_in_units(dw, w.shape().to_vec(), w.placement(), w.shard_unit());
    Ok((dx, dw))
}

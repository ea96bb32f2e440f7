//! [`RowProduct`]: a row-parallel product `x·wᵀ` (x `Shard(1)`, w split
//! along its inputs) not yet summed over the ranks. Whoever finishes it
//! chooses its epilogue: the sum (an all-reduce, a reduce-scatter along
//! tokens, or the ring's steps fused with the products), the bias, a
//! residual and the RMS norm of the result. Each epilogue runs in the
//! fewest dispatches the placement allows, with the bits of the separate
//! steps (`sum`, `+ bias`, `residual +`, `rms_norm`):
//!
//! - one rank, at most a few rows, nothing recorded: bias and residual in
//!   the small-M product's store (`DTensor::linear_residual_one_rank`);
//! - ranks sharing a device, no bias, nothing recorded: the residual in the
//!   all-reduce's pass, and the norm too on a CPU adapter
//!   (`DTensor::reduce_add_residual_norm`);
//! - otherwise bias and residual in one kernel after the all-reduce
//!   ([`DTensor::add_row_add`]), or the separate steps.
//!
//! The product knows nothing of the model that makes it: a decoder's
//! residual stream finishes each branch with the norm that follows it.

use super::dtensor::DTensor;
use super::mappings::Mapping;
use super::matmul::MatmulOptions;
use crate::element::DType;
use crate::error::Result;

/// How a row-parallel product's partial sums are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowReduce {
    /// An all-reduce: the output `Replicate`.
    AllReduce,
    /// A reduce-scatter along tokens (sequence parallelism): the output `Shard(0)`.
    ReduceScatter,
    /// The reduce-scatter as `P − 1` ring steps, each fused with a chunk's
    /// product ([`DTensor::ring_linear_reduce_scatter`]).
    Ring,
}

/// A row-parallel product not yet summed (module doc).
#[derive(Clone, Debug)]
pub struct RowProduct {
    x: DTensor,
    w: DTensor,
    bias: Option<DTensor>,
    reduce: RowReduce,
    /// A term added to the result (a LoRA adapter's), placed like it.
    addend: Option<Box<DTensor>>,
}

impl RowProduct {
    /// `x·wᵀ (+ bias)` with `x` `[tokens, in]` `Shard(1)`, `w` `[out, in]`
    /// `Shard(1)` in x's dtype (or kept narrow), `bias` `[out]` `Replicate`;
    /// shapes and placements are checked when it is finished.
    pub fn new(x: DTensor, w: DTensor, bias: Option<DTensor>, reduce: RowReduce) -> Self {
        RowProduct {
            x,
            w,
            bias,
            reduce,
            addend: None,
        }
    }

    /// The same product with `addend` (shaped and placed like the result)
    /// added to it, before any residual and norm: a low-rank adapter's
    /// output beside the layer's.
    pub fn with_addend(self, addend: DTensor) -> Self {
        RowProduct {
            addend: Some(Box::new(addend)),
            ..self
        }
    }

    /// The input's dtype, which the result takes.
    pub fn dtype(&self) -> DType {
        self.x.dtype()
    }

    /// The summed product with its bias: `[tokens, out]`, `Replicate` (or
    /// `Shard(0)` when reduce-scattered), in x's dtype.
    pub fn resolve(self) -> Result<DTensor> {
        Ok(self.finish(None, None)?.0)
    }

    /// `residual + (x·wᵀ summed + bias)` where `residual` is given (shaped
    /// and placed like the result), and the RMS norm of that with `(γ, ε)`
    /// where `norm` is given and the sum's own pass can apply it: `None`
    /// in the second place means the caller norms (module doc).
    pub fn finish(
        self,
        residual: Option<&DTensor>,
        norm: Option<(&DTensor, f32)>,
    ) -> Result<(DTensor, Option<DTensor>)> {
        let RowProduct {
            x,
            w,
            bias,
            reduce,
            addend,
        } = self;
        // The addend joins the residual (which the epilogues add once).
        let joined;
        let residual = match (addend, residual) {
            (None, r) => r,
            (Some(a), None) => {
                joined = *a;
                Some(&joined)
            }
            (Some(a), Some(r)) => {
                joined = r.add(&a.cast(r.dtype())?)?;
                Some(&joined)
            }
        };
        let bias = bias.as_ref();
        if let Some(r) = residual
            && reduce == RowReduce::AllReduce
            && let Some(y) = x.linear_residual_one_rank(&w, bias, r)?
        {
            // One rank: the bias and the residual in the product's store.
            return Ok((y, None));
        }
        let y = if reduce == RowReduce::Ring {
            // Each chunk's partial product is computed while the running sum travels.
            x.ring_linear_reduce_scatter(&w, bias)?
        } else {
            // Partial sums in f32 whatever x's dtype: reduced, then rounded once.
            let opts = MatmulOptions {
                transpose_w: true,
                out_dtype: Some(DType::F32),
            };
            let z = x.matmul_with(&w, opts)?;
            match (reduce, bias) {
                // The bias's gradient from the gathered dy: no extra all-reduce.
                (RowReduce::ReduceScatter, Some(b)) => z.reduce_scatter_add_row(b)?,
                (RowReduce::ReduceScatter, None) => {
                    Mapping::ReduceScatterToParallel(0).forward(&z)?
                }
                (_, b) => {
                    // No bias: the residual added in the all-reduce's pass,
                    // and the norm after it where one is given.
                    if let (None, Some(r)) = (b, residual)
                        && x.dtype() == DType::F32
                    {
                        if let Some(g) = norm
                            && let Some((h, y)) = z.reduce_add_residual_norm(r, g)?
                        {
                            return Ok((h, Some(y)));
                        }
                        if let Some(y) = z.reduce_add_residual(r)? {
                            return Ok((y, None));
                        }
                    }
                    let y = Mapping::ReduceFromParallel.forward(&z)?;
                    match (b, residual) {
                        (Some(b), Some(r))
                            if x.dtype() == DType::F32 && r.dtype() == DType::F32 =>
                        {
                            return Ok((y.add_row_add(b, r)?, None));
                        }
                        (Some(b), _) => y.add_row(b)?,
                        (None, _) => y,
                    }
                }
            }
        };
        let y = y.cast(x.dtype())?;
        match residual {
            Some(r) => Ok((r.add(&y)?, None)),
            None => Ok((y, None)),
        }
    }
}

//! [`RowParallelLinear`]: rank r holds columns `W_r` of `W` `[out, in]` (a
//! slice of the inputs); the bias is replicated. Forward
//! `y = g(x_r W_rᵀ) + b`, the bias added once after the reduce: g is
//! [`Mapping::ReduceFromParallel`], or with sequence parallelism the
//! reduce-scatter along tokens with the bias on each rank's rows
//! ([`DTensor::reduce_scatter_add_row`]; with [`Overlap::Ring`],
//! [`DTensor::ring_linear_reduce_scatter`], fused with the product). Backward
//! is the tape's: `dW_r = dyᵀ x_r`, `db = Σ_rows dy` (from the gathered `dy`
//! with sequence parallelism: no extra all-reduce), `dx_r = dy W_r`.
//!
//! Mixed precision: an f16 input makes the layer compute in f16 — the f32
//! master weight is cast per call, GEMMs accumulate in f32, the partial sums
//! are reduced in f32 and `y` is rounded to f16 once after the bias; `dx` is
//! f16, `dW`, `db` stay f32.

use super::shared::{
    Overlap, Weights, check_input, check_overlap, linear_common, shard_master, split_is_plain,
};
use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::init::{Init, InitRng};
use crate::nn::parameter::Parameter;
use crate::nn::{Params, RMSNorm};
use crate::tensor::{DTensor, Mapping, MatmulOptions, Placement};

/// Settings of a [`RowParallelLinear`].
#[derive(Clone, Debug)]
pub struct RowParallelConfig {
    /// Input features (split over ranks).
    pub in_features: usize,
    /// Output features.
    pub out_features: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// The input is already `Shard(1)` (the output of a column layer); else it
    /// is replicated and scattered first.
    pub input_is_parallel: bool,
    /// Weight initialiser (the bias starts at zero).
    pub init: Init,
    /// Fused-weight stride along `in`.
    pub stride: usize,
    /// Inputs are split over ranks in whole units of this many (e.g.
    /// `head_dim`, matching the column layer before it). Default 1.
    pub shard_unit: usize,
    /// Sequence parallelism: the output is reduce-scattered along tokens
    /// (`Shard(0)`, the bias added to each rank's rows) instead of
    /// all-reduced; backward all-gathers dy. Needs `input_is_parallel`.
    pub sequence_parallel: bool,
    /// How the sequence-parallel reduce-scatter / gather runs (needs
    /// `sequence_parallel` for [`Overlap::Ring`]).
    pub overlap: Overlap,
}

impl RowParallelConfig {
    /// Defaults: bias on, input parallel, N(0, 0.02²), stride 1, no sequence
    /// parallelism, no overlap.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        RowParallelConfig {
            in_features,
            out_features,
            bias: true,
            input_is_parallel: true,
            init: Init::default(),
            stride: 1,
            shard_unit: 1,
            sequence_parallel: false,
            overlap: Overlap::None,
        }
    }
}

/// `Y = X Wᵀ + b` with `W` split along the input dimension.
#[derive(Debug, Params)]
pub struct RowParallelLinear {
    /// `[out, in]`, `Shard(1)`.
    pub weight: Parameter,
    /// `[out]`, `Replicate`.
    pub bias: Option<Parameter>,
    #[params(skip)]
    config: RowParallelConfig,
}

impl RowParallelLinear {
    /// A layer from `weights` (`new` or `from_master`), checked against `config`.
    fn build(mesh: &Mesh, config: RowParallelConfig, weights: Weights<'_>) -> Result<Self> {
        const OP: &str = "RowParallelLinear::new";
        check_overlap(OP, config.sequence_parallel, config.overlap)?;
        let (n, stride, unit) = (config.in_features, config.stride, config.shard_unit);
        if !config.input_is_parallel && !split_is_plain(mesh, n, stride, unit) {
            return Err(Error::invalid(
                OP,
                "input_is_parallel = false needs the inputs split plainly over ranks: \
                 shard_unit 1, and in_features a multiple of stride × ranks when stride > 1",
            ));
        }
        if config.sequence_parallel && !config.input_is_parallel {
            return Err(Error::invalid(
                OP,
                "sequence_parallel needs input_is_parallel = true (as in Megatron)",
            ));
        }
        let (weight, bias) = shard_master(
            OP,
            mesh,
            [config.out_features, config.in_features],
            (weights, config.bias),
            (Placement::Shard(1), Placement::Replicate),
            (config.stride, config.shard_unit),
        )?;
        Ok(RowParallelLinear {
            weight,
            bias,
            config,
        })
    }

    /// `x` `[tokens, in]` (`Shard(1)` if `input_is_parallel`, else
    /// `Replicate`) → `[tokens, out]`, `Replicate` (`Shard(0)`, tokens split,
    /// with `sequence_parallel`). Recorded on the tape: backward through the
    /// result leaves `dW`, `db` in the parameters' gradients and x's
    /// gradient placed like x.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        self.forward_with(x, None)
    }

    /// `residual + self.forward(x)` (a block's residual branch), with the
    /// bias and the residual added in one kernel after the all-reduce
    /// ([`DTensor::add_row_add`]: the two steps' bits, one pass over the
    /// output fewer) where the layer has a bias, reduces by all-reduce (no
    /// ring, no sequence parallelism) and x and `residual` are f32; the two
    /// steps otherwise. On one rank, decoding (nothing recorded, at most
    /// 8 rows), the small-M product adds both as it stores, bias or not.
    /// `residual` is shaped and placed like the output.
    pub fn forward_residual(&self, x: &DTensor, residual: &DTensor) -> Result<DTensor> {
        self.forward_with(x, Some(residual))
    }

    /// [`Self::forward`], plus `residual` where given ([`Self::forward_residual`]).
    pub(crate) fn forward_with(&self, x: &DTensor, residual: Option<&DTensor>) -> Result<DTensor> {
        Ok(self.forward_with_norm(x, residual, None)?.0)
    }

    /// [`Self::forward_with`], and `norm` of its result where the ranks
    /// share a device and add the residual in the all-reduce (no bias,
    /// decoding) and that device is a CPU adapter (`kernels::fold_norm`):
    /// the all-reduce's pass applies it too, with `norm.forward`'s bits.
    /// `None` where it did not: the caller norms.
    pub(crate) fn forward_with_norm(
        &self,
        x: &DTensor,
        residual: Option<&DTensor>,
        norm: Option<&RMSNorm>,
    ) -> Result<(DTensor, Option<DTensor>)> {
        const OP: &str = "RowParallelLinear::forward";
        check_input(OP, x, self.config.in_features, self.ring())?;
        // With one rank any placement is whole: the scatter only relabels it.
        let scatter = !self.config.input_is_parallel
            || (x.mesh().size() == 1 && x.placement() != Placement::Shard(1));
        let x = if scatter {
            Mapping::ScatterToParallel(1).forward(x)?
        } else {
            x.clone()
        };
        if x.placement() != Placement::Shard(1) {
            return Err(Error::invalid(
                OP,
                format!("input must be placed Shard(1), got {:?}", x.placement()),
            ));
        }
        let w = &self.weight.operand_for(x.dtype())?;
        let bias = self.bias.as_ref().map(|b| &b.value);
        if let Some(r) = residual
            && !self.ring()
            && !self.config.sequence_parallel
            && let Some(y) = x.linear_residual_one_rank(w, bias, r)?
        {
            // One rank: the bias and the residual in the product's store.
            return Ok((y, None));
        }
        let y = if self.ring() {
            // Each chunk's partial product is computed while the running sum travels.
            x.ring_linear_reduce_scatter(w, bias)?
        } else {
            // Partial sums in f32 whatever x's dtype: reduced, then rounded once.
            let opts = MatmulOptions {
                transpose_w: true,
                out_dtype: Some(DType::F32),
            };
            let z = x.matmul_with(w, opts)?;
            match (self.config.sequence_parallel, bias) {
                // The bias's gradient from the gathered dy: no extra all-reduce.
                (true, Some(b)) => z.reduce_scatter_add_row(b)?,
                (true, None) => Mapping::ReduceScatterToParallel(0).forward(&z)?,
                (false, b) => {
                    // No bias: the residual added in the all-reduce's pass,
                    // and the norm after it where one is given.
                    if let (None, Some(r)) = (b, residual)
                        && x.dtype() == DType::F32
                    {
                        let gamma = norm.map(|n| (&n.weight.value, n.config().eps));
                        if let Some(g) = gamma
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

linear_common!(RowParallelLinear, RowParallelConfig);

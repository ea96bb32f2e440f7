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
use crate::error::{Error, Result};
use crate::nn::Params;
use crate::nn::init::{Init, InitRng};
use crate::nn::lora::{Lora, LoraSplit, adaptable};
use crate::nn::parameter::Parameter;
use crate::shard::split_range_in_units;
use crate::tensor::{DTensor, Mapping, Placement, RowProduct, RowReduce};

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
#[derive(Clone, Debug, Params)]
#[params(adaptable)]
pub struct RowParallelLinear {
    /// `[out, in]`, `Shard(1)`.
    pub weight: Parameter,
    /// `[out]`, `Replicate`.
    pub bias: Option<Parameter>,
    /// A LoRA adapter ([`Decoder::add_lora`](crate::nn::Decoder::add_lora)).
    #[params(flatten)]
    lora: Option<Lora>,
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
            lora: None,
            config,
        })
    }

    /// `x` `[tokens, in]` (`Shard(1)` if `input_is_parallel`, else
    /// `Replicate`) → `[tokens, out]`, `Replicate` (`Shard(0)`, tokens split,
    /// with `sequence_parallel`). Recorded on the tape: backward through the
    /// result leaves `dW`, `db` in the parameters' gradients and x's
    /// gradient placed like x.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        self.product(x)?.resolve()
    }

    /// `residual + self.forward(x)` (a block's residual branch): the bias
    /// and the residual added in the fewest dispatches the placement allows,
    /// with the two steps' bits ([`RowProduct::finish`]). `residual` is
    /// shaped and placed like the output.
    pub fn forward_residual(&self, x: &DTensor, residual: &DTensor) -> Result<DTensor> {
        Ok(self.product(x)?.finish(Some(residual), None)?.0)
    }

    /// `x·Wᵀ` not yet summed over the ranks, with the bias and this layer's
    /// way of summing (all-reduce, reduce-scatter, ring): a decoder's
    /// residual stream finishes it with the residual and the norm that
    /// follow ([`RowProduct::finish`]). `x` is checked and scattered here.
    pub fn product(&self, x: &DTensor) -> Result<RowProduct> {
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
        let w = self.weight.operand_for(x.dtype())?;
        let reduce = match (self.ring(), self.config.sequence_parallel) {
            (true, _) => RowReduce::Ring,
            (false, true) => RowReduce::ReduceScatter,
            (false, false) => RowReduce::AllReduce,
        };
        // The adapter reads the input as it is split here (A follows it).
        let delta = match self.active_lora() {
            Some(lora) => Some(lora.row_delta(&x, reduce)?),
            None => None,
        };
        // A quantized weight's K is split in whole blocks, which the
        // input's split (whole heads) may not follow: re-split the input.
        // A float weight splits as its input must; a mismatch is an error.
        let x = if w.quant_type().is_some()
            && w.shard_unit() != x.shard_unit()
            && !same_split(&x, &w)
        {
            x.redistribute_in_units(Placement::Shard(1), w.shard_unit())?
        } else {
            x
        };
        let bias = self.bias.as_ref().map(|b| b.value.clone());
        let product = RowProduct::new(x, w, bias, reduce);
        Ok(match delta {
            Some(d) => product.with_addend(d),
            None => product,
        })
    }
}

linear_common!(RowParallelLinear, RowParallelConfig);
adaptable!(
    RowParallelLinear,
    |l| LoraSplit::Row(l.config.stride, l.config.shard_unit),
    |l| (l.config.in_features, l.config.out_features)
);

/// Whether `x`'s columns are split over the ranks as `w`'s (both `Shard(1)`).
fn same_split(x: &DTensor, w: &DTensor) -> bool {
    let (k, p) = (x.shape()[1], x.mesh().size());
    (0..p).all(|r| {
        split_range_in_units(k, p, r, x.shard_unit())
            == split_range_in_units(k, p, r, w.shard_unit())
    })
}

//! [`ColumnParallelLinear`]: rank r holds rows `W_r` of `W` `[out, in]` (a
//! slice of the outputs) and `b_r`. Forward `y_r = f(x) W_rᵀ + b_r`, output
//! `Shard(1)` (or `Replicate` with `gather_output`): f is
//! [`Mapping::CopyToParallel`], or with sequence parallelism
//! [`Mapping::AllGatherToParallel(0)`](Mapping::AllGatherToParallel) (with
//! [`Overlap::Ring`], [`DTensor::ring_gather_linear`], the gather fused with
//! the product). Backward is the tape's: `dW_r = dy_rᵀ x`,
//! `db_r = Σ_rows dy_r`, `dx = f's backward(dy_r W_r)`.
//!
//! Mixed precision: an f16 input makes the layer compute in f16 — the f32
//! master weight is cast per call, GEMMs accumulate in f32, `y` is f16; `dx`'s
//! partial sums are reduced in f32 and rounded once; `dW`, `db` stay f32.

use super::shared::{
    Overlap, Weights, check_input, check_overlap, linear_common, shard_master, split_is_plain,
};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::nn::Params;
use crate::nn::init::{Init, InitRng};
use crate::nn::lora::{Lora, LoraSplit, adaptable};
use crate::nn::parameter::Parameter;
use crate::tensor::{DTensor, Mapping, MatmulOptions, Placement};

/// Settings of a [`ColumnParallelLinear`].
#[derive(Clone, Debug)]
pub struct ColumnParallelConfig {
    /// Input features.
    pub in_features: usize,
    /// Output features (split over ranks).
    pub out_features: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
    /// All-gather the output so every rank holds all `out_features`.
    pub gather_output: bool,
    /// Do not add the bias; the caller adds [`ColumnParallelLinear::bias`]
    /// (its gradient then comes from where the caller uses it).
    pub skip_bias_add: bool,
    /// Weight initialiser (the bias starts at zero).
    pub init: Init,
    /// Fused-weight stride (e.g. 3 for QKV).
    pub stride: usize,
    /// Outputs are split over ranks in whole units of this many (e.g.
    /// `head_dim`, so each rank holds whole attention heads; the first ranks
    /// take one more unit and a rank may hold none). Default 1.
    pub shard_unit: usize,
    /// Sequence parallelism: the input `[tokens, in]` is `Shard(0)` (tokens
    /// split); forward all-gathers it, backward reduce-scatters dx (placed
    /// `Shard(0)`) instead of all-reducing it.
    pub sequence_parallel: bool,
    /// How the sequence-parallel gather / reduce-scatter runs (needs
    /// `sequence_parallel` for [`Overlap::Ring`]).
    pub overlap: Overlap,
}

impl ColumnParallelConfig {
    /// Defaults: bias on, no gather, bias added, N(0, 0.02²), stride 1, no
    /// sequence parallelism, no overlap.
    pub fn new(in_features: usize, out_features: usize) -> Self {
        ColumnParallelConfig {
            in_features,
            out_features,
            bias: true,
            gather_output: false,
            skip_bias_add: false,
            init: Init::default(),
            stride: 1,
            shard_unit: 1,
            sequence_parallel: false,
            overlap: Overlap::None,
        }
    }
}

/// `Y = X Wᵀ + b` with `W` split along the output dimension.
#[derive(Clone, Debug, Params)]
#[params(adaptable)]
pub struct ColumnParallelLinear {
    /// `[out, in]`, `Shard(0)`.
    pub weight: Parameter,
    /// `[out]`, `Shard(0)`.
    pub bias: Option<Parameter>,
    /// A LoRA adapter ([`Decoder::add_lora`](crate::nn::Decoder::add_lora)).
    #[params(flatten)]
    lora: Option<Lora>,
    #[params(skip)]
    config: ColumnParallelConfig,
}

impl ColumnParallelLinear {
    /// A layer from `weights` (`new` or `from_master`), checked against `config`.
    fn build(mesh: &Mesh, config: ColumnParallelConfig, weights: Weights<'_>) -> Result<Self> {
        const OP: &str = "ColumnParallelLinear::new";
        check_overlap(OP, config.sequence_parallel, config.overlap)?;
        let (n, stride, unit) = (config.out_features, config.stride, config.shard_unit);
        if config.gather_output && !split_is_plain(mesh, n, stride, unit) {
            return Err(Error::invalid(
                OP,
                "gather_output needs the outputs split plainly over ranks: shard_unit 1, and \
                 out_features a multiple of stride × ranks when stride > 1",
            ));
        }
        let (weight, bias) = shard_master(
            OP,
            mesh,
            [config.out_features, config.in_features],
            (weights, config.bias),
            (Placement::Shard(0), Placement::Shard(0)),
            (config.stride, config.shard_unit),
        )?;
        Ok(ColumnParallelLinear {
            weight,
            bias,
            lora: None,
            config,
        })
    }

    /// `x` `[tokens, in]` replicated (`Shard(0)` with `sequence_parallel`)
    /// → `[tokens, out]`, `Shard(1)` (or `Replicate` with `gather_output`),
    /// in x's dtype (f32, or f16: see the module docs). Recorded on the tape:
    /// backward through the result leaves `dW`, `db` in the parameters'
    /// gradients and x's gradient placed like x.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        self.forward_with(x, None)
    }

    /// `act(self.forward(x))` (a feed-forward's first product): the same
    /// bits, with the activation applied in the product's store where
    /// nothing is recorded ([`DTensor::linear_activation`]: decoding).
    pub fn forward_activation(&self, x: &DTensor, act: Activation) -> Result<DTensor> {
        self.forward_with(x, Some(act))
    }

    fn forward_with(&self, x: &DTensor, act: Option<Activation>) -> Result<DTensor> {
        const OP: &str = "ColumnParallelLinear::forward";
        check_input(OP, x, self.config.in_features, self.ring())?;
        let bias = match (&self.bias, self.config.skip_bias_add) {
            (Some(b), false) => Some(&b.value),
            _ => None,
        };
        let w = &self.weight.operand_for(x.dtype())?;
        // With one rank any placement is whole: the gather only relabels it.
        let gather = self.config.sequence_parallel
            || (x.mesh().size() == 1 && x.placement() != Placement::Replicate);
        let f = if gather {
            Mapping::AllGatherToParallel(0)
        } else {
            Mapping::CopyToParallel
        };
        let y = if let Some(lora) = self.active_lora() {
            // The adapter reads the gathered input too: no fused ring.
            let xg = f.forward(x)?;
            xg.linear(w, bias, MatmulOptions::default())?
                .add(&lora.column_delta(&xg)?)?
        } else if self.ring() {
            // Each arriving token chunk is multiplied while the next travels.
            x.ring_gather_linear(w, bias)?
        } else {
            let opts = MatmulOptions {
                transpose_w: true,
                ..Default::default()
            };
            match act {
                Some(act) if !self.config.gather_output => {
                    return f.forward(x)?.linear_activation(w, bias, act, opts);
                }
                _ => f.forward(x)?.linear(w, bias, opts)?,
            }
        };
        let y = if self.config.gather_output {
            Mapping::GatherFromParallel(1).forward(&y)?
        } else {
            y
        };
        match act {
            Some(act) => y.activation(act),
            None => Ok(y),
        }
    }
}

impl ColumnParallelLinear {
    /// `xg·W_rᵀ + b_r` of an input already placed for the product (what
    /// [`Mapping::CopyToParallel`] or the sequence-parallel
    /// [`Mapping::AllGatherToParallel`] gives), without this layer's own
    /// mapping: several column products of one input (SwiGLU's gate and up,
    /// attention's q, k and v) then share one mapping, so backward reduces
    /// their input gradients once. Output `Shard(1)`; `gather_output` and
    /// the ring are not applied.
    pub fn forward_mapped(&self, xg: &DTensor) -> Result<DTensor> {
        let (w, bias) = self.mapped_operands(xg)?;
        let y = xg.linear(&w, bias.as_ref(), MatmulOptions::default())?;
        self.adapted(xg, y)
    }

    /// `y` (this layer's product of the mapped input `xg`) plus the
    /// adapter's, where one is on.
    pub(crate) fn adapted(&self, xg: &DTensor, y: DTensor) -> Result<DTensor> {
        match self.active_lora() {
            Some(lora) => y.add(&lora.column_delta(xg)?),
            None => Ok(y),
        }
    }

    /// The weight and bias [`Self::forward_mapped`] multiplies `xg` by
    /// (`xg.linear(w, bias)`), after its checks of `xg`: for
    /// [`DTensor::linears`], several layers of one input together.
    pub(crate) fn mapped_operands(&self, xg: &DTensor) -> Result<(DTensor, Option<DTensor>)> {
        const OP: &str = "ColumnParallelLinear::forward_mapped";
        check_input(OP, xg, self.config.in_features, false)?;
        let bias = match (&self.bias, self.config.skip_bias_add) {
            (Some(b), false) => Some(b.value.clone()),
            _ => None,
        };
        Ok((self.weight.operand_for(xg.dtype())?, bias))
    }
}

linear_common!(ColumnParallelLinear, ColumnParallelConfig);
adaptable!(
    ColumnParallelLinear,
    |l| LoraSplit::Column(l.config.stride, l.config.shard_unit),
    |l| (l.config.in_features, l.config.out_features)
);

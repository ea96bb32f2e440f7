//! [`GatedMlp`]: the Llama family's SwiGLU feed-forward,
//! `down(act(gate(x)) ⊙ up(x))` (`act` = SiLU), with `gate_proj` and
//! `up_proj` column-parallel (rank r holds rows of each) and `down_proj`
//! row-parallel. Both column products share one input mapping, so forward
//! communicates once (in `down_proj`: an all-reduce, or a reduce-scatter
//! with sequence parallelism) and backward once (the input's gradient: an
//! all-reduce, or a reduce-scatter). Names follow Hugging Face's
//! (`gate_proj`, `up_proj`, `down_proj`), so checkpoints load by name.

use super::Params;
use super::init::{Init, InitRng};
use super::linear::{
    ColumnParallelConfig, ColumnParallelLinear, RowParallelConfig, RowParallelLinear,
};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::tensor::{DTensor, Mapping, MatmulOptions, RowProduct};

/// Settings of a [`GatedMlp`].
#[derive(Clone, Copy, Debug)]
pub struct GatedMlpConfig {
    /// Model width.
    pub hidden: usize,
    /// Feed-forward width (`intermediate_size`).
    pub ffn: usize,
    /// Whether the three projections have biases (Llama's `mlp_bias`).
    pub bias: bool,
    /// The gate's activation (SiLU for SwiGLU).
    pub activation: Activation,
    /// Initialiser of `gate_proj` and `up_proj`.
    pub init: Init,
    /// Initialiser of `down_proj`.
    pub proj_init: Init,
    /// Sequence parallelism: input and output `Shard(0)` along tokens.
    pub sequence_parallel: bool,
}

impl GatedMlpConfig {
    /// SwiGLU without biases, N(0, 0.02²), no sequence parallelism.
    pub fn new(hidden: usize, ffn: usize) -> Self {
        GatedMlpConfig {
            hidden,
            ffn,
            bias: false,
            activation: Activation::Silu,
            init: Init::default(),
            proj_init: Init::default(),
            sequence_parallel: false,
        }
    }
}

/// `down(act(gate(x)) ⊙ up(x))`, tensor-parallel over the feed-forward width.
#[derive(Clone, Debug, Params)]
pub struct GatedMlp {
    /// `[ffn, hidden]`, column-parallel.
    pub gate_proj: ColumnParallelLinear,
    /// `[ffn, hidden]`, column-parallel.
    pub up_proj: ColumnParallelLinear,
    /// `[hidden, ffn]`, row-parallel.
    pub down_proj: RowParallelLinear,
    #[params(skip)]
    config: GatedMlpConfig,
}

impl GatedMlp {
    /// A layer initialised from `rng` (gate, up, then down).
    pub fn new(mesh: &Mesh, config: GatedMlpConfig, rng: &mut InitRng) -> Result<Self> {
        const OP: &str = "GatedMlp::new";
        if config.hidden == 0 || config.ffn == 0 {
            return Err(Error::invalid(OP, "hidden and ffn must be at least 1"));
        }
        let column = |rng: &mut InitRng| {
            let mut c = ColumnParallelConfig::new(config.hidden, config.ffn);
            (c.bias, c.init) = (config.bias, config.init);
            ColumnParallelLinear::new(mesh, c, rng)
        };
        let gate_proj = column(rng)?;
        let up_proj = column(rng)?;
        let mut down = RowParallelConfig::new(config.ffn, config.hidden);
        (down.bias, down.init) = (config.bias, config.proj_init);
        down.sequence_parallel = config.sequence_parallel;
        Ok(GatedMlp {
            gate_proj,
            up_proj,
            down_proj: RowParallelLinear::new(mesh, down, rng)?,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &GatedMlpConfig {
        &self.config
    }

    /// `x` `[tokens, hidden]` (`Replicate`, or `Shard(0)` with sequence
    /// parallelism) → the same shape and placement.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        self.product(x)?.resolve()
    }

    /// `residual + self.forward(x)` (a block's residual branch), added by
    /// `down_proj`'s epilogue ([`RowProduct::finish`]: the same bits).
    pub fn forward_residual(&self, x: &DTensor, residual: &DTensor) -> Result<DTensor> {
        Ok(self.product(x)?.finish(Some(residual), None)?.0)
    }

    /// [`Self::forward`] with `down_proj`'s product not yet summed over the
    /// ranks: the caller chooses its epilogue ([`RowProduct::finish`]).
    pub fn product(&self, x: &DTensor) -> Result<RowProduct> {
        self.down_proj.product(&self.hidden(x)?)
    }

    /// The gated hidden activations, `act(x·gateᵀ) ⊙ x·upᵀ`.
    fn hidden(&self, x: &DTensor) -> Result<DTensor> {
        let f = if self.config.sequence_parallel {
            Mapping::AllGatherToParallel(0)
        } else {
            Mapping::CopyToParallel
        };
        let xg = f.forward(x)?;
        // Both in one pass over the weights when decoding, else up first
        // and the gate's product multiplying by it as it stores.
        let (gate, gate_bias) = self.gate_proj.mapped_operands(&xg)?;
        let (up, up_bias) = self.up_proj.mapped_operands(&xg)?;
        let act = self.config.activation;
        if self.gate_proj.active_lora().is_some() || self.up_proj.active_lora().is_some() {
            // Adapters add to each product before the gate: unfused.
            let gate = xg.linear(&gate, gate_bias.as_ref(), MatmulOptions::default())?;
            let up = xg.linear(&up, up_bias.as_ref(), MatmulOptions::default())?;
            let gate = self.gate_proj.adapted(&xg, gate)?;
            let up = self.up_proj.adapted(&xg, up)?;
            return gate.activation(act)?.mul(&up);
        }
        xg.linear_gated((&gate, gate_bias.as_ref()), (&up, up_bias.as_ref()), act)
    }
}

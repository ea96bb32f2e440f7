//! [`ParallelMlp`]: the transformer's feed-forward pair, `c_fc`
//! (column-parallel, `hidden → ffn`, no gather) → activation on each rank's
//! slice → `c_proj` (row-parallel, `ffn → hidden`). One all-reduce forward
//! (in `c_proj`), one backward (in `c_fc`); with sequence parallelism the
//! all-gather / reduce-scatter pair instead.

use super::Params;
use super::init::{Init, InitRng};
use super::linear::{
    ColumnParallelConfig, ColumnParallelLinear, RowParallelConfig, RowParallelLinear,
};
use crate::device::Mesh;
use crate::error::Result;
use crate::kernels::Activation;
use crate::tensor::{DTensor, RowProduct};

/// Settings of a [`ParallelMlp`].
#[derive(Clone, Copy, Debug)]
pub struct MlpConfig {
    /// Model width.
    pub hidden: usize,
    /// Inner width (split over ranks; need not divide).
    pub ffn: usize,
    /// The activation between the two layers.
    pub activation: Activation,
    /// Whether both layers have biases.
    pub bias: bool,
    /// Initialiser of `c_fc`'s weight.
    pub init: Init,
    /// Initialiser of `c_proj`'s weight (GPT-2 scales it by 1/√(2·layers)).
    pub proj_init: Init,
    /// Sequence parallelism: input and output `Shard(0)` (tokens).
    pub sequence_parallel: bool,
}

impl MlpConfig {
    /// GELU, biases on, N(0, 0.02²) weights, no sequence parallelism.
    pub fn new(hidden: usize, ffn: usize) -> Self {
        MlpConfig {
            hidden,
            ffn,
            activation: Activation::Gelu,
            bias: true,
            init: Init::default(),
            proj_init: Init::default(),
            sequence_parallel: false,
        }
    }
}

/// Column → activation → row.
#[derive(Clone, Debug, Params)]
pub struct ParallelMlp {
    /// Up projection, column-parallel.
    pub c_fc: ColumnParallelLinear,
    /// Down projection, row-parallel.
    pub c_proj: RowParallelLinear,
    #[params(skip)]
    config: MlpConfig,
}

impl ParallelMlp {
    /// A layer initialised from `rng` (c_fc first, then c_proj).
    pub fn new(mesh: &Mesh, config: MlpConfig, rng: &mut InitRng) -> Result<Self> {
        let mut c_fc = ColumnParallelConfig::new(config.hidden, config.ffn);
        (c_fc.bias, c_fc.init) = (config.bias, config.init);
        c_fc.sequence_parallel = config.sequence_parallel;
        let mut c_proj = RowParallelConfig::new(config.ffn, config.hidden);
        (c_proj.bias, c_proj.init) = (config.bias, config.proj_init);
        c_proj.sequence_parallel = config.sequence_parallel;
        Ok(ParallelMlp {
            c_fc: ColumnParallelLinear::new(mesh, c_fc, rng)?,
            c_proj: RowParallelLinear::new(mesh, c_proj, rng)?,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &MlpConfig {
        &self.config
    }

    /// `x` `[tokens, hidden]` (`Replicate`, or `Shard(0)` with sequence
    /// parallelism) → the same shape and placement.
    pub fn forward(&self, x: &DTensor) -> Result<DTensor> {
        self.product(x)?.resolve()
    }

    /// [`Self::forward`] with `c_proj`'s product not yet summed over the
    /// ranks: the caller chooses its epilogue ([`RowProduct::finish`]).
    pub fn product(&self, x: &DTensor) -> Result<RowProduct> {
        self.c_proj.product(&self.hidden(x)?)
    }

    /// `residual + self.forward(x)`, the bias and the residual added in one
    /// kernel where `c_proj` can ([`RowParallelLinear::forward_residual`]).
    pub fn forward_residual(&self, x: &DTensor, residual: &DTensor) -> Result<DTensor> {
        self.c_proj.forward_residual(&self.hidden(x)?, residual)
    }

    fn hidden(&self, x: &DTensor) -> Result<DTensor> {
        self.c_fc.forward_activation(x, self.config.activation)
    }
}

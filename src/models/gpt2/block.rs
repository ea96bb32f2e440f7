//! [`TransformerBlock`]: GPT-2's pre-LN block,
//! `h = x + attn(ln_1(x))`, then `y = h + mlp(ln_2(h))`.
//!
//! Plain: `x` and `y` are `Replicate`; two all-reduces forward (in
//! `attn.c_proj` and `mlp.c_proj`) and two backward (in `attn.c_attn` and
//! `mlp.c_fc`). Sequence-parallel: `x`, `y`, the norms and the residuals are
//! `Shard(0)` along tokens; the column layers all-gather the tokens and the
//! row layers reduce-scatter them (two pairs each way), and the norms'
//! parameter gradients are all-reduced before an optimiser uses them.
//! Residual dropout (off by default) draws masks from the logical element
//! index, so a block with dropout on gives the same numbers at any P.

use super::attention::{AttentionConfig, ParallelSelfAttention};
use crate::device::Mesh;
use crate::error::Result;
use crate::kernels::Activation;
use crate::nn::{
    Dropout, DropoutConfig, Init, InitRng, KvCache, LayerNorm, MlpConfig, NormConfig, ParallelMlp,
    Params,
};
use crate::tensor::DTensor;

/// Settings of a [`TransformerBlock`].
#[derive(Clone, Copy, Debug)]
pub struct BlockConfig {
    /// Model width.
    pub hidden: usize,
    /// Attention heads (need not divide by the world size).
    pub heads: usize,
    /// Feed-forward width (GPT-2: 4 × hidden).
    pub ffn: usize,
    /// The feed-forward activation.
    pub activation: Activation,
    /// LayerNorm epsilon.
    pub eps: f32,
    /// Weight initialiser.
    pub init: Init,
    /// Initialiser of both output projections (GPT-2: std 0.02/√(2·layers)).
    pub proj_init: Init,
    /// Sequence parallelism (see the module docs).
    pub sequence_parallel: bool,
    /// Residual dropout after attention and after the MLP (GPT-2's
    /// `resid_pdrop`); 0 turns it off.
    pub dropout: f32,
    /// Seed of the dropout masks.
    pub dropout_seed: u64,
    /// Dropout on the attention probabilities (GPT-2's `attn_pdrop`); 0
    /// turns it off.
    pub attn_dropout: f32,
    /// Dropout layer id of the attention branch; the MLP branch uses the
    /// next, the attention probabilities the one after.
    pub dropout_layer: u32,
}

impl BlockConfig {
    /// GPT-2 defaults: ffn 4·hidden, GELU, eps 1e-5, N(0, 0.02²).
    pub fn new(hidden: usize, heads: usize) -> Self {
        BlockConfig {
            hidden,
            heads,
            ffn: 4 * hidden,
            activation: Activation::Gelu,
            eps: 1e-5,
            init: Init::default(),
            proj_init: Init::default(),
            sequence_parallel: false,
            dropout: 0.0,
            dropout_seed: 0,
            attn_dropout: 0.0,
            dropout_layer: 0,
        }
    }
}

/// Keys a block draws from its [`InitRng`]: one per weight (`c_attn`,
/// `attn.c_proj`, `c_fc`, `mlp.c_proj`); biases and norms start constant.
pub(super) const INIT_KEYS: u64 = 4;

/// Pre-LN attention + MLP with residuals.
#[derive(Debug, Params)]
pub struct TransformerBlock {
    /// Norm before attention.
    pub ln_1: LayerNorm,
    /// Self-attention, heads split over ranks.
    pub attn: ParallelSelfAttention,
    /// Norm before the MLP.
    pub ln_2: LayerNorm,
    /// Feed-forward pair.
    pub mlp: ParallelMlp,
    /// Dropout of the attention branch.
    pub drop_attn: Dropout,
    /// Dropout of the MLP branch.
    pub drop_mlp: Dropout,
    #[params(skip)]
    config: BlockConfig,
}

impl TransformerBlock {
    /// A block initialised from `rng` (attention, then MLP).
    pub fn new(mesh: &Mesh, config: BlockConfig, rng: &mut InitRng) -> Result<Self> {
        let sp = config.sequence_parallel;
        let mut norm = NormConfig::new(config.hidden);
        norm.eps = config.eps;
        let mut attn = AttentionConfig::new(config.hidden, config.heads);
        (attn.init, attn.proj_init, attn.sequence_parallel) = (config.init, config.proj_init, sp);
        (attn.dropout, attn.dropout_seed) = (config.attn_dropout, config.dropout_seed);
        attn.dropout_layer = config.dropout_layer + 2;
        let mut mlp = MlpConfig::new(config.hidden, config.ffn);
        (mlp.init, mlp.proj_init, mlp.sequence_parallel) = (config.init, config.proj_init, sp);
        mlp.activation = config.activation;
        let drop = |layer| {
            Dropout::new(DropoutConfig {
                p: config.dropout,
                seed: config.dropout_seed,
                layer,
            })
        };
        Ok(TransformerBlock {
            ln_1: LayerNorm::new(mesh, norm)?,
            attn: ParallelSelfAttention::new(mesh, attn, rng)?,
            ln_2: LayerNorm::new(mesh, norm)?,
            mlp: ParallelMlp::new(mesh, mlp, rng)?,
            drop_attn: drop(config.dropout_layer)?,
            drop_mlp: drop(config.dropout_layer + 1)?,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &BlockConfig {
        &self.config
    }

    /// `x` `[batch·seq, hidden]` → the same shape and placement.
    pub fn forward(&self, x: &DTensor, seq: usize) -> Result<DTensor> {
        self.branches(x, |n, r| self.attn.forward_with(n, seq, r))
    }

    /// `h = x + drop(attn(ln_1(x)))`, then `h + drop(mlp(ln_2(h)))`, the
    /// row-parallel biases and the residuals added in one kernel each when
    /// dropout is off. `attn(n, r)` is the attention of `n`, plus `r` when
    /// given.
    fn branches(
        &self,
        x: &DTensor,
        attn: impl FnOnce(&DTensor, Option<&DTensor>) -> Result<DTensor>,
    ) -> Result<DTensor> {
        let n1 = self.ln_1.forward(x)?;
        let h = if identity(&self.drop_attn) {
            attn(&n1, Some(x))?
        } else {
            x.add(&self.drop_attn.forward(&attn(&n1, None)?)?)?
        };
        let n2 = self.ln_2.forward(&h)?;
        if identity(&self.drop_mlp) {
            self.mlp.forward_residual(&n2, &h)
        } else {
            h.add(&self.drop_mlp.forward(&self.mlp.forward(&n2)?)?)
        }
    }

    /// Training mode (dropout on) or evaluation mode (off), and the step
    /// that keys the dropout masks.
    pub fn set_mode(&mut self, training: bool, step: u64) {
        for d in [&mut self.drop_attn, &mut self.drop_mlp] {
            if training {
                d.train()
            } else {
                d.eval()
            }
            d.set_step(step);
        }
        self.attn.set_mode(training, step);
    }

    /// One step of cached decoding of one sequence: `x` `[new, hidden]`
    /// holds the new tokens (see [`ParallelSelfAttention::decode`]).
    pub fn decode(&self, x: &DTensor, cache: &mut KvCache) -> Result<DTensor> {
        self.branches(x, |n, r| self.attn.decode_with(n, cache, r))
    }
}

/// Whether `d` passes its input through (evaluation mode, or p = 0).
fn identity(d: &Dropout) -> bool {
    !d.is_training() || d.config().p == 0.0
}

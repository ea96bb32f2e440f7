//! [`ParallelSelfAttention`]: causal multi-head self-attention with the heads
//! split over ranks (Megatron's `ParallelAttention`).
//!
//! `c_attn` is a [`ColumnParallelLinear`] `[3·H·D, hidden]` whose rows are
//! `[q; k; v]` (each `H·D`, heads contiguous inside), sharded with stride 3
//! and `shard_unit = D`, so rank r holds whole heads: the first `H % P`
//! ranks take one more, and a rank may hold none (3 heads on 4 ranks). Each
//! rank runs softmax(q kᵀ / √D, causal) v on its own heads, with no
//! communication, and `c_proj` (a [`RowParallelLinear`] split the same way)
//! sums the heads' contributions: one all-reduce forward (in `c_proj`), one
//! backward (in `c_attn`). With sequence parallelism those become the
//! all-gather / reduce-scatter pair of the linear layers.
//!
//! Activations are `[tokens, hidden]` with tokens batch-major
//! (`token = b · seq + t`); `forward` takes the sequence length. The layer
//! is forward code: the attention of each rank's heads is
//! [`DTensor::causal_attention`], whose VJP the tape runs.
//!
//! Dropout on the attention probabilities (`AttentionConfig::dropout`,
//! GPT-2's `attn_pdrop`, off by default) keys its mask on the global head
//! index, so it is the same at any P; [`ParallelSelfAttention::set_mode`]
//! turns it on for training at a step.

use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::PhiloxKey;
use crate::nn::{
    ColumnParallelConfig, ColumnParallelLinear, Init, InitRng, KvCache, Params, RowParallelConfig,
    RowParallelLinear,
};
use crate::shard::split_range;
use crate::tensor::{AttentionDropout, DTensor};

/// Settings of a [`ParallelSelfAttention`].
#[derive(Clone, Debug)]
pub struct AttentionConfig {
    /// Model width (`hidden = heads × head_dim` is not required).
    pub hidden: usize,
    /// Attention heads (need not divide by the world size).
    pub heads: usize,
    /// Width of each head.
    pub head_dim: usize,
    /// Whether `c_attn` and `c_proj` have biases.
    pub bias: bool,
    /// Initialiser of both weights (biases start at zero).
    pub init: Init,
    /// Initialiser of `c_proj`'s weight (GPT-2 scales it by 1/√(2·layers)).
    pub proj_init: Init,
    /// Sequence parallelism: the input and output are `Shard(0)` (tokens).
    pub sequence_parallel: bool,
    /// Dropout on the attention probabilities in training mode; 0 is off.
    pub dropout: f32,
    /// Seed of its masks.
    pub dropout_seed: u64,
    /// Its layer id (distinct from every other dropout of the model).
    pub dropout_layer: u32,
}

impl AttentionConfig {
    /// `heads` heads of `hidden / heads` each (`hidden` must divide), biases
    /// on, N(0, 0.02²) weights, no sequence parallelism.
    pub fn new(hidden: usize, heads: usize) -> Self {
        AttentionConfig {
            hidden,
            heads,
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            bias: true,
            init: Init::default(),
            proj_init: Init::default(),
            sequence_parallel: false,
            dropout: 0.0,
            dropout_seed: 0,
            dropout_layer: 0,
        }
    }
}

/// Causal self-attention with whole heads on each rank.
#[derive(Debug, Params)]
pub struct ParallelSelfAttention {
    /// Fused `[q; k; v]` projection, column-parallel by heads.
    pub c_attn: ColumnParallelLinear,
    /// Output projection, row-parallel by heads.
    pub c_proj: RowParallelLinear,
    #[params(skip)]
    config: AttentionConfig,
    #[params(skip)]
    training: bool,
    #[params(skip)]
    step: u64,
}

impl ParallelSelfAttention {
    /// A layer initialised from `rng` (c_attn first, then c_proj).
    pub fn new(mesh: &Mesh, config: AttentionConfig, rng: &mut InitRng) -> Result<Self> {
        const OP: &str = "ParallelSelfAttention::new";
        let (h, heads, d) = (config.hidden, config.heads, config.head_dim);
        if !(0.0..1.0).contains(&config.dropout) {
            return Err(Error::invalid(
                OP,
                format!("dropout {} must lie in [0, 1)", config.dropout),
            ));
        }
        if heads == 0 || d == 0 || h == 0 {
            return Err(Error::invalid(
                OP,
                format!("hidden {h}, heads {heads}, head_dim {d}: all must be at least 1"),
            ));
        }
        let mut c_attn = ColumnParallelConfig::new(h, 3 * heads * d);
        c_attn.bias = config.bias;
        c_attn.init = config.init;
        (c_attn.stride, c_attn.shard_unit) = (3, d);
        c_attn.sequence_parallel = config.sequence_parallel;
        let mut c_proj = RowParallelConfig::new(heads * d, h);
        c_proj.bias = config.bias;
        c_proj.init = config.proj_init;
        c_proj.shard_unit = d;
        c_proj.sequence_parallel = config.sequence_parallel;
        Ok(ParallelSelfAttention {
            c_attn: ColumnParallelLinear::new(mesh, c_attn, rng)?,
            c_proj: RowParallelLinear::new(mesh, c_proj, rng)?,
            config,
            training: true,
            step: 0,
        })
    }

    /// Training mode (probability dropout on, masks keyed on `step`) or
    /// evaluation mode (off).
    pub fn set_mode(&mut self, training: bool, step: u64) {
        (self.training, self.step) = (training, step);
    }

    /// The probability dropout of this step, in training mode.
    fn probs_dropout(&self) -> Option<AttentionDropout> {
        let on = self.training && self.config.dropout > 0.0;
        on.then_some(AttentionDropout {
            p: self.config.dropout,
            key: PhiloxKey {
                seed: self.config.dropout_seed,
                step: self.step,
                layer: self.config.dropout_layer,
            },
        })
    }

    /// The settings.
    pub fn config(&self) -> &AttentionConfig {
        &self.config
    }

    /// Heads rank `r` of `p` holds.
    pub fn local_heads(&self, p: usize, r: usize) -> std::ops::Range<usize> {
        split_range(self.config.heads, p, r)
    }

    /// `x` `[batch·seq, hidden]` (`Replicate`, or `Shard(0)` with sequence
    /// parallelism) → the same shape and placement: `c_attn`, attention of
    /// each rank's heads ([`DTensor::causal_attention`], on the f32
    /// widening of f16 activations), `c_proj`.
    pub fn forward(&self, x: &DTensor, seq: usize) -> Result<DTensor> {
        self.forward_with(x, seq, None)
    }

    /// [`Self::forward`], plus `residual` where given: `c_proj`'s bias and
    /// the residual then land in one kernel
    /// ([`RowParallelLinear::forward_residual`]).
    pub(crate) fn forward_with(
        &self,
        x: &DTensor,
        seq: usize,
        residual: Option<&DTensor>,
    ) -> Result<DTensor> {
        let (heads, d) = (self.config.heads, self.config.head_dim);
        let qkv = self.c_attn.forward(x)?.cast(DType::F32)?;
        let out = qkv.causal_attention(seq, heads, d, self.probs_dropout())?;
        self.c_proj.forward_with(&out.cast(x.dtype())?, residual)
    }

    /// One step of cached decoding of a single sequence: `x` `[new, hidden]`
    /// (`Replicate`) holds the new tokens, `cache` the keys and values of
    /// the earlier positions (each rank its own heads; start from
    /// [`KvCache::default`]). Returns the new tokens' output, equal to the
    /// matching rows of [`Self::forward`] over the whole sequence, and grows
    /// the cache. Communicates only in `c_proj` (one all-reduce). Not
    /// differentiable: decode inside [`no_grad`](crate::no_grad).
    pub fn decode(&self, x: &DTensor, cache: &mut KvCache) -> Result<DTensor> {
        self.decode_with(x, cache, None)
    }

    /// [`Self::decode`], plus `residual` where given.
    pub(crate) fn decode_with(
        &self,
        x: &DTensor,
        cache: &mut KvCache,
        residual: Option<&DTensor>,
    ) -> Result<DTensor> {
        const OP: &str = "ParallelSelfAttention::decode";
        if self.config.sequence_parallel {
            return Err(Error::invalid(
                OP,
                "decode a model built without sequence_parallel (decoding has one token per step)",
            ));
        }
        let (heads, d) = (self.config.heads, self.config.head_dim);
        let qkv = self.c_attn.forward(x)?.cast(DType::F32)?;
        let (out, grown) = qkv.attention_decode(cache.kv.as_ref(), heads, d)?;
        let y = self.c_proj.forward_with(&out.cast(x.dtype())?, residual)?;
        cache.len += x.shape()[0];
        cache.kv = Some(grown);
        Ok(y)
    }
}

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
//! (`token = b · seq + t`); `forward` takes the sequence length.
//!
//! Dropout on the attention probabilities (`AttentionConfig::dropout`,
//! GPT-2's `attn_pdrop`, off by default) keys its mask on the global head
//! index, so it is the same at any P; [`ParallelSelfAttention::set_mode`]
//! turns it on for training at a step.

use super::Params;
use super::init::{Init, InitRng};
use super::linear::{
    ColumnParallelConfig, ColumnParallelLinear, RowParallelConfig, RowParallelLinear,
};
use crate::device::{LocalTensor, Mesh};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::PhiloxKey;
use crate::kernels::attention::{
    AttentionShape, HeadWindow, ProbsDropout, attention_backward_with, attention_decode,
    attention_forward_with,
};
use crate::shard::split_range;
use crate::tensor::{DTensor, Placement};

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

/// What forward keeps for backward.
#[derive(Debug)]
struct Saved {
    qkv: DTensor,
    /// Per rank: the softmax probabilities `[batch, local heads, seq, seq]`.
    probs: Vec<LocalTensor>,
    seq: usize,
    /// The probabilities' dropout key, if forward dropped.
    dropout: Option<PhiloxKey>,
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
    saved: Option<Saved>,
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
            saved: None,
            training: true,
            step: 0,
        })
    }

    /// Training mode (probability dropout on, masks keyed on `step`) or
    /// evaluation mode (off).
    pub fn set_mode(&mut self, training: bool, step: u64) {
        (self.training, self.step) = (training, step);
    }

    /// The probability dropout of rank `r` of `p` under `key`.
    fn probs_dropout(&self, key: Option<PhiloxKey>, p: usize, r: usize) -> Option<ProbsDropout> {
        key.map(|key| ProbsDropout {
            p: self.config.dropout,
            key,
            heads: HeadWindow {
                start: self.local_heads(p, r).start,
                total: self.config.heads,
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
    /// parallelism) → the same shape and placement.
    pub fn forward(&mut self, x: &DTensor, seq: usize) -> Result<DTensor> {
        const OP: &str = "ParallelSelfAttention::forward";
        let tokens = x.shape().first().copied().unwrap_or(0);
        if seq == 0 || !tokens.is_multiple_of(seq) {
            return Err(Error::invalid(
                OP,
                format!("{tokens} tokens are not a whole number of sequences of {seq}"),
            ));
        }
        // f16 activations: the attention kernels run on the f32 widening.
        let qkv = self.c_attn.forward(x)?.cast(DType::F32)?;
        let (heads, d, p) = (self.config.heads, self.config.head_dim, qkv.mesh().size());
        let key = (self.training && self.config.dropout > 0.0).then_some(PhiloxKey {
            seed: self.config.dropout_seed,
            step: self.step,
            layer: self.config.dropout_layer,
        });
        let mut outs = Vec::with_capacity(p);
        let mut probs = Vec::with_capacity(p);
        for (r, local) in qkv.shards().iter().enumerate() {
            let h = split_range(heads, p, r).len();
            let shape = AttentionShape::new(tokens / seq, seq, h, d);
            let a = attention_forward_with(local, shape, self.probs_dropout(key, p, r))?;
            outs.push(a.out);
            probs.push(a.probs);
        }
        let out = DTensor::from_shards_in_units(
            qkv.mesh(),
            outs,
            &[tokens, heads * d],
            Placement::Shard(1),
            d,
        )?;
        let y = self.c_proj.forward(&out.cast(x.dtype())?)?;
        self.saved = Some(Saved {
            qkv,
            probs,
            seq,
            dropout: key,
        });
        Ok(y)
    }

    /// Gradient of the output → gradient of the input; accumulates every
    /// parameter's gradient.
    pub fn backward(&mut self, dy: &DTensor) -> Result<DTensor> {
        const OP: &str = "ParallelSelfAttention::backward";
        let saved = self
            .saved
            .take()
            .ok_or_else(|| Error::invalid(OP, "call forward before backward"))?;
        let (heads, d) = (self.config.heads, self.config.head_dim);
        // The linear layers' backward is the tape's now; this layer moves to it next.
        let no_linear_backward = || {
            Error::invalid(
                OP,
                "the linear layers have no backward method: run backward on the tape",
            )
        };
        let _ = dy;
        let d_out = match Err::<DTensor, _>(no_linear_backward()) {
            Ok(g) => g,
            Err(e) => {
                self.saved = Some(saved);
                return Err(e);
            }
        };
        let tokens = saved.qkv.shape()[0];
        let p = saved.qkv.mesh().size();
        let d_qkv = (0..p)
            .map(|r| {
                let h = split_range(heads, p, r).len();
                let shape = AttentionShape::new(tokens / saved.seq, saved.seq, h, d);
                attention_backward_with(
                    &saved.qkv.shards()[r],
                    &saved.probs[r],
                    &d_out.shards()[r],
                    shape,
                    self.probs_dropout(saved.dropout, p, r),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let d_qkv = DTensor::from_shards_in_units(
            saved.qkv.mesh(),
            d_qkv,
            saved.qkv.shape(),
            Placement::Shard(1),
            saved.qkv.shard_unit(),
        )?;
        let _ = d_qkv;
        Err(no_linear_backward())
    }
}

impl ParallelSelfAttention {
    /// One step of cached decoding of a single sequence: `x` `[new, hidden]`
    /// (`Replicate`) holds the new tokens, `cache` each rank's keys and values
    /// of the earlier positions (its own heads only; start from
    /// [`KvCache::default`]). Returns the new tokens' output, equal to the
    /// matching rows of [`Self::forward`] over the whole sequence, and grows
    /// the cache. Communicates only in `c_proj` (one all-reduce).
    pub fn decode(&mut self, x: &DTensor, cache: &mut KvCache) -> Result<DTensor> {
        const OP: &str = "ParallelSelfAttention::decode";
        if self.config.sequence_parallel {
            return Err(Error::invalid(
                OP,
                "decode a model built without sequence_parallel (decoding has one token per step)",
            ));
        }
        let qkv = self.c_attn.forward(x)?.cast(DType::F32)?;
        let (heads, d, p) = (self.config.heads, self.config.head_dim, qkv.mesh().size());
        let new = qkv.shape()[0];
        if cache.ranks.is_empty() {
            cache.ranks = vec![None; p];
        }
        let mut outs = Vec::with_capacity(p);
        let mut grown = Vec::with_capacity(p);
        for (r, local) in qkv.shards().iter().enumerate() {
            let h = split_range(heads, p, r).len();
            let step = attention_decode(
                local,
                cache.ranks[r].as_ref(),
                AttentionShape::new(1, new, h, d),
            )?;
            outs.push(step.out);
            grown.push(Some(step.cache));
        }
        let out = DTensor::from_shards_in_units(
            qkv.mesh(),
            outs,
            &[new, heads * d],
            Placement::Shard(1),
            d,
        )?;
        let y = self.c_proj.forward(&out.cast(x.dtype())?)?;
        cache.ranks = grown;
        cache.len += new;
        Ok(y)
    }
}

/// Keys and values of the positions decoded so far, for one attention layer:
/// each rank holds only its own heads.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    ranks: Vec<Option<LocalTensor>>,
    len: usize,
}

impl KvCache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

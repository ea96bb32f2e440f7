//! [`GqaAttention`]: the Llama family's self-attention on P ranks: separate
//! `q_proj`, `k_proj`, `v_proj`, `o_proj` (Hugging Face's names), grouped
//! query heads (`kv_heads` dividing `heads`), rotary positions
//! ([`RopeConfig`]), optional per-head RMSNorm of queries and keys (Qwen3's
//! `q_norm`, `k_norm`) and an optional sliding window (Mistral).
//!
//! Query heads split over ranks as GPT-2's do (the first `heads mod P`
//! ranks take one more; a rank may hold none): `q_proj` is column-parallel
//! and `o_proj` row-parallel in whole heads. `k_proj` and `v_proj` are
//! [`KvHeadLinear`]: every rank holds the key/value heads its query heads
//! read (several when there are more key/value heads than ranks; a head
//! read by several ranks is held by each), so every P from 1 to the number
//! of query heads works whatever `kv_heads` is, and so does the KV cache.
//! One input mapping feeds all three projections: forward communicates
//! once (in `o_proj`), backward three times (the input's gradient, and one
//! all-reduce each of `k_proj`'s and `v_proj`'s weight gradients over their
//! holders; docs/MATH.md §GQA). With sequence parallelism the input and
//! output are `Shard(0)` and the first and last become the gather /
//! reduce-scatter pair.

use super::Params;
use super::init::{Init, InitRng};
use super::kv_cache::Step;
use super::linear::{
    ColumnParallelConfig, ColumnParallelLinear, KvHeadConfig, KvHeadLinear, RowParallelConfig,
    RowParallelLinear,
};
use super::norm::{NormConfig, RMSNorm};
use super::rope::RopeConfig;
use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::tensor::{DTensor, GqaSpec, Mapping, Placement, RowProduct};

/// Settings of a [`GqaAttention`].
#[derive(Clone, Debug)]
pub struct GqaConfig {
    /// Model width.
    pub hidden: usize,
    /// Query heads (need not divide by the world size).
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Width of each head (need not be `hidden / heads`).
    pub head_dim: usize,
    /// Biases on q, k and v (Qwen2; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on `o_proj` (Llama's `attention_bias`; not Qwen2's).
    pub o_bias: bool,
    /// Per-head RMSNorm of queries and keys with this epsilon (Qwen3,
    /// Gemma 3).
    pub qk_norm: Option<f32>,
    /// Those norms scale by `offset + γ` (Gemma 3: 1; see [`NormConfig::offset`]).
    pub qk_norm_offset: f32,
    /// Scores scaled by this rather than `1/√head_dim` (Gemma's
    /// `query_pre_attn_scalar^−½`): the queries are scaled by
    /// `scale·√head_dim` before they are rotated.
    pub scale: Option<f32>,
    /// Scores soft-capped to `cap · tanh(s / cap)` before the softmax
    /// (Gemma 2's `attn_logit_softcapping`).
    pub softcap: Option<f32>,
    /// Sliding window (query `i` sees key `j` when `i − window < j ≤ i`); 0: none.
    pub window: usize,
    /// Rotary embedding of queries and keys.
    pub rope: RopeConfig,
    /// Initialiser of q, k and v.
    pub init: Init,
    /// Initialiser of `o_proj`.
    pub proj_init: Init,
    /// Sequence parallelism: input and output `Shard(0)` along tokens.
    pub sequence_parallel: bool,
}

impl GqaConfig {
    /// `heads` query heads over `kv_heads` key/value heads of `hidden / heads`
    /// each, RoPE base 10000, no biases, norms or window.
    pub fn new(hidden: usize, heads: usize, kv_heads: usize) -> Self {
        let head_dim = hidden.checked_div(heads).unwrap_or(0);
        GqaConfig {
            hidden,
            heads,
            kv_heads,
            head_dim,
            qkv_bias: false,
            o_bias: false,
            qk_norm: None,
            qk_norm_offset: 0.0,
            scale: None,
            softcap: None,
            window: 0,
            rope: RopeConfig::new(10000.0, head_dim, 2048),
            init: Init::default(),
            proj_init: Init::default(),
            sequence_parallel: false,
        }
    }
}

/// Grouped-query self-attention with rotary positions, query heads split
/// over ranks.
#[derive(Clone, Debug, Params)]
pub struct GqaAttention {
    /// `[heads·head_dim, hidden]`, column-parallel in whole heads.
    pub q_proj: ColumnParallelLinear,
    /// `[kv_heads·head_dim, hidden]`, each rank holding its query heads' heads.
    pub k_proj: KvHeadLinear,
    /// `[kv_heads·head_dim, hidden]`, held like `k_proj`.
    pub v_proj: KvHeadLinear,
    /// `[hidden, heads·head_dim]`, row-parallel in whole heads.
    pub o_proj: RowParallelLinear,
    /// Per-head norm of the queries `[head_dim]` (Qwen3).
    pub q_norm: Option<RMSNorm>,
    /// Per-head norm of the keys `[head_dim]` (Qwen3).
    pub k_norm: Option<RMSNorm>,
    #[params(skip)]
    config: GqaConfig,
}

impl GqaAttention {
    /// A layer initialised from `rng` (q, k, v, then o).
    pub fn new(mesh: &Mesh, config: GqaConfig, rng: &mut InitRng) -> Result<Self> {
        const OP: &str = "GqaAttention::new";
        let (h, heads, kv, d) = (
            config.hidden,
            config.heads,
            config.kv_heads,
            config.head_dim,
        );
        if h == 0 || heads == 0 || kv == 0 || d == 0 || !heads.is_multiple_of(kv) {
            return Err(Error::invalid(
                OP,
                format!(
                    "hidden {h}, heads {heads}, kv_heads {kv}, head_dim {d}: all at least 1, \
                     and kv_heads dividing heads"
                ),
            ));
        }
        if !d.is_multiple_of(2) || config.rope.head_dim != d {
            return Err(Error::invalid(
                OP,
                format!(
                    "head_dim {d} must be even and equal rope.head_dim {}",
                    config.rope.head_dim
                ),
            ));
        }
        let mut q = ColumnParallelConfig::new(h, heads * d);
        (q.bias, q.init, q.shard_unit) = (config.qkv_bias, config.init, d);
        let q_proj = ColumnParallelLinear::new(mesh, q, rng)?;
        let mut kvc = KvHeadConfig::new(h, heads, kv, d);
        (kvc.bias, kvc.init) = (config.qkv_bias, config.init);
        let k_proj = KvHeadLinear::new(mesh, kvc.clone(), rng)?;
        let v_proj = KvHeadLinear::new(mesh, kvc, rng)?;
        let mut o = RowParallelConfig::new(heads * d, h);
        (o.bias, o.init, o.shard_unit) = (config.o_bias, config.proj_init, d);
        o.sequence_parallel = config.sequence_parallel;
        let o_proj = RowParallelLinear::new(mesh, o, rng)?;
        let positive = |v: Option<f32>| v.is_none_or(|s| s.is_finite() && s > 0.0);
        if !positive(config.scale) || !positive(config.softcap) {
            return Err(Error::invalid(
                OP,
                format!(
                    "scale {:?} and softcap {:?} must be finite and > 0",
                    config.scale, config.softcap
                ),
            ));
        }
        let norm = |eps: f32| {
            let mut c = NormConfig::rms(d);
            (c.eps, c.offset) = (eps, config.qk_norm_offset);
            RMSNorm::new(mesh, c)
        };
        let (q_norm, k_norm) = match config.qk_norm {
            Some(eps) => (Some(norm(eps)?), Some(norm(eps)?)),
            None => (None, None),
        };
        Ok(GqaAttention {
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            q_norm,
            k_norm,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &GqaConfig {
        &self.config
    }

    fn spec(&self, seq: usize) -> GqaSpec {
        let c = &self.config;
        GqaSpec {
            seq,
            heads: c.heads,
            kv_heads: c.kv_heads,
            head_dim: c.head_dim,
            window: c.window,
            dropout: None,
            softcap: c.softcap,
        }
    }

    /// q, k, v of the mapped input, normed, and the rotary tables (cos,
    /// sin) for `positions`: q and k still to rotate.
    #[allow(clippy::type_complexity)]
    fn qkv_tables(
        &self,
        xg: &DTensor,
        positions: std::ops::Range<usize>,
    ) -> Result<([DTensor; 3], (DTensor, DTensor))> {
        let d = self.config.head_dim;
        let f32 = |t: DTensor| t.cast(DType::F32);
        // One input, three products: where nothing records them, they
        // share dispatches (DTensor::linears_with).
        let (wq, bq) = self.q_proj.mapped_operands(xg)?;
        let (wk, bk) = self.k_proj.mapped_operands(xg)?;
        let (wv, bv) = self.v_proj.mapped_operands(xg)?;
        let layers = [(&wq, bq.as_ref()), (&wk, bk.as_ref()), (&wv, bv.as_ref())];
        // Ranks holding the same key/value heads repeat each other's k and v.
        let (sk, sv) = (self.k_proj.copy_sources(), self.v_proj.copy_sources());
        let [q, k, v]: [DTensor; 3] = xg
            .linears_with(&layers, &[None, Some(&sk), Some(&sv)])?
            .try_into()
            .map_err(|_| Error::invalid("GqaAttention", "internal: three projections"))?;
        // LoRA adapters' products join the layers' (none: unchanged).
        let q = self.q_proj.adapted(xg, q)?;
        let k = self.k_proj.adapted(xg, k)?;
        let v = self.v_proj.adapted(xg, v)?;
        let (mut q, mut k, v) = (f32(q)?, f32(k)?, f32(v)?);
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = q.rms_norm_heads(&qn.scale()?, qn.config().eps, d)?;
            k = k.rms_norm_heads(&kn.scale()?, kn.config().eps, d)?;
        }
        if let Some(scale) = self.config.scale {
            // Rotation is linear: scaling before it scales the scores.
            q = q.scale(scale * (d as f32).sqrt())?;
        }
        let n = positions.len();
        let (cos, sin) = self.config.rope.tables(positions);
        let mesh = xg.mesh();
        let cos = DTensor::from_host(mesh, &[n, d / 2], &cos, Placement::Replicate)?;
        let sin = DTensor::from_host(mesh, &[n, d / 2], &sin, Placement::Replicate)?;
        Ok(([q, k, v], (cos, sin)))
    }

    /// q, k, v of the mapped input, normed and rotated for `positions`.
    fn qkv(
        &self,
        xg: &DTensor,
        positions: std::ops::Range<usize>,
    ) -> Result<(DTensor, DTensor, DTensor)> {
        let ([q, k, v], (cos, sin)) = self.qkv_tables(xg, positions)?;
        let (q, k) = q.rotary_pair(&k, &cos, &sin, self.config.head_dim)?;
        Ok((q, k, v))
    }

    fn input_mapping(&self) -> Mapping {
        if self.config.sequence_parallel {
            Mapping::AllGatherToParallel(0)
        } else {
            Mapping::CopyToParallel
        }
    }

    /// `x` `[tokens, hidden]` → the same shape and placement, in x's dtype
    /// (attention itself in f32): whole sequences (`Replicate`, or
    /// `Shard(0)` with sequence parallelism; forward communicates once, in
    /// `o_proj`) or, with [`Step::Cached`], one sequence's new tokens
    /// (`Replicate`) after the cached ones, equal to the matching rows of
    /// the whole sequence's forward; the cache grows.
    pub fn forward(&self, x: &DTensor, step: Step<'_>) -> Result<DTensor> {
        self.product(x, step)?.resolve()
    }

    /// [`Self::forward`] with `o_proj`'s product not yet summed over the
    /// ranks: the caller chooses its epilogue (a residual, the norm that
    /// follows; [`RowProduct::finish`]).
    pub fn product(&self, x: &DTensor, step: Step<'_>) -> Result<RowProduct> {
        let out = match step {
            Step::Sequences(seq) => {
                let xg = self.input_mapping().forward(x)?;
                let (q, k, v) = self.qkv(&xg, 0..seq)?;
                q.gqa_attention(&k, &v, &self.spec(seq))?
            }
            Step::Cached(cache) => {
                if self.config.sequence_parallel {
                    return Err(Error::invalid(
                        "GqaAttention::forward",
                        "decode a model built without sequence_parallel (decoding has one \
                         token per step)",
                    ));
                }
                let new = x.shape()[0];
                let xg = Mapping::CopyToParallel.forward(x)?;
                // q and k rotated in attention's own dispatch where it can.
                let ([q, k, v], tables) = self.qkv_tables(&xg, cache.len..cache.len + new)?;
                let tables = (&tables.0, &tables.1);
                let (out, grown) =
                    q.gqa_decode_rotary([&k, &v], cache.kv.as_ref(), &self.spec(new), tables)?;
                cache.len += new;
                cache.kv = Some(grown);
                out
            }
        };
        self.o_proj.product(&out.cast(x.dtype())?)
    }
}

//! [`Llama`]: the Llama family (`llama`, `mistral`, `qwen2`, `qwen3`, by
//! config) on P ranks, named as Hugging Face names it so
//! `#[derive(Params)]` gives the checkpoint names
//! (`model.embed_tokens.weight`, `model.layers.{i}.self_attn.q_proj.weight`,
//! `model.norm.weight`, and `lm_head.weight` only when untied).
//!
//! `embed_tokens` (vocab-parallel) → `layers.{i}` (RMSNorm → [`GqaAttention`]
//! → residual → RMSNorm → [`GatedMlp`] → residual) → `norm` → the head
//! (the embedding when tied, else a vocab-parallel `lm_head`) → vocab-sharded
//! logits and the vocab-parallel cross-entropy. Query heads split over
//! ranks as GPT-2's (a rank may hold none); every rank holds the
//! key/value heads its query heads read (several ranks may hold one), so
//! any P from 1 to the number of query heads runs.
//! Per step: forward `2·layers + 4` all-reduces (as GPT-2), backward
//! `(4 + 2b + 2q)·layers + 1` (per layer the attention and MLP input
//! gradients and the held `k_proj`, `v_proj` weights summed over their
//! holders, plus their biases (`b`) and the q/k norms (`q`); one for the
//! head): docs/MATH.md
//! §14.6. Sequence parallelism turns the layers' input and output
//! all-reduces into gather / reduce-scatter pairs.
//!
//! Files: `config.rs` (reading `config.json`), `config_json.rs` (writing
//! it), `load.rs` (Hugging Face directories), `size.rs` (parameter
//! counts), `stage.rs` ([`LlamaStage`], one pipeline stage's part).

mod config;
mod config_json;
#[cfg(not(target_arch = "wasm32"))]
mod load;
mod size;
mod stage;

pub use config::{LLAMA_FAMILY, LlamaConfig};
#[cfg(not(target_arch = "wasm32"))]
pub use load::GenerationConfig;
pub use stage::LlamaStage;

use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::{
    CausalDecoder, ColumnParallelConfig, ColumnParallelLinear, CrossEntropyConfig, EmbeddingConfig,
    GatedMlp, GatedMlpConfig, GqaAttention, GqaConfig, Init, InitRng, KvCache, NormConfig, Params,
    RMSNorm, Reduction, VocabParallelCrossEntropy, VocabParallelEmbedding,
};
use crate::tensor::{DTensor, Mapping};

/// One decoder layer: pre-norm attention and pre-norm gated MLP, each with a residual.
#[derive(Debug, Params)]
pub struct LlamaDecoderLayer {
    /// Norm before attention.
    pub input_layernorm: RMSNorm,
    /// Grouped-query attention with rotary positions.
    pub self_attn: GqaAttention,
    /// Norm before the MLP.
    pub post_attention_layernorm: RMSNorm,
    /// SwiGLU feed-forward.
    pub mlp: GatedMlp,
}

impl LlamaDecoderLayer {
    // Each branch's residual is added by its row-parallel projection (in
    // the product's store when decoding on one rank): `x + branch`'s bits.
    fn forward(&self, x: &DTensor, seq: usize) -> Result<DTensor> {
        let n1 = self.input_layernorm.forward(x)?;
        let h = self.self_attn.forward_with(&n1, seq, Some(x))?;
        let n2 = self.post_attention_layernorm.forward(&h)?;
        self.mlp.forward_residual(&n2, &h)
    }

    // `x_normed`: `input_layernorm(x)` where the previous layer's last
    // all-reduce applied it; returns the output and, where this layer's
    // last all-reduce applied it, `next` of it (ranks sharing a CPU
    // adapter: `RowParallelLinear::forward_with_norm`, the same bits).
    fn decode(
        &self,
        (x, x_normed): (&DTensor, Option<DTensor>),
        cache: &mut KvCache,
        next: Option<&RMSNorm>,
    ) -> Result<(DTensor, Option<DTensor>)> {
        let n1 = match x_normed {
            Some(n) => n,
            None => self.input_layernorm.forward(x)?,
        };
        let post = &self.post_attention_layernorm;
        let (h, n2) = (self.self_attn).decode_with_norm(&n1, cache, Some(x), Some(post))?;
        let n2 = match n2 {
            Some(n) => n,
            None => post.forward(&h)?,
        };
        match next {
            Some(next) => self.mlp.forward_residual_norm(&n2, &h, next),
            None => Ok((self.mlp.forward_residual(&n2, &h)?, None)),
        }
    }
}

/// The decoder stack (Hugging Face's `model.`).
#[derive(Debug, Params)]
pub struct LlamaModel {
    /// Token embedding, vocab-parallel (also the head when tied).
    pub embed_tokens: VocabParallelEmbedding,
    /// The decoder layers.
    pub layers: Vec<LlamaDecoderLayer>,
    /// Final norm.
    pub norm: RMSNorm,
}

/// A Llama-family causal language model on P ranks.
#[derive(Debug, Params)]
pub struct Llama {
    /// The decoder stack.
    pub model: LlamaModel,
    /// The untied output head `[vocab, hidden]`, vocab-parallel; `None` when
    /// the head is the embedding.
    pub lm_head: Option<ColumnParallelLinear>,
    #[params(skip)]
    loss: VocabParallelCrossEntropy,
    #[params(skip)]
    config: LlamaConfig,
    #[params(skip)]
    sequence_parallel: bool,
    #[cfg(not(target_arch = "wasm32"))]
    #[params(skip)]
    generation: GenerationConfig,
}

impl Llama {
    /// A model of `config` whose weights are drawn from `seed` (the same at
    /// every world size): N(0, 0.02²) matrices and ones in the norms.
    pub fn new(mesh: &Mesh, config: LlamaConfig, seed: u64) -> Result<Self> {
        Self::build(mesh, config, Some(seed), false)
    }

    /// [`Llama::new`] with sequence parallelism (activations between the
    /// embedding and the head split along tokens).
    pub fn new_sequence_parallel(mesh: &Mesh, config: LlamaConfig, seed: u64) -> Result<Self> {
        Self::build(mesh, config, Some(seed), true)
    }

    /// `seed` `None`: all-zero weights (ones in the norms), for loading over.
    pub(crate) fn build(
        mesh: &Mesh,
        config: LlamaConfig,
        seed: Option<u64>,
        sequence_parallel: bool,
    ) -> Result<Self> {
        const OP: &str = "Llama::new";
        let c = &config;
        check_layers(OP, c)?;
        // Every parameter is an f32 master; check before allocating any.
        let what = format!("{} parameters", c.num_parameters());
        mesh.check_memory(OP, &what, c.parameter_bytes(mesh))?;
        let mut rng = InitRng::new(seed.unwrap_or(0));
        let init = if seed.is_some() {
            Init::default()
        } else {
            Init::Zeros
        };
        let embed_tokens = embedding(mesh, c, init, &mut rng)?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| decoder_layer(mesh, c, i, (init, sequence_parallel), &mut rng))
            .collect::<Result<Vec<_>>>()?;
        let lm_head = match c.tie_word_embeddings {
            true => None,
            false => Some(untied_head(mesh, c, (init, sequence_parallel), &mut rng)?),
        };
        Ok(Llama {
            model: LlamaModel {
                embed_tokens,
                layers,
                norm: rms(mesh, c)?,
            },
            lm_head,
            loss: mean_loss()?,
            config,
            sequence_parallel,
            #[cfg(not(target_arch = "wasm32"))]
            generation: GenerationConfig::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Token ids `[batch·seq]` (batch-major) → logits `[batch·seq, vocab]`,
    /// `Shard(1)` (each rank its vocab rows), every position, recorded on
    /// the tape unless inside [`no_grad`](crate::no_grad).
    pub fn logits(&self, ids: &[i32], seq: usize) -> Result<DTensor> {
        const OP: &str = "Llama::logits";
        let max = self.config.max_position_embeddings;
        if seq == 0 || !ids.len().is_multiple_of(seq) {
            return Err(Error::invalid(
                OP,
                format!(
                    "{} ids are not whole sequences of {seq} (seq ≥ 1; max_position_embeddings {max})",
                    ids.len()
                ),
            ));
        }
        let mut x = self.model.embed_tokens.forward(ids)?;
        if self.sequence_parallel {
            x = Mapping::ScatterToParallel(0).forward(&x)?;
        }
        for layer in &self.model.layers {
            x = layer.forward(&x, seq)?;
        }
        self.head(&self.model.norm.forward(&x)?)
    }

    /// The output head of normed activations: the tied embedding's rows or
    /// `lm_head`, giving vocab-sharded logits.
    fn head(&self, x: &DTensor) -> Result<DTensor> {
        let table = Some(&self.model.embed_tokens);
        head(self.lm_head.as_ref(), table, self.sequence_parallel, x)
    }

    /// The mean cross-entropy (`[1]`, replicated) of the logits of `ids`
    /// against `targets` as given (no shift); `loss.backward()` fills every
    /// parameter's gradient.
    pub fn loss(&self, ids: &[i32], targets: &[i32], seq: usize) -> Result<DTensor> {
        if ids.len() != targets.len() {
            return Err(Error::shape("Llama::loss", [ids.len()], [targets.len()]));
        }
        self.loss.forward(&self.logits(ids, seq)?, targets)
    }

    /// Cached decoding: `ids` follow the tokens already in `caches` (one per
    /// layer); returns the logits of the last one (`[1, vocab]`, `Shard(1)`).
    pub(crate) fn decode_step(&self, ids: &[i32], caches: &mut [KvCache]) -> Result<DTensor> {
        const OP: &str = "Llama::decode";
        if self.sequence_parallel {
            return Err(Error::invalid(
                OP,
                "decode a model built without sequence parallelism",
            ));
        }
        if caches.len() != self.model.layers.len() || ids.is_empty() {
            return Err(Error::invalid(
                OP,
                "one cache per layer and at least one token",
            ));
        }
        let mut x = self.model.embed_tokens.forward(ids)?;
        let mut normed = None;
        let layers = &self.model.layers;
        for (i, (layer, cache)) in layers.iter().zip(caches.iter_mut()).enumerate() {
            let next = layers
                .get(i + 1)
                .map_or(&self.model.norm, |l| &l.input_layernorm);
            (x, normed) = layer.decode((&x, normed), cache, Some(next))?;
        }
        // Rows are normed apart, so the last row's norm is the norm's last row.
        let rows = x.shape()[0];
        let last = match normed {
            Some(n) => n.narrow(0, rows - 1, 1)?,
            None => self.model.norm.forward(&x.narrow(0, rows - 1, 1)?)?,
        };
        self.head(&last)
    }
}

impl CausalDecoder for Llama {
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn context(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn num_caches(&self) -> usize {
        self.model.layers.len()
    }

    fn decode_logits(&self, ids: &[i32], caches: &mut [KvCache]) -> Result<DTensor> {
        self.decode_step(ids, caches)
    }

    fn sequence_logits(&self, ids: &[i32], seq: usize) -> Result<DTensor> {
        self.logits(ids, seq)
    }
}

/// Keys a decoder layer draws: q, k, v, o, then gate, up, down (biases and
/// norms start constant).
const LAYER_KEYS: u64 = 7;

/// One window per layer, at least one layer.
fn check_layers(op: &'static str, c: &LlamaConfig) -> Result<()> {
    if c.windows.len() != c.num_hidden_layers || c.num_hidden_layers == 0 {
        return Err(Error::invalid(
            op,
            "num_hidden_layers ≥ 1, with one window per layer",
        ));
    }
    Ok(())
}

fn embedding(
    mesh: &Mesh,
    c: &LlamaConfig,
    init: Init,
    rng: &mut InitRng,
) -> Result<VocabParallelEmbedding> {
    let mut embed = EmbeddingConfig::new(c.vocab_size, c.hidden_size);
    embed.init = init;
    VocabParallelEmbedding::new(mesh, embed, rng)
}

fn rms(mesh: &Mesh, c: &LlamaConfig) -> Result<RMSNorm> {
    let mut n = NormConfig::rms(c.hidden_size);
    n.eps = c.rms_norm_eps;
    RMSNorm::new(mesh, n)
}

/// Layer `i`, drawn from `rng` (`LAYER_KEYS` keys).
fn decoder_layer(
    mesh: &Mesh,
    c: &LlamaConfig,
    i: usize,
    (init, sequence_parallel): (Init, bool),
    rng: &mut InitRng,
) -> Result<LlamaDecoderLayer> {
    let mut a = GqaConfig::new(c.hidden_size, c.num_attention_heads, c.num_key_value_heads);
    a.head_dim = c.head_dim;
    (a.qkv_bias, a.o_bias, a.window) = (c.qkv_bias, c.o_bias, c.windows[i]);
    a.qk_norm = c.qk_norm.then_some(c.rms_norm_eps);
    a.rope = c.rope.clone();
    (a.init, a.proj_init, a.sequence_parallel) = (init, init, sequence_parallel);
    let mut m = GatedMlpConfig::new(c.hidden_size, c.intermediate_size);
    (m.bias, m.init, m.proj_init) = (c.mlp_bias, init, init);
    m.sequence_parallel = sequence_parallel;
    Ok(LlamaDecoderLayer {
        input_layernorm: rms(mesh, c)?,
        self_attn: GqaAttention::new(mesh, a, rng)?,
        post_attention_layernorm: rms(mesh, c)?,
        mlp: GatedMlp::new(mesh, m, rng)?,
    })
}

fn untied_head(
    mesh: &Mesh,
    c: &LlamaConfig,
    (init, sequence_parallel): (Init, bool),
    rng: &mut InitRng,
) -> Result<ColumnParallelLinear> {
    let mut h = ColumnParallelConfig::new(c.hidden_size, c.vocab_size);
    (h.bias, h.init, h.sequence_parallel) = (false, init, sequence_parallel);
    ColumnParallelLinear::new(mesh, h, rng)
}

fn mean_loss() -> Result<VocabParallelCrossEntropy> {
    VocabParallelCrossEntropy::new(CrossEntropyConfig {
        reduction: Reduction::Mean,
        ..Default::default()
    })
}

/// The output head of normed activations: `lm_head`, or the tied
/// embedding's rows (`table`), giving vocab-sharded logits.
fn head(
    lm_head: Option<&ColumnParallelLinear>,
    table: Option<&VocabParallelEmbedding>,
    sequence_parallel: bool,
    x: &DTensor,
) -> Result<DTensor> {
    if let Some(h) = lm_head {
        return h.forward(x);
    }
    let table = table.ok_or_else(|| Error::invalid("Llama::head", "no output head"))?;
    let f = if sequence_parallel {
        Mapping::AllGatherToParallel(0)
    } else {
        Mapping::CopyToParallel
    };
    let h = f.forward(x)?;
    h.matmul(&table.weight().operand_for(h.dtype())?, true)
}

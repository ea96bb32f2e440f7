//! The Llama family (`llama` — Llama 3, SmolLM2 —, `mistral`, `qwen2`,
//! `qwen3`, by config): [`LlamaConfig`] (its `config.json`), [`LlamaBlock`]
//! (RMSNorm → grouped-query attention with rotary positions → residual →
//! RMSNorm → SwiGLU → residual) and its checkpoint names, which are
//! Hugging Face's: `model.embed_tokens.weight`,
//! `model.layers.{i}.self_attn.q_proj.weight`, `model.norm.weight`, and
//! `lm_head.weight` only when untied. The decoder around the blocks is
//! [`Decoder`](crate::nn::Decoder).
//!
//! Query heads split over ranks (the first `heads mod P` ranks take one
//! more; a rank may hold none); every rank holds the key/value heads its
//! query heads read (several ranks may hold one), so any P from 1 to the
//! number of query heads runs. Per step: forward `2·layers + 4`
//! all-reduces, backward `(4 + 2b + 2q)·layers + 1` (per layer the
//! attention and MLP input gradients and the held `k_proj`, `v_proj`
//! weights summed over their holders, plus their biases (`b`) and the q/k
//! norms (`q`); one for the head): docs/MATH.md §14.6.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::device::Mesh;
use crate::error::Result;
use crate::nn::hf_config as hf;
use crate::nn::hf_config::ConfigFile;
use crate::nn::{
    Block, BlockBuild, DecoderConfig, DecoderSpec, FinalNorm, GatedMlp, GatedMlpConfig,
    GqaAttention, GqaBlockSizes, GqaConfig, InitRng, NormConfig, Params, RMSNorm, RopeConfig, Step,
    Stream,
};

/// The families this file reads, by `model_type`.
pub const LLAMA_FAMILY: [&str; 4] = ["llama", "mistral", "qwen2", "qwen3"];

/// The Llama-family model a `config.json` describes.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// `model_type`: `llama`, `mistral`, `qwen2` or `qwen3`.
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (= query heads when the file has none).
    pub num_key_value_heads: usize,
    /// Head width (`hidden_size / num_attention_heads` when the file has none).
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// Longest context.
    pub max_position_embeddings: usize,
    /// RoPE base and scaling.
    pub rope: RopeConfig,
    /// The output head is the embedding (`tie_word_embeddings`).
    pub tie_word_embeddings: bool,
    /// Biases on q, k, v (Qwen2 always; Llama and Qwen3 by `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on `o_proj` (Llama and Qwen3 by `attention_bias`).
    pub o_bias: bool,
    /// Biases in the MLP (`mlp_bias`).
    pub mlp_bias: bool,
    /// Per-head RMSNorm of queries and keys (Qwen3).
    pub qk_norm: bool,
    /// Each layer's sliding window (0: full causal attention); empty: no
    /// layer has one.
    pub windows: Vec<usize>,
    /// The padding token (its embedding row gets no gradient from lookups).
    pub pad_token_id: Option<usize>,
}

/// `config.json` as Hugging Face writes it (the fields read here).
#[derive(Clone, Debug, Deserialize)]
struct Raw {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    max_window_layers: Option<usize>,
    layer_types: Option<Vec<String>>,
    hidden_act: Option<String>,
    pad_token_id: Option<usize>,
}

impl LlamaConfig {
    /// A plain Llama (`model_type` `llama`): `heads` query heads over
    /// `kv_heads` key/value heads of `hidden / heads`, SwiGLU of
    /// `intermediate`, RMSNorm ε 1e-5, RoPE base 10000 over a context of
    /// 2048, the head tied to the embedding, no biases, no window. Sizes
    /// are checked when a model is built ([`DecoderConfig::check`]).
    pub fn new(
        vocab: usize,
        hidden: usize,
        intermediate: usize,
        layers: usize,
        heads: usize,
        kv_heads: usize,
    ) -> Self {
        let head_dim = hidden.checked_div(heads).unwrap_or(0);
        LlamaConfig {
            model_type: "llama".into(),
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: intermediate,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            rms_norm_eps: 1e-5,
            max_position_embeddings: 2048,
            rope: RopeConfig::new(10000.0, head_dim, 2048),
            tie_word_embeddings: true,
            qkv_bias: false,
            o_bias: false,
            mlp_bias: false,
            qk_norm: false,
            windows: Vec::new(),
            pad_token_id: None,
        }
    }

    /// Every size and setting, errors naming `file`.
    fn check_in(&self, file: &str) -> Result<()> {
        self.sizes().check(file)?;
        let layers = self.num_hidden_layers;
        hf::check_context(file, self.vocab_size, layers, self.max_position_embeddings)?;
        hf::check_rope(file, &self.rope, self.head_dim, false)?;
        if !self.windows.is_empty() && self.windows.len() != self.num_hidden_layers {
            return Err(hf::bad(
                file,
                format!(
                    "{} windows for {} layers: give one per layer, or none",
                    self.windows.len(),
                    self.num_hidden_layers
                ),
            ));
        }
        Ok(())
    }

    /// The architecture name transformers builds.
    fn architecture(&self) -> &'static str {
        match self.model_type.as_str() {
            "mistral" => "MistralForCausalLM",
            "qwen2" => "Qwen2ForCausalLM",
            "qwen3" => "Qwen3ForCausalLM",
            _ => "LlamaForCausalLM",
        }
    }

    /// The shapes the skeleton's memory check counts.
    fn sizes(&self) -> GqaBlockSizes {
        GqaBlockSizes {
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            qkv_bias: self.qkv_bias,
            o_bias: self.o_bias,
            mlp_bias: self.mlp_bias,
            qk_norm: self.qk_norm,
            norms: 2,
        }
    }

    fn rms(&self, mesh: &Mesh, dim: usize) -> Result<RMSNorm> {
        let mut n = NormConfig::rms(dim);
        n.eps = self.rms_norm_eps;
        RMSNorm::new(mesh, n)
    }
}

impl ConfigFile for LlamaConfig {
    /// Parse the text of a `config.json`; `file` names it in errors.
    /// Anything this crate cannot compute the same way (another
    /// `model_type`, RoPE `longrope`, mixture-of-experts keys,
    /// `quantization_config`, an activation other than SiLU, a partial
    /// rotary width) is an error naming the key, before anything is built.
    fn from_json(text: &str, file: &str) -> Result<Self> {
        let obj = hf::object(text, file)?;
        let model_type = hf::model_type(&obj, file, &LLAMA_FAMILY)?;
        hf::refuse_unsupported(&obj, file)?;
        let raw: Raw = hf::parse(obj.clone(), file)?;
        let act = raw.hidden_act.as_deref().unwrap_or("silu");
        if act != "silu" && act != "swish" {
            return Err(hf::bad(
                file,
                format!("hidden_act {act:?} is not supported; the Llama family uses \"silu\""),
            ));
        }
        let heads = raw.num_attention_heads;
        let kv = raw.num_key_value_heads.unwrap_or(heads);
        let head_dim = raw.head_dim.unwrap_or(raw.hidden_size / heads.max(1));
        let max_pos = raw.max_position_embeddings.unwrap_or(2048).max(1);
        let layers = raw.num_hidden_layers;
        hf::check_sizes(file, &[("num_hidden_layers", layers)])?;
        let window = raw.sliding_window.unwrap_or(0);
        let windows = match model_type.as_str() {
            "mistral" if window > 0 => vec![window; layers],
            "qwen2" | "qwen3" if raw.use_sliding_window == Some(true) => match &raw.layer_types {
                Some(types) if types.len() == layers => types
                    .iter()
                    .map(|t| if t == "sliding_attention" { window } else { 0 })
                    .collect(),
                _ => {
                    let first = raw.max_window_layers.unwrap_or(0);
                    (0..layers)
                        .map(|i| if i >= first { window } else { 0 })
                        .collect()
                }
            },
            _ => Vec::new(),
        };
        let attention_bias = raw.attention_bias.unwrap_or(false);
        let qwen2 = model_type == "qwen2";
        let eps = raw.rms_norm_eps.unwrap_or(1e-6);
        hf::check_eps(file, "rms_norm_eps", eps)?;
        let c = LlamaConfig {
            rope: RopeConfig::from_hf(&obj, head_dim, max_pos, false, file)?,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim,
            rms_norm_eps: eps as f32,
            max_position_embeddings: max_pos,
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            qkv_bias: qwen2 || attention_bias,
            o_bias: !qwen2 && attention_bias,
            mlp_bias: raw.mlp_bias.unwrap_or(false),
            qk_norm: model_type == "qwen3",
            windows,
            pad_token_id: raw.pad_token_id,
            model_type,
        };
        c.check_in(file)?;
        Ok(c)
    }
}

/// One decoder layer: pre-norm attention and pre-norm gated MLP, each with
/// a residual.
#[derive(Clone, Debug, Params)]
pub struct LlamaBlock {
    /// Norm before attention.
    pub input_layernorm: RMSNorm,
    /// Grouped-query attention with rotary positions.
    pub self_attn: GqaAttention,
    /// Norm before the MLP.
    pub post_attention_layernorm: RMSNorm,
    /// SwiGLU feed-forward.
    pub mlp: GatedMlp,
}

impl Block for LlamaBlock {
    fn forward(&self, s: &mut Stream, step: Step<'_>) -> Result<()> {
        s.branch(Some(&self.input_layernorm), |n| {
            Ok(self.self_attn.product(n, step)?.into())
        })?;
        s.branch(Some(&self.post_attention_layernorm), |n| {
            Ok(self.mlp.product(n)?.into())
        })
    }
}

impl DecoderConfig for LlamaConfig {
    fn model_type(&self) -> &str {
        &self.model_type
    }

    fn spec(&self) -> DecoderSpec {
        let sizes = (
            self.vocab_size,
            self.hidden_size,
            self.num_hidden_layers,
            self.max_position_embeddings,
        );
        let norm = FinalNorm::Rms(self.rms_norm_eps);
        DecoderSpec {
            padding_idx: self.pad_token_id,
            ..DecoderSpec::hf(sizes, self.tie_word_embeddings, norm)
        }
    }

    fn check(&self) -> Result<()> {
        hf::in_code("LlamaConfig", |f| self.check_in(f))
    }

    fn block(
        &self,
        mesh: &Mesh,
        i: usize,
        b: &BlockBuild,
        rng: &mut InitRng,
    ) -> Result<Box<dyn Block>> {
        let c = self;
        let mut a = GqaConfig::new(c.hidden_size, c.num_attention_heads, c.num_key_value_heads);
        a.head_dim = c.head_dim;
        (a.qkv_bias, a.o_bias) = (c.qkv_bias, c.o_bias);
        a.window = c.windows.get(i).copied().unwrap_or(0);
        a.qk_norm = c.qk_norm.then_some(c.rms_norm_eps);
        a.rope = c.rope.clone();
        (a.init, a.proj_init, a.sequence_parallel) = (b.init, b.init, b.sequence_parallel);
        let mut m = GatedMlpConfig::new(c.hidden_size, c.intermediate_size);
        (m.bias, m.init, m.proj_init) = (c.mlp_bias, b.init, b.init);
        m.sequence_parallel = b.sequence_parallel;
        Ok(Box::new(LlamaBlock {
            input_layernorm: c.rms(mesh, c.hidden_size)?,
            self_attn: GqaAttention::new(mesh, a, rng)?,
            post_attention_layernorm: c.rms(mesh, c.hidden_size)?,
            mlp: GatedMlp::new(mesh, m, rng)?,
        }))
    }

    fn block_parameters(&self, _layer: usize) -> u128 {
        self.sizes().parameters()
    }

    fn block_bytes(&self, mesh: &Mesh, _layer: usize) -> u128 {
        self.sizes().bytes(mesh)
    }

    fn describe(&self) -> String {
        let c = self;
        format!(
            "{}: {} layers · hidden {} · {} query / {} key-value heads of {} · SwiGLU {} · \
             vocab {} · context {}",
            c.model_type,
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            c.intermediate_size,
            c.vocab_size,
            c.max_position_embeddings
        )
    }

    fn set_tied(&mut self, tied: bool) {
        self.tie_word_embeddings = tied;
    }

    /// `model_type`, `architectures` and every field as transformers
    /// spells them (RoPE as `rope_theta` and `rope_scaling`, which
    /// transformers 4 reads and 5 converts), F32 weights.
    fn to_json(&self, eos: &[i32]) -> Result<String> {
        let mut v = json!({
            "architectures": [self.architecture()],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": hf::shortest(self.rms_norm_eps),
            "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope.theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "mlp_bias": self.mlp_bias,
            "attention_dropout": 0.0,
            "dtype": "float32",
            "use_cache": true,
        });
        let mut obj = Map::new();
        if let Value::Object(o) = &mut v {
            std::mem::swap(o, &mut obj);
        }
        if self.model_type != "qwen2" {
            obj.insert("attention_bias".into(), self.qkv_bias.into());
        }
        if let Some(scaling) = self.rope.scaling.to_hf() {
            obj.insert("rope_scaling".into(), scaling);
        }
        let window = self.windows.iter().copied().max().unwrap_or(0);
        let nonzero = |w: usize| if w > 0 { Value::from(w) } else { Value::Null };
        match self.model_type.as_str() {
            "mistral" => {
                obj.insert("sliding_window".into(), nonzero(window));
            }
            "qwen2" | "qwen3" => {
                obj.insert("use_sliding_window".into(), (window > 0).into());
                obj.insert("sliding_window".into(), nonzero(window));
                let types: Vec<&str> = (0..self.num_hidden_layers)
                    .map(|i| match self.windows.get(i) {
                        Some(&w) if w > 0 => "sliding_attention",
                        _ => "full_attention",
                    })
                    .collect();
                obj.insert("layer_types".into(), types.into());
                obj.insert("max_window_layers".into(), self.num_hidden_layers.into());
            }
            _ => {}
        }
        Ok(hf::finish_json(obj, eos, self.pad_token_id))
    }

    /// Old checkpoints' `rotary_emb.inv_freq` buffers are no parameters.
    fn sanitize(&self, name: &str) -> Option<String> {
        (!name.ends_with("rotary_emb.inv_freq")).then(|| name.to_string())
    }
}

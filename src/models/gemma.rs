//! Gemma 3 (text: `gemma3_text`, e.g. gemma-3-270m, gemma-3-1b) and Gemma 2
//! (`gemma2`), by config: [`GemmaConfig`] and [`GemmaBlock`]. Against the
//! Llama family: RMSNorms scale by `1 + γ`, the embeddings are multiplied by
//! `√hidden`, the feed-forward is GeGLU with the tanh GELU, each block has
//! four norms (before and after attention, before and after the
//! feed-forward, the residual added after the second of each pair), the
//! scores are scaled by `query_pre_attn_scalar^−½`, sliding-window layers
//! (`layer_types`, or every sixth layer global in Gemma 3 and every second
//! in Gemma 2) alternate with global ones, each with its own RoPE base
//! (`rope_local_base_freq`), Gemma 3 norms queries and keys per head, and
//! Gemma 2 soft-caps the attention scores and the logits. The head is tied.
//! Checkpoint names are Hugging Face's (`model.layers.{i}.pre_feedforward_layernorm.weight`, …).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::nn::hf_config as hf;
use crate::nn::hf_config::ConfigFile;
use crate::nn::{
    Block, BlockBuild, DecoderConfig, DecoderSpec, FinalNorm, GatedMlp, GatedMlpConfig,
    GqaAttention, GqaBlockSizes, GqaConfig, InitRng, NormConfig, Params, RMSNorm, RopeConfig, Step,
    Stream,
};

/// The `model_type`s read here (`gemma3`, the multimodal wrapper, only to
/// say what to load instead).
pub const GEMMA_FAMILY: [&str; 3] = ["gemma3_text", "gemma2", "gemma3"];

/// The Gemma 2 or Gemma 3 text model a `config.json` describes.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmaConfig {
    /// `model_type`: `gemma3_text` or `gemma2`.
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
    /// Key/value heads.
    pub num_key_value_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// Longest context.
    pub max_position_embeddings: usize,
    /// Scores scaled by `query_pre_attn_scalar^−½`.
    pub query_pre_attn_scalar: f64,
    /// Biases on q, k, v and o (`attention_bias`).
    pub attention_bias: bool,
    /// RoPE of the global layers (`rope_theta`, `rope_scaling`).
    pub rope_global: RopeConfig,
    /// RoPE of the sliding-window layers (`rope_local_base_freq`).
    pub rope_local: RopeConfig,
    /// The window of sliding layers.
    pub sliding_window: usize,
    /// Which layers slide (`layer_types`: `sliding_attention`).
    pub sliding: Vec<bool>,
    /// Attention scores soft-capped at ± this (Gemma 2: 50).
    pub attn_logit_softcapping: Option<f64>,
    /// Logits soft-capped at ± this (Gemma 2: 30).
    pub final_logit_softcapping: Option<f64>,
    /// Per-head q/k norms (Gemma 3).
    pub qk_norm: bool,
    /// The head is the embedding.
    pub tie_word_embeddings: bool,
    /// The padding token (its embedding row gets no gradient from lookups).
    pub pad_token_id: Option<usize>,
}

/// `config.json` as transformers writes it (the fields read here).
#[derive(Clone, Debug, Deserialize)]
struct Raw {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    hidden_activation: Option<String>,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    attention_bias: Option<bool>,
    query_pre_attn_scalar: Option<f64>,
    sliding_window: Option<usize>,
    layer_types: Option<Vec<String>>,
    sliding_window_pattern: Option<usize>,
    final_logit_softcapping: Option<f64>,
    attn_logit_softcapping: Option<f64>,
    tie_word_embeddings: Option<bool>,
    use_bidirectional_attention: Option<bool>,
    rope_local_base_freq: Option<f64>,
    pad_token_id: Option<usize>,
}

impl GemmaConfig {
    /// A Gemma 3 text model of these sizes: heads of `hidden / heads`,
    /// `query_pre_attn_scalar` the head width, RMSNorm ε 1e-6, global RoPE
    /// base 10⁶ and local 10⁴, every sixth layer global and the others
    /// sliding over `window` keys, q/k norms, tied head, no soft-capping.
    pub fn gemma3(
        vocab: usize,
        hidden: usize,
        intermediate: usize,
        layers: usize,
        (heads, kv_heads): (usize, usize),
        window: usize,
    ) -> Self {
        let d = hidden.checked_div(heads).unwrap_or(0);
        let max_pos = 2048;
        GemmaConfig {
            model_type: "gemma3_text".into(),
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: intermediate,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: d,
            rms_norm_eps: 1e-6,
            max_position_embeddings: max_pos,
            query_pre_attn_scalar: d as f64,
            attention_bias: false,
            rope_global: RopeConfig::new(1e6, d, max_pos),
            rope_local: RopeConfig::new(1e4, d, max_pos),
            sliding_window: window,
            sliding: (0..layers.min(1 << 24)).map(|i| (i + 1) % 6 != 0).collect(),
            attn_logit_softcapping: None,
            final_logit_softcapping: None,
            qk_norm: true,
            tie_word_embeddings: true,
            pad_token_id: None,
        }
    }

    /// Every size and setting, errors naming `file`.
    fn check_in(&self, file: &str) -> Result<()> {
        self.sizes().check(file)?;
        let layers = self.num_hidden_layers;
        hf::check_context(file, self.vocab_size, layers, self.max_position_embeddings)?;
        hf::check_sizes(file, &[("sliding_window", self.sliding_window)])?;
        for rope in [&self.rope_global, &self.rope_local] {
            hf::check_rope(file, rope, self.head_dim, false)?;
        }
        if self.sliding.len() != self.num_hidden_layers {
            return Err(hf::bad(
                file,
                format!(
                    "{} layer types for {} layers",
                    self.sliding.len(),
                    self.num_hidden_layers
                ),
            ));
        }
        if !(self.query_pre_attn_scalar.is_finite() && self.query_pre_attn_scalar > 0.0) {
            return Err(hf::bad(
                file,
                format!(
                    "query_pre_attn_scalar {} must be > 0",
                    self.query_pre_attn_scalar
                ),
            ));
        }
        for (key, cap) in [
            ("attn_logit_softcapping", self.attn_logit_softcapping),
            ("final_logit_softcapping", self.final_logit_softcapping),
        ] {
            if cap.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
                return Err(hf::bad(
                    file,
                    format!("{key} {cap:?} must be finite and > 0, or null"),
                ));
            }
        }
        Ok(())
    }

    /// The shapes the skeleton's memory check counts.
    fn sizes(&self) -> GqaBlockSizes {
        GqaBlockSizes {
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            qkv_bias: self.attention_bias,
            o_bias: self.attention_bias,
            mlp_bias: false,
            qk_norm: self.qk_norm,
            norms: 4,
        }
    }

    /// An RMSNorm scaling by `1 + γ`.
    fn norm(&self, mesh: &Mesh, dim: usize) -> Result<RMSNorm> {
        let mut n = NormConfig::rms(dim);
        (n.eps, n.offset) = (self.rms_norm_eps, 1.0);
        RMSNorm::new(mesh, n)
    }
}

impl ConfigFile for GemmaConfig {
    /// Parse the text of a `config.json`; `file` names it in errors. What
    /// this crate cannot compute the same way (the multimodal `gemma3`
    /// wrapper's vision tower, bidirectional attention, the exact GELU,
    /// quantized or mixture-of-experts files) is an error naming the key.
    fn from_json(text: &str, file: &str) -> Result<Self> {
        let obj = hf::object(text, file)?;
        let model_type = hf::model_type(&obj, file, &GEMMA_FAMILY)?;
        if model_type == "gemma3" || obj.contains_key("vision_config") {
            return Err(hf::bad(
                file,
                "vision_config: Gemma 3's vision tower (model_type \"gemma3\") is not supported; \
                 load a text model (model_type \"gemma3_text\", e.g. gemma-3-270m or gemma-3-1b)",
            ));
        }
        hf::refuse_unsupported(&obj, file)?;
        let raw: Raw = hf::parse(obj.clone(), file)?;
        let gemma2 = model_type == "gemma2";
        if raw.use_bidirectional_attention == Some(true) {
            return Err(hf::bad(
                file,
                "use_bidirectional_attention: only causal attention is supported",
            ));
        }
        let act = raw
            .hidden_activation
            .as_deref()
            .or(raw.hidden_act.as_deref())
            .unwrap_or("gelu_pytorch_tanh");
        if !matches!(act, "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast") {
            return Err(hf::bad(
                file,
                format!(
                    "hidden_activation {act:?} is not supported; Gemma uses the tanh GELU \
                     (\"gelu_pytorch_tanh\")"
                ),
            ));
        }
        let heads = raw.num_attention_heads;
        let layers = raw.num_hidden_layers;
        hf::check_sizes(file, &[("num_hidden_layers", layers)])?;
        let d = raw.head_dim.unwrap_or(256);
        let max_pos = raw
            .max_position_embeddings
            .unwrap_or(if gemma2 { 8192 } else { 131_072 });
        let (rope_global, rope_local) =
            ropes(&obj, (d, max_pos), gemma2, raw.rope_local_base_freq, file)?;
        let pattern = raw
            .sliding_window_pattern
            .unwrap_or(if gemma2 { 2 } else { 6 });
        let sliding = match &raw.layer_types {
            Some(types) => {
                if types.len() != layers {
                    return Err(hf::bad(
                        file,
                        format!(
                            "layer_types has {} entries for {layers} layers",
                            types.len()
                        ),
                    ));
                }
                types.iter().map(|t| t == "sliding_attention").collect()
            }
            None => (0..layers).map(|i| (i + 1) % pattern.max(1) != 0).collect(),
        };
        let eps = raw.rms_norm_eps.unwrap_or(1e-6);
        hf::check_eps(file, "rms_norm_eps", eps)?;
        let c = GemmaConfig {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: raw.num_key_value_heads.unwrap_or(heads),
            head_dim: d,
            rms_norm_eps: eps as f32,
            max_position_embeddings: max_pos,
            query_pre_attn_scalar: raw.query_pre_attn_scalar.unwrap_or(256.0),
            attention_bias: raw.attention_bias.unwrap_or(false),
            rope_global,
            rope_local,
            sliding_window: raw.sliding_window.unwrap_or(4096),
            sliding,
            attn_logit_softcapping: match obj.get("attn_logit_softcapping") {
                // Gemma 2's default applies where the key is absent.
                None if gemma2 => Some(50.0),
                _ => raw.attn_logit_softcapping,
            },
            final_logit_softcapping: match obj.get("final_logit_softcapping") {
                None if gemma2 => Some(30.0),
                _ => raw.final_logit_softcapping,
            },
            qk_norm: !gemma2,
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(true),
            pad_token_id: raw.pad_token_id,
            model_type,
        };
        c.check_in(file)?;
        Ok(c)
    }
}

/// The global and local RoPE: transformers 5's `rope_parameters` per layer
/// type, or the hub's `rope_theta` + `rope_scaling` (global) beside
/// `rope_local_base_freq` (Gemma 3; Gemma 2 has one RoPE).
fn ropes(
    obj: &Map<String, Value>,
    (d, max_pos): (usize, usize),
    gemma2: bool,
    local_base: Option<f64>,
    file: &str,
) -> Result<(RopeConfig, RopeConfig)> {
    let default_theta = if gemma2 { 10_000.0 } else { 1_000_000.0 };
    let per_type = obj
        .get("rope_parameters")
        .and_then(Value::as_object)
        .filter(|o| o.contains_key("full_attention") || o.contains_key("sliding_attention"));
    let with_theta = |mut o: Map<String, Value>, theta: f64| {
        o.entry("rope_theta").or_insert(theta.into());
        o
    };
    if let Some(types) = per_type {
        let part = |key: &str, theta: f64| -> Result<RopeConfig> {
            let inner = types
                .get(key)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let mut top = Map::new();
            top.insert("rope_parameters".into(), with_theta(inner, theta).into());
            RopeConfig::from_hf(&top, d, max_pos, false, file)
        };
        let global = part("full_attention", default_theta)?;
        let local = part(
            "sliding_attention",
            if gemma2 { default_theta } else { 10_000.0 },
        )?;
        return Ok((global, local));
    }
    let global = RopeConfig::from_hf(
        &with_theta(obj.clone(), default_theta),
        d,
        max_pos,
        false,
        file,
    )?;
    let local = match gemma2 {
        true => global.clone(),
        false => RopeConfig::new(local_base.unwrap_or(10_000.0), d, max_pos),
    };
    Ok((global, local))
}

/// One Gemma layer (module doc).
#[derive(Clone, Debug, Params)]
pub struct GemmaBlock {
    /// Norm before attention.
    pub input_layernorm: RMSNorm,
    /// Grouped-query attention with rotary positions.
    pub self_attn: GqaAttention,
    /// Norm of the attention's output, before its residual.
    pub post_attention_layernorm: RMSNorm,
    /// Norm before the feed-forward.
    pub pre_feedforward_layernorm: RMSNorm,
    /// GeGLU feed-forward.
    pub mlp: GatedMlp,
    /// Norm of the feed-forward's output, before its residual.
    pub post_feedforward_layernorm: RMSNorm,
}

impl Block for GemmaBlock {
    fn forward(&self, s: &mut Stream, step: Step<'_>) -> Result<()> {
        s.branch(Some(&self.input_layernorm), |n| {
            let a = self.self_attn.forward(n, step)?;
            Ok(self.post_attention_layernorm.forward(&a)?.into())
        })?;
        s.branch(Some(&self.pre_feedforward_layernorm), |n| {
            let m = self.mlp.forward(n)?;
            Ok(self.post_feedforward_layernorm.forward(&m)?.into())
        })
    }
}

impl DecoderConfig for GemmaConfig {
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
        let norm = FinalNorm::RmsPlusOne(self.rms_norm_eps);
        DecoderSpec {
            embed_scale: Some((self.hidden_size as f64).sqrt() as f32),
            padding_idx: self.pad_token_id,
            logit_softcap: self.final_logit_softcapping.map(|c| c as f32),
            ..DecoderSpec::hf(sizes, self.tie_word_embeddings, norm)
        }
    }

    fn check(&self) -> Result<()> {
        hf::in_code("GemmaConfig", |f| self.check_in(f))
    }

    fn block(
        &self,
        mesh: &Mesh,
        i: usize,
        b: &BlockBuild,
        rng: &mut InitRng,
    ) -> Result<Box<dyn Block>> {
        let c = self;
        let h = c.hidden_size;
        let sliding = c.sliding.get(i).copied().unwrap_or(false);
        let mut a = GqaConfig::new(h, c.num_attention_heads, c.num_key_value_heads);
        a.head_dim = c.head_dim;
        (a.qkv_bias, a.o_bias) = (c.attention_bias, c.attention_bias);
        a.window = if sliding { c.sliding_window } else { 0 };
        a.rope = if sliding {
            &c.rope_local
        } else {
            &c.rope_global
        }
        .clone();
        (a.qk_norm, a.qk_norm_offset) = (c.qk_norm.then_some(c.rms_norm_eps), 1.0);
        if c.query_pre_attn_scalar != c.head_dim as f64 {
            a.scale = Some(c.query_pre_attn_scalar.powf(-0.5) as f32);
        }
        a.softcap = c.attn_logit_softcapping.map(|s| s as f32);
        (a.init, a.proj_init, a.sequence_parallel) = (b.init, b.init, b.sequence_parallel);
        let mut m = GatedMlpConfig::new(h, c.intermediate_size);
        (m.activation, m.init, m.proj_init) = (Activation::Gelu, b.init, b.init);
        m.sequence_parallel = b.sequence_parallel;
        Ok(Box::new(GemmaBlock {
            input_layernorm: c.norm(mesh, h)?,
            self_attn: GqaAttention::new(mesh, a, rng)?,
            post_attention_layernorm: c.norm(mesh, h)?,
            pre_feedforward_layernorm: c.norm(mesh, h)?,
            mlp: GatedMlp::new(mesh, m, rng)?,
            post_feedforward_layernorm: c.norm(mesh, h)?,
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
        let global = c.sliding.iter().filter(|s| !**s).count();
        format!(
            "{}: {} layers ({global} global, the others a window of {}) · hidden {} · {} query / \
             {} key-value heads of {} · GeGLU {} · vocab {} · context {}",
            c.model_type,
            c.num_hidden_layers,
            c.sliding_window,
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            c.intermediate_size,
            c.vocab_size,
            c.max_position_embeddings,
        )
    }

    fn set_tied(&mut self, tied: bool) {
        self.tie_word_embeddings = tied;
    }

    /// As transformers reads it: the RoPE as `rope_theta`, `rope_scaling`
    /// and `rope_local_base_freq`, the layer types listed.
    fn to_json(&self, eos: &[i32]) -> Result<String> {
        let gemma2 = self.model_type == "gemma2";
        let arch = if gemma2 {
            "Gemma2ForCausalLM"
        } else {
            "Gemma3ForCausalLM"
        };
        let types: Vec<&str> = self
            .sliding
            .iter()
            .map(|&s| {
                if s {
                    "sliding_attention"
                } else {
                    "full_attention"
                }
            })
            .collect();
        let v = json!({
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_activation": "gelu_pytorch_tanh",
            "rms_norm_eps": hf::shortest(self.rms_norm_eps),
            "max_position_embeddings": self.max_position_embeddings,
            // transformers' config takes it as an integer where it is one.
            "query_pre_attn_scalar": match self.query_pre_attn_scalar {
                q if q.fract() == 0.0 && q < 1e15 => Value::from(q as u64),
                q => Value::from(q),
            },
            "attention_bias": self.attention_bias,
            "sliding_window": self.sliding_window,
            "layer_types": types,
            "attn_logit_softcapping": self.attn_logit_softcapping,
            "final_logit_softcapping": self.final_logit_softcapping,
            "rope_theta": self.rope_global.theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_dropout": 0.0,
            "dtype": "float32",
            "use_cache": true,
        });
        let Value::Object(mut obj) = v else {
            return Err(Error::invalid(
                "GemmaConfig::to_json",
                "internal: not an object",
            ));
        };
        if !gemma2 {
            obj.insert("rope_local_base_freq".into(), self.rope_local.theta.into());
        }
        if let Some(scaling) = self.rope_global.scaling.to_hf() {
            obj.insert("rope_scaling".into(), scaling);
        }
        Ok(hf::finish_json(obj, eos, self.pad_token_id))
    }
}

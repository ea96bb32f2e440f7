//! [`LlamaConfig`]: what a Hugging Face `config.json` of the Llama family
//! (`model_type` `llama`, `mistral`, `qwen2`, `qwen3`) says about the model,
//! read with serde. RoPE settings are taken as hub files spell them
//! (`rope_theta` beside `rope_scaling`, whose kind is `type` or
//! `rope_type`) and as transformers 5 writes them (`rope_parameters` with
//! `rope_theta` inside). Anything this crate cannot compute the same way
//! (another `model_type`, RoPE `longrope`, mixture-of-experts keys,
//! `quantization_config`, an activation other than SiLU, a partial rotary
//! width) is an error naming the key, before anything is built.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::nn::{RopeConfig, RopeScaling};

/// The families this reader knows, by `model_type`.
pub const LLAMA_FAMILY: [&str; 4] = ["llama", "mistral", "qwen2", "qwen3"];

/// Keys of mixture-of-experts configs (none of the supported families has experts).
const MOE_KEYS: [&str; 6] = [
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "router_aux_loss_coef",
];

/// `config.json` as Hugging Face writes it (the fields this crate reads).
#[derive(Clone, Debug, Deserialize)]
struct Raw {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    max_position_embeddings: Option<usize>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    sliding_window: Option<usize>,
    use_sliding_window: Option<bool>,
    layer_types: Option<Vec<String>>,
    hidden_act: Option<String>,
    partial_rotary_factor: Option<f64>,
    quantization_config: Option<Value>,
    #[serde(flatten)]
    rest: Map<String, Value>,
}

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
    /// Each layer's sliding window (0: full causal attention).
    pub windows: Vec<usize>,
}

fn bad(file: &str, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{file}: {message}"))
}

fn num(obj: &Map<String, Value>, key: &str, file: &str) -> Result<Option<f64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| bad(file, format!("rope {key} is {v}, expected a number"))),
    }
}

/// The RoPE settings of `raw` (either spelling).
fn rope(raw: &Raw, head_dim: usize, max_pos: usize, file: &str) -> Result<RopeConfig> {
    let params = raw
        .rope_parameters
        .as_ref()
        .or(raw.rope_scaling.as_ref())
        .filter(|v| !v.is_null());
    let empty = Map::new();
    let obj = match params {
        None => &empty,
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(bad(
                file,
                format!("rope_parameters / rope_scaling is {v}, expected an object"),
            ));
        }
    };
    let theta = num(obj, "rope_theta", file)?
        .or(raw.rope_theta)
        .unwrap_or(10000.0);
    let kind = obj
        .get("rope_type")
        .or(obj.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let prf = num(obj, "partial_rotary_factor", file)?.or(raw.partial_rotary_factor);
    if prf.is_some_and(|f| f != 1.0) {
        return Err(bad(
            file,
            "partial_rotary_factor ≠ 1 is not supported: every head is rotated whole",
        ));
    }
    let factor = |required: bool| -> Result<Option<f64>> {
        let f = num(obj, "factor", file)?;
        if required && f.is_none() {
            return Err(bad(file, format!("rope type {kind:?} needs a factor")));
        }
        Ok(f)
    };
    let original = || -> Result<usize> {
        Ok(num(obj, "original_max_position_embeddings", file)?.map_or(max_pos, |v| v as usize))
    };
    let scaling = match kind {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear {
            factor: factor(true)?.unwrap_or(1.0),
        },
        "dynamic" => RopeScaling::Dynamic {
            factor: factor(true)?.unwrap_or(1.0),
        },
        "llama3" => RopeScaling::Llama3 {
            factor: factor(true)?.unwrap_or(1.0),
            low_freq_factor: num(obj, "low_freq_factor", file)?.unwrap_or(1.0),
            high_freq_factor: num(obj, "high_freq_factor", file)?.unwrap_or(4.0),
            original_max_position_embeddings: original()?,
        },
        "yarn" => RopeScaling::Yarn {
            factor: factor(false)?,
            original_max_position_embeddings: original()?,
            attention_factor: num(obj, "attention_factor", file)?,
            beta_fast: num(obj, "beta_fast", file)?,
            beta_slow: num(obj, "beta_slow", file)?,
            mscale: num(obj, "mscale", file)?,
            mscale_all_dim: num(obj, "mscale_all_dim", file)?,
            truncate: obj.get("truncate").and_then(Value::as_bool).unwrap_or(true),
        },
        other => {
            return Err(bad(
                file,
                format!(
                    "rope type {other:?} is not supported (default, linear, dynamic, llama3 and \
                     yarn are)"
                ),
            ));
        }
    };
    Ok(RopeConfig {
        theta,
        head_dim,
        scaling,
        max_position_embeddings: max_pos,
    })
}

impl LlamaConfig {
    /// A plain Llama (`model_type` `llama`): `heads` query heads over
    /// `kv_heads` key/value heads of `hidden / heads`, SwiGLU of
    /// `intermediate`, RMSNorm ε 1e-5, RoPE base 10000 over a context of
    /// 2048, the head tied to the embedding, no biases, no window.
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
            windows: vec![0; layers],
        }
    }

    /// Parse the text of a `config.json`; `file` names it in errors.
    pub fn from_json(text: &str, file: &str) -> Result<Self> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| bad(file, format!("not valid JSON ({e})")))?;
        let model_type = value
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if !LLAMA_FAMILY.contains(&model_type.as_str()) {
            return Err(bad(
                file,
                format!(
                    "model_type {model_type:?} is not supported; this crate loads {LLAMA_FAMILY:?} \
                     (and \"gpt2\" through Gpt / CausalLm)"
                ),
            ));
        }
        let raw: Raw = serde_json::from_value(value)
            .map_err(|e| bad(file, format!("{e} (a {model_type} config.json has it)")))?;
        Self::from_raw(raw, file)
    }

    fn from_raw(raw: Raw, file: &str) -> Result<Self> {
        let model_type = raw.model_type.clone().unwrap_or_default();
        if raw
            .quantization_config
            .as_ref()
            .is_some_and(|v| !v.is_null())
        {
            return Err(bad(
                file,
                "quantization_config: quantized checkpoints are not supported; use an F32, F16 or BF16 one",
            ));
        }
        if let Some(key) = MOE_KEYS
            .iter()
            .find(|k| raw.rest.get(**k).is_some_and(|v| !v.is_null()))
        {
            return Err(bad(
                file,
                format!("{key}: mixture-of-experts models are not supported"),
            ));
        }
        let act = raw.hidden_act.as_deref().unwrap_or("silu");
        if act != "silu" && act != "swish" {
            return Err(bad(
                file,
                format!("hidden_act {act:?} is not supported; the Llama family uses \"silu\""),
            ));
        }
        let heads = raw.num_attention_heads;
        let kv = raw.num_key_value_heads.unwrap_or(heads);
        let sizes = [
            ("vocab_size", raw.vocab_size),
            ("hidden_size", raw.hidden_size),
            ("intermediate_size", raw.intermediate_size),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("num_attention_heads", heads),
            ("num_key_value_heads", kv),
        ];
        if let Some((key, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(bad(file, format!("{key} must be at least 1")));
        }
        if let Some((key, n)) = sizes.iter().find(|(_, n)| *n > 1 << 24) {
            return Err(bad(file, format!("{key} {n} is implausibly large")));
        }
        if !heads.is_multiple_of(kv) {
            return Err(bad(
                file,
                format!(
                    "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}"
                ),
            ));
        }
        let head_dim = raw.head_dim.unwrap_or(raw.hidden_size / heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) || head_dim > 1 << 16 {
            return Err(bad(
                file,
                format!("head_dim {head_dim} must be even and at least 2"),
            ));
        }
        let max_pos = raw.max_position_embeddings.unwrap_or(2048).max(1);
        let eps = raw.rms_norm_eps.unwrap_or(1e-6);
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(bad(file, format!("rms_norm_eps {eps} must be > 0")));
        }
        let layers = raw.num_hidden_layers;
        let window = raw.sliding_window.unwrap_or(0);
        let windows = match model_type.as_str() {
            "mistral" => vec![window; layers],
            "qwen2" | "qwen3" if raw.use_sliding_window == Some(true) => match &raw.layer_types {
                Some(types) if types.len() == layers => types
                    .iter()
                    .map(|t| if t == "sliding_attention" { window } else { 0 })
                    .collect(),
                _ => {
                    let first = raw.rest.get("max_window_layers").and_then(Value::as_u64);
                    let first = first.unwrap_or(0) as usize;
                    (0..layers)
                        .map(|i| if i >= first { window } else { 0 })
                        .collect()
                }
            },
            _ => vec![0; layers],
        };
        let attention_bias = raw.attention_bias.unwrap_or(false);
        let qwen2 = model_type == "qwen2";
        Ok(LlamaConfig {
            rope: rope(&raw, head_dim, max_pos, file)?,
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
            model_type,
        })
    }

    /// Read and parse `path` (a `config.json`).
    pub fn read(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            bad(
                &file,
                format!("cannot read it ({e}); a Hugging Face model directory has config.json"),
            )
        })?;
        Self::from_json(&text, &file)
    }
}

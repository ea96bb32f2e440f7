//! [`HfGpt2Config`]: the fields of a Hugging Face GPT-2 `config.json` that
//! decide the model's shapes and numbers, and their mapping to and from
//! [`GptConfig`]. Parsed from a `serde_json::Value`; an option this crate
//! cannot honour (cross-attention, unscaled attention, an erf GELU) is an
//! error rather than a silently different model.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::GptConfig;
use crate::error::{Error, Result};
use crate::kernels::Activation;

/// What a GPT-2 `config.json` says about the model (`model_type: "gpt2"`).
#[derive(Clone, Debug, PartialEq)]
pub struct HfGpt2Config {
    /// Vocabulary size (rows of `wte`).
    pub vocab_size: usize,
    /// Longest sequence (rows of `wpe`); older files call it `n_ctx`.
    pub n_positions: usize,
    /// Model width.
    pub n_embd: usize,
    /// Number of blocks.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Feed-forward width; `None` (JSON `null`) means 4 · `n_embd`.
    pub n_inner: Option<usize>,
    /// LayerNorm epsilon.
    pub layer_norm_epsilon: f64,
    /// Hugging Face's activation name (`"gelu_new"` for GPT-2).
    pub activation_function: String,
    /// Residual dropout, a training setting that [`HfGpt2Config::to_gpt_config`]
    /// leaves off (the model is for inference unless you set
    /// [`GptConfig::dropout`]).
    pub resid_pdrop: f32,
    /// Embedding dropout (see `resid_pdrop`).
    pub embd_pdrop: f32,
    /// Attention-probability dropout (see `resid_pdrop`).
    pub attn_pdrop: f32,
    /// Beginning-of-text token id, if the file names one.
    pub bos_token_id: Option<u32>,
    /// End-of-text token id, if the file names one.
    pub eos_token_id: Option<u32>,
}

/// `file: message` as a checkpoint error.
fn bad(file: &str, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{file}: {message}"))
}

fn get_usize(obj: &Map<String, Value>, file: &str, key: &str) -> Result<Option<usize>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| bad(file, format!("{key} is {v}, expected a whole number ≥ 0"))),
    }
}

fn required(obj: &Map<String, Value>, file: &str, key: &str) -> Result<usize> {
    get_usize(obj, file, key)?.ok_or_else(|| {
        bad(
            file,
            format!("{key} is missing; a GPT-2 config.json has it"),
        )
    })
}

fn get_f64(obj: &Map<String, Value>, file: &str, key: &str, default: f64) -> Result<f64> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| bad(file, format!("{key} is {v}, expected a number"))),
    }
}

fn get_bool(obj: &Map<String, Value>, file: &str, key: &str, default: bool) -> Result<bool> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| bad(file, format!("{key} is {v}, expected true or false"))),
    }
}

fn get_id(obj: &Map<String, Value>, file: &str, key: &str) -> Result<Option<u32>> {
    get_usize(obj, file, key)?
        .map(|n| u32::try_from(n).map_err(|_| bad(file, format!("{key} {n} is too large"))))
        .transpose()
}

/// The shortest decimal of `v` as an f64, so `1e-5f32` is written `1e-5`.
fn shortest(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(v as f64)
}

impl HfGpt2Config {
    /// Parse the text of a `config.json`; `file` names it in errors.
    /// `model_type` must be `"gpt2"`; options this crate does not implement
    /// (`add_cross_attention`, `scale_attn_weights: false`,
    /// `scale_attn_by_inverse_layer_idx`) are errors.
    pub fn from_json(text: &str, file: &str) -> Result<Self> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| bad(file, format!("not valid JSON ({e})")))?;
        let obj = value
            .as_object()
            .ok_or_else(|| bad(file, "expected a JSON object"))?;
        match obj.get("model_type").and_then(Value::as_str) {
            Some("gpt2") => {}
            Some(other) => {
                return Err(bad(
                    file,
                    format!(
                        "model_type is {other:?}; only GPT-2 checkpoints (\"gpt2\") load into Gpt"
                    ),
                ));
            }
            None => return Err(bad(file, "model_type is missing; expected \"gpt2\"")),
        }
        let unsupported = [
            ("add_cross_attention", false),
            ("scale_attn_weights", true),
            ("scale_attn_by_inverse_layer_idx", false),
        ];
        for (key, want) in unsupported {
            if get_bool(obj, file, key, want)? != want {
                return Err(bad(
                    file,
                    format!("{key}: {} is not supported; Gpt implements {want}", !want),
                ));
            }
        }
        let n_positions = match get_usize(obj, file, "n_positions")? {
            Some(n) => n,
            None => required(obj, file, "n_ctx")?,
        };
        let activation_function = match obj.get("activation_function") {
            None | Some(Value::Null) => "gelu_new".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(bad(
                    file,
                    format!("activation_function is {v}, expected a name"),
                ));
            }
        };
        Ok(HfGpt2Config {
            vocab_size: required(obj, file, "vocab_size")?,
            n_positions,
            n_embd: required(obj, file, "n_embd")?,
            n_layer: required(obj, file, "n_layer")?,
            n_head: required(obj, file, "n_head")?,
            n_inner: get_usize(obj, file, "n_inner")?,
            layer_norm_epsilon: get_f64(obj, file, "layer_norm_epsilon", 1e-5)?,
            activation_function,
            resid_pdrop: get_f64(obj, file, "resid_pdrop", 0.1)? as f32,
            embd_pdrop: get_f64(obj, file, "embd_pdrop", 0.1)? as f32,
            attn_pdrop: get_f64(obj, file, "attn_pdrop", 0.1)? as f32,
            bos_token_id: get_id(obj, file, "bos_token_id")?,
            eos_token_id: get_id(obj, file, "eos_token_id")?,
        })
    }

    /// Read and parse `path` (a `config.json`).
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
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

    /// The JSON `save_pretrained` writes: `model_type: "gpt2"`,
    /// `architectures: ["GPT2LMHeadModel"]` and every field above, so
    /// `transformers` builds the same model.
    pub fn to_json(&self) -> String {
        let mut v = json!({
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": self.n_inner,
            "activation_function": self.activation_function,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "resid_pdrop": shortest(self.resid_pdrop),
            "embd_pdrop": shortest(self.embd_pdrop),
            "attn_pdrop": shortest(self.attn_pdrop),
            "initializer_range": 0.02,
            "scale_attn_weights": true,
            "use_cache": true,
            "tie_word_embeddings": true,
        });
        let obj = v.as_object_mut().expect("a JSON object");
        if let Some(id) = self.bos_token_id {
            obj.insert("bos_token_id".into(), id.into());
        }
        if let Some(id) = self.eos_token_id {
            obj.insert("eos_token_id".into(), id.into());
        }
        serde_json::to_string_pretty(&v).expect("JSON values always serialise") + "\n"
    }

    /// Our activation for Hugging Face's name: the tanh GELU (`gelu_new`,
    /// `gelu_pytorch_tanh`, `gelu_fast`; our kernel's form), `relu`,
    /// `silu` / `swish`. The erf GELU (`"gelu"`) and others are errors.
    pub fn activation(&self) -> Result<Activation> {
        Ok(match self.activation_function.as_str() {
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::Gelu,
            "relu" => Activation::Relu,
            "silu" | "swish" => Activation::Silu,
            "gelu" => {
                return Err(bad(
                    "config.json",
                    "activation_function \"gelu\" is the exact (erf) GELU; Gpt's GELU is the tanh approximation (\"gelu_new\", GPT-2's), so this model would compute different numbers",
                ));
            }
            other => {
                return Err(bad(
                    "config.json",
                    format!(
                        "activation_function {other:?} is not supported; use gelu_new, relu or silu"
                    ),
                ));
            }
        })
    }

    /// The [`GptConfig`] of this model: f32 activations, no sequence
    /// parallelism, dropout off (change those fields afterwards if wanted).
    pub fn to_gpt_config(&self) -> Result<GptConfig> {
        let activation = self.activation()?;
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("n_positions", self.n_positions),
            ("n_embd", self.n_embd),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
        ];
        if let Some((key, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(bad("config.json", format!("{key} must be at least 1")));
        }
        // Far beyond any model, and keeps every shape product in range.
        let inner = [("n_inner", self.n_inner.unwrap_or(0))];
        if let Some((key, n)) = sizes.iter().chain(&inner).find(|(_, n)| *n > 1 << 24) {
            return Err(bad(
                "config.json",
                format!("{key} {n} is implausibly large"),
            ));
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(bad(
                "config.json",
                format!(
                    "n_embd {} is not a multiple of n_head {}",
                    self.n_embd, self.n_head
                ),
            ));
        }
        let eps = self.layer_norm_epsilon;
        if !(eps > 0.0 && eps.is_finite()) {
            return Err(bad(
                "config.json",
                format!("layer_norm_epsilon {eps} must be > 0"),
            ));
        }
        let mut c = GptConfig::new(
            self.vocab_size,
            self.n_positions,
            self.n_embd,
            self.n_head,
            self.n_layer,
        );
        c.ffn = self.n_inner.unwrap_or(4 * self.n_embd);
        if c.ffn == 0 {
            return Err(bad("config.json", "n_inner must be at least 1"));
        }
        (c.activation, c.eps) = (activation, eps as f32);
        Ok(c)
    }
}

impl From<&GptConfig> for HfGpt2Config {
    /// The config.json of a model with these settings (activation dtype and
    /// sequence parallelism are run-time choices and are not written).
    fn from(c: &GptConfig) -> Self {
        let activation_function = match c.activation {
            Activation::Gelu => "gelu_new",
            Activation::Relu => "relu",
            Activation::Silu => "silu",
        };
        HfGpt2Config {
            vocab_size: c.vocab,
            n_positions: c.n_ctx,
            n_embd: c.hidden,
            n_layer: c.layers,
            n_head: c.heads,
            n_inner: (c.ffn != 4 * c.hidden).then_some(c.ffn),
            layer_norm_epsilon: shortest(c.eps),
            activation_function: activation_function.into(),
            resid_pdrop: c.dropout,
            embd_pdrop: c.dropout,
            attn_pdrop: c.attn_dropout,
            bos_token_id: None,
            eos_token_id: None,
        }
    }
}

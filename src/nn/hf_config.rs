//! What every family's `config.json` reader shares: the JSON object with
//! its size checked first, serde parsing whose errors name the key, the
//! sizes each family checks, keys that mean a model this crate cannot
//! compute, and floats written as their shortest decimal.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::file_limits::{FileLimits, raise};
use crate::error::{Error, Result};

/// `file: message` as a checkpoint error.
pub(crate) fn bad(file: &str, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{file}: {message}"))
}

/// `text` as a JSON object.
pub(crate) fn object(text: &str, file: &str) -> Result<Map<String, Value>> {
    let max = FileLimits::current().max_config_bytes;
    if text.len() as u64 > max {
        return Err(bad(
            file,
            format!(
                "is {} bytes; a config.json is a few KB ({})",
                text.len(),
                raise("max_config_bytes", max)
            ),
        ));
    }
    match serde_json::from_str(text).map_err(|e| bad(file, format!("not valid JSON ({e})")))? {
        Value::Object(o) => Ok(o),
        v => Err(bad(file, format!("expected a JSON object, got {v}"))),
    }
}

/// `obj` as `T`, an error naming the key that does not fit.
pub(crate) fn parse<T: DeserializeOwned>(obj: Map<String, Value>, file: &str) -> Result<T> {
    serde_path_to_error::deserialize(Value::Object(obj)).map_err(|e| {
        let path = e.path().to_string();
        let key = if path == "." {
            String::new()
        } else {
            format!("{path}: ")
        };
        bad(file, format!("{key}{}", e.into_inner()))
    })
}

/// Each size at least 1 and at most 2^24 (far beyond any model, keeping
/// every shape product in range).
pub(crate) fn check_sizes(file: &str, sizes: &[(&str, usize)]) -> Result<()> {
    if let Some((key, _)) = sizes.iter().find(|(_, n)| *n == 0) {
        return Err(bad(file, format!("{key} must be at least 1")));
    }
    if let Some((key, n)) = sizes.iter().find(|(_, n)| *n > 1 << 24) {
        return Err(bad(file, format!("{key} {n} is implausibly large")));
    }
    Ok(())
}

/// A norm's ε: finite and > 0.
pub(crate) fn check_eps(file: &str, key: &str, eps: f64) -> Result<()> {
    if !(eps > 0.0 && eps.is_finite()) {
        return Err(bad(file, format!("{key} {eps} must be > 0")));
    }
    Ok(())
}

/// Keys of mixture-of-experts configs (no supported family has experts).
const MOE_KEYS: [&str; 6] = [
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "router_aux_loss_coef",
];

/// An error for what no family here computes: a `quantization_config`,
/// mixture-of-experts keys.
pub(crate) fn refuse_unsupported(obj: &Map<String, Value>, file: &str) -> Result<()> {
    let set = |k: &str| obj.get(k).is_some_and(|v| !v.is_null());
    if set("quantization_config") {
        return Err(bad(
            file,
            "quantization_config: quantized safetensors checkpoints (GPTQ, AWQ, bitsandbytes, \
             ...) are not supported; use an F32, F16 or BF16 one (LoadOptions::weights can \
             quantize it as it loads), or the model's llama.cpp .gguf file \
             (CausalLm::from_gguf)",
        ));
    }
    if let Some(key) = MOE_KEYS.iter().find(|k| set(k)) {
        return Err(bad(
            file,
            format!("{key}: mixture-of-experts models are not supported"),
        ));
    }
    Ok(())
}

/// `model_type` of `obj`, which must be one of `known`.
pub(crate) fn model_type(obj: &Map<String, Value>, file: &str, known: &[&str]) -> Result<String> {
    match obj.get("model_type").and_then(Value::as_str) {
        Some(t) if known.contains(&t) => Ok(t.to_string()),
        other => Err(bad(
            file,
            format!("model_type {other:?} is not one of {known:?}"),
        )),
    }
}

/// The shortest decimal of `v` as an f64, so `1e-5f32` is written `1e-5`.
pub(crate) fn shortest(v: f32) -> f64 {
    v.to_string().parse().unwrap_or(v as f64)
}

/// Pretty JSON with a final newline, as transformers writes it.
pub(crate) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

/// `eos_token_id` in `obj`: one id, a list, or nothing.
pub(crate) fn insert_eos(obj: &mut Map<String, Value>, eos: &[i32]) {
    match eos {
        [] => {}
        [one] => {
            obj.insert("eos_token_id".into(), (*one).into());
        }
        many => {
            obj.insert("eos_token_id".into(), many.to_vec().into());
        }
    }
}

/// The text of a `config.json` at `path`, its size checked before reading.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn read_text(path: &std::path::Path) -> Result<String> {
    let max = FileLimits::current().max_config_bytes;
    crate::nn::file_limits::read_text_limited(path, max, "max_config_bytes").map_err(|m| {
        let hint = if path.exists() {
            ""
        } else {
            "; a Hugging Face model directory has config.json"
        };
        Error::Checkpoint(format!("{}: {m}{hint}", path.display()))
    })
}

/// A config's checks, run on one built in code: errors as invalid
/// arguments of `name` rather than as a checkpoint file's.
pub(crate) fn in_code(name: &'static str, check: impl FnOnce(&str) -> Result<()>) -> Result<()> {
    check(name).map_err(|e| match e {
        Error::Checkpoint(m) => Error::invalid(name, m),
        e => e,
    })
}

/// `obj` with `pad_token_id` and `eos_token_id`, as the pretty JSON text
/// `save_pretrained` writes.
pub(crate) fn finish_json(mut obj: Map<String, Value>, eos: &[i32], pad: Option<usize>) -> String {
    if let Some(pad) = pad {
        obj.insert("pad_token_id".into(), pad.into());
    }
    insert_eos(&mut obj, eos);
    pretty(&Value::Object(obj))
}

/// Query heads in whole groups of key/value heads, of an even width.
pub(crate) fn check_heads(file: &str, heads: usize, kv: usize, head_dim: usize) -> Result<()> {
    if kv == 0 || !heads.is_multiple_of(kv) || !head_dim.is_multiple_of(2) {
        return Err(bad(
            file,
            format!(
                "num_attention_heads {heads} must be a multiple of num_key_value_heads {kv}, and \
                 head_dim {head_dim} even"
            ),
        ));
    }
    Ok(())
}

/// A family's config read from its `config.json`.
pub trait ConfigFile: Sized {
    /// Parse the text of a `config.json`; `file` names it in errors.
    fn from_json(text: &str, file: &str) -> Result<Self>;

    /// Read and parse `path` (a `config.json`), its size checked first.
    #[cfg(not(target_arch = "wasm32"))]
    fn read(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        Self::from_json(&read_text(path)?, &path.display().to_string())
    }
}

/// The sizes every decoder's `config.json` has.
pub(crate) fn check_context(file: &str, vocab: usize, layers: usize, context: usize) -> Result<()> {
    check_sizes(
        file,
        &[
            ("vocab_size", vocab),
            ("num_hidden_layers", layers),
            ("max_position_embeddings", context),
        ],
    )
}

/// The RoPE of heads `head_dim` wide: whole heads, or (`partial`) an even
/// part of each with an even rest.
pub(crate) fn check_rope(
    file: &str,
    rope: &super::rope::RopeConfig,
    head_dim: usize,
    partial: bool,
) -> Result<()> {
    let r = rope.rotary_dim;
    let whole = rope.head_dim == head_dim && r == head_dim;
    let split = rope.head_dim == head_dim
        && r > 0
        && r <= head_dim
        && r.is_multiple_of(2)
        && (head_dim - r).is_multiple_of(2);
    if !(whole || (partial && split)) {
        let want = if partial {
            "an even part with an even rest"
        } else {
            "whole heads"
        };
        return Err(bad(
            file,
            format!(
                "the RoPE rotates {r} of heads {} wide, for head_dim {head_dim}: {want}",
                rope.head_dim
            ),
        ));
    }
    Ok(())
}

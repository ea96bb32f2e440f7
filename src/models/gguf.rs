//! [`CausalLm::from_gguf`]: a llama.cpp model file of any architecture the
//! crate runs. Its metadata becomes the family's `config.json` (read by the
//! same parser as a Hugging Face directory's), its tensor names the
//! Hugging Face ones, with what llama.cpp's converter did undone as they
//! are read: Llama's q/k rows interleaved for its RoPE, Gemma's `1 + w`
//! norms, GPT-2's transposed `Conv1D` weights. Quantized tensors stay
//! quantized on the device.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::{CausalLm, config_from_json};
use crate::device::Mesh;
use crate::error::{Error, Result};
use crate::nn::gguf::GgufFile;
use crate::nn::{GenerationConfig, GgufName, LoadOptions};

/// The `general.architecture`s this crate runs, and the Hugging Face
/// `model_type` each becomes.
pub const GGUF_ARCHITECTURES: &[(&str, &str)] = &[
    ("llama", "llama"),
    ("qwen2", "qwen2"),
    ("qwen3", "qwen3"),
    ("gpt2", "gpt2"),
    ("gemma2", "gemma2"),
    ("gemma3", "gemma3_text"),
    ("phi3", "phi3"),
];

impl CausalLm {
    /// Load the GGUF model file `path` (llama.cpp's format, version 2 or 3:
    /// `llama` — Llama, SmolLM2, Mistral —, `qwen2`, `qwen3`, `gpt2`,
    /// `gemma2`, `gemma3`, `phi3`) onto `mesh`, at any world size. F32
    /// and F16 tensors load as f32, BF16 weight matrices stay bf16; quantized ones (Q8_0,
    /// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) stay quantized on the
    /// device, split over the ranks in whole blocks, frozen. An
    /// architecture or tensor type the crate does not run, a missing key
    /// or a tensor that disagrees with the metadata is an
    /// [`Error::Checkpoint`] naming the file and the key or tensor, before
    /// anything loads; the mesh stays usable. The tokenizer is
    /// [`Tokenizer::from_gguf`](crate::nn::Tokenizer::from_gguf).
    ///
    /// ```no_run
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::Mesh;
    /// use wgpu_tp::models::CausalLm;
    /// use wgpu_tp::nn::Tokenizer;
    /// let mesh = Mesh::simulated(2)?;
    /// let model = CausalLm::from_gguf(&mesh, "SmolLM2-135M-Instruct-Q8_0.gguf")?;
    /// let tokenizer = Tokenizer::from_gguf("SmolLM2-135M-Instruct-Q8_0.gguf")?;
    /// # let _ = (model, tokenizer);
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_gguf(mesh: &Mesh, path: impl AsRef<Path>) -> Result<CausalLm> {
        Self::from_gguf_with(mesh, path, LoadOptions::default())
    }

    /// [`CausalLm::from_gguf`] with [`LoadOptions`]: the dtype the
    /// file's float weight matrices are kept in, and sequence parallelism.
    pub fn from_gguf_with(
        mesh: &Mesh,
        path: impl AsRef<Path>,
        opts: LoadOptions,
    ) -> Result<CausalLm> {
        let path = path.as_ref();
        let file = GgufFile::open(path)?;
        let (arch, json) = gguf_config(&file)?;
        let config = config_from_json(&json.to_string(), &format!("{} (metadata)", file.name()))?;
        let heads = file
            .u32(&format!("{arch}.attention.head_count"))?
            .unwrap_or(1) as usize;
        let kv = match file.u32(&format!("{arch}.attention.head_count_kv"))? {
            Some(kv) => kv as usize,
            None => heads,
        };
        let mut generation = GenerationConfig::default();
        if let Some(eos) = file.u32("tokenizer.ggml.eos_token_id")? {
            generation.eos_token_ids = vec![eos as i32];
        }
        let names = move |n: &str| gguf_name(&arch, n, heads, kv);
        CausalLm::from_gguf_as(mesh, config, path, file, names, generation, opts)
    }
}

/// `key` of the architecture's namespace.
fn key(arch: &str, k: &str) -> String {
    format!("{arch}.{k}")
}

/// The architecture of `file` and the `config.json` its metadata stands
/// for.
pub fn gguf_config(file: &GgufFile) -> Result<(String, Value)> {
    let arch: &str = file.require("general.architecture")?;
    let Some(&(_, model_type)) = GGUF_ARCHITECTURES.iter().find(|(a, _)| *a == arch) else {
        let known: Vec<&str> = GGUF_ARCHITECTURES.iter().map(|(a, _)| *a).collect();
        return Err(Error::Checkpoint(format!(
            "{}: key \"general.architecture\": {arch:?} is not supported; supported: {known:?}",
            file.name()
        )));
    };
    let u = |k: &str| -> Result<Option<usize>> { file.usize(&key(arch, k)) };
    let f = |k: &str| -> Result<Option<f64>> { file.f64(&key(arch, k)) };
    let req = |k: &str| -> Result<usize> { file.require::<u64>(&key(arch, k)).map(|v| v as usize) };
    let embed = file.require_tensor("token_embd.weight")?;
    let vocab = embed.shape()[0];
    if let Some(v) = u("vocab_size")?.filter(|&v| v != vocab) {
        return Err(Error::Checkpoint(format!(
            "{}: key {:?} is {v}, but tensor \"token_embd.weight\" has {vocab} rows",
            file.name(),
            key(arch, "vocab_size")
        )));
    }
    let (layers, hidden, heads) = (
        req("block_count")?,
        req("embedding_length")?,
        req("attention.head_count")?,
    );
    let kv = u("attention.head_count_kv")?.unwrap_or(heads);
    let ffn = match u("feed_forward_length")? {
        Some(f) => f,
        None => match file.tensor("blk.0.ffn_down.weight") {
            Some(t) => t.shape()[1],
            None => 4 * hidden,
        },
    };
    let context = u("context_length")?;
    let tied = file.tensor("output.weight").is_none();
    let id = |k: &str| file.u32(&format!("tokenizer.ggml.{k}_token_id"));
    let mut c = Map::new();
    let mut put = |k: &str, v: Value| {
        c.insert(k.into(), v);
    };
    put("model_type", model_type.into());
    put("vocab_size", vocab.into());
    put("tie_word_embeddings", tied.into());
    put("bos_token_id", json!(id("bos")?));
    put("eos_token_id", json!(id("eos")?));
    put("pad_token_id", json!(id("padding")?));
    if arch == "gpt2" {
        put("n_layer", layers.into());
        put("n_embd", hidden.into());
        put("n_head", heads.into());
        put("n_inner", ffn.into());
        let positions = file.require_tensor("position_embd.weight")?.shape()[0];
        put("n_positions", context.unwrap_or(positions).into());
        put("activation_function", "gelu_new".into());
        let eps = f("attention.layer_norm_epsilon")?.unwrap_or(1e-5);
        put("layer_norm_epsilon", eps.into());
        return Ok((arch.to_string(), Value::Object(c)));
    }
    let head_dim = match (u("attention.key_length")?, arch) {
        (Some(d), _) => d,
        (None, "llama") => u("rope.dimension_count")?.unwrap_or(hidden / heads.max(1)),
        _ => hidden / heads.max(1),
    };
    put("num_hidden_layers", layers.into());
    put("hidden_size", hidden.into());
    put("intermediate_size", ffn.into());
    put("num_attention_heads", heads.into());
    put("num_key_value_heads", kv.into());
    put("head_dim", head_dim.into());
    if let Some(n) = context {
        put("max_position_embeddings", n.into());
    }
    let eps = f("attention.layer_norm_rms_epsilon")?;
    put("rms_norm_eps", json!(eps.unwrap_or(1e-6)));
    let theta_default = if arch == "gemma3" { 1e6 } else { 1e4 };
    put(
        "rope_theta",
        f("rope.freq_base")?.unwrap_or(theta_default).into(),
    );
    if let Some(scaling) = rope_scaling(file, arch, head_dim)? {
        put("rope_scaling", scaling);
    }
    match arch {
        "llama" => {
            put(
                "attention_bias",
                file.tensor("blk.0.attn_q.bias").is_some().into(),
            );
            put(
                "mlp_bias",
                file.tensor("blk.0.ffn_gate.bias").is_some().into(),
            );
        }
        "gemma2" | "gemma3" => {
            let gemma2 = arch == "gemma2";
            put("hidden_activation", "gelu_pytorch_tanh".into());
            // llama.cpp's attention scale: the 27B models' H / heads, else
            // the head width.
            let big = (gemma2 && layers == 46) || (!gemma2 && layers == 62);
            let scalar = if big { hidden / heads.max(1) } else { head_dim };
            put("query_pre_attn_scalar", scalar.into());
            let window = u("attention.sliding_window")?;
            let window = if gemma2 {
                Some(window.unwrap_or(4096))
            } else {
                window
            };
            let pattern = sliding_pattern(file, arch, layers, if gemma2 { 2 } else { 6 })?;
            match window.filter(|&w| w > 0) {
                Some(w) => {
                    put("sliding_window", w.into());
                    let types: Vec<&str> = pattern
                        .iter()
                        .map(|&s| {
                            if s {
                                "sliding_attention"
                            } else {
                                "full_attention"
                            }
                        })
                        .collect();
                    put("layer_types", json!(types));
                }
                None => put("layer_types", json!(vec!["full_attention"; layers])),
            }
            let softcap =
                |k: &str, default: Option<f64>| -> Result<Value> { Ok(json!(f(k)?.or(default))) };
            let (attn, last) = if gemma2 {
                (Some(50.0), Some(30.0))
            } else {
                (None, None)
            };
            put(
                "attn_logit_softcapping",
                softcap("attn_logit_softcapping", attn)?,
            );
            put(
                "final_logit_softcapping",
                softcap("final_logit_softcapping", last)?,
            );
            if !gemma2 {
                put(
                    "rope_local_base_freq",
                    f("rope.freq_base_swa")?.unwrap_or(1e4).into(),
                );
            }
        }
        "phi3" => {
            let original = u("rope.scaling.original_context_length")?.or(context);
            put("original_max_position_embeddings", json!(original));
            let rotary = u("rope.dimension_count")?.unwrap_or(head_dim);
            put(
                "partial_rotary_factor",
                (rotary as f64 / head_dim.max(1) as f64).into(),
            );
            let window = u("attention.sliding_window")?.filter(|&w| w > 0);
            put("sliding_window", json!(window));
        }
        _ => {}
    }
    Ok((arch.to_string(), Value::Object(c)))
}

/// Which layers attend in a sliding window: `attention.sliding_window_pattern`
/// (a period, or one bool per layer), else llama.cpp's default period
/// (`layer % period < period - 1` slides).
fn sliding_pattern(file: &GgufFile, arch: &str, layers: usize, period: usize) -> Result<Vec<bool>> {
    let k = key(arch, "attention.sliding_window_pattern");
    let period = match file.get(&k) {
        Some(v) if v.as_array().is_some() => {
            let flags: Vec<bool> = file.require(&k)?;
            if flags.len() != layers {
                return Err(Error::Checkpoint(format!(
                    "{}: key {k:?}: {} flags for {layers} layers",
                    file.name(),
                    flags.len()
                )));
            }
            return Ok(flags);
        }
        Some(_) => file.require::<usize>(&k)?,
        None => period,
    };
    Ok((0..layers)
        .map(|l| period > 0 && l % period < period - 1)
        .collect())
}

/// `rope_scaling` from `rope.scaling.*`, Llama 3's `rope_freqs` tensor or
/// Phi-3's LongRoPE factor tensors.
fn rope_scaling(file: &GgufFile, arch: &str, head_dim: usize) -> Result<Option<Value>> {
    let f = |k: &str| file.f64(&key(arch, k));
    let kind = file.string(&key(arch, "rope.scaling.type"))?;
    let original = file.usize(&key(arch, "rope.scaling.original_context_length"))?;
    let floats = |name: &str| -> Result<Option<Vec<f64>>> {
        let Some(t) = file.tensor(name) else {
            return Ok(None);
        };
        if t.dtype() != crate::DType::F32 {
            return Err(Error::Checkpoint(format!(
                "{}: tensor {name:?} is {}, expected F32",
                file.name(),
                t.dtype()
            )));
        }
        let bytes = file.tensor_bytes(name)?;
        Ok(Some(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
                .collect(),
        ))
    };
    if let (Some(long), Some(short)) = (
        floats("rope_factors_long.weight")?,
        floats("rope_factors_short.weight")?,
    ) {
        return Ok(Some(json!({
            "rope_type": "longrope",
            "long_factor": long,
            "short_factor": short,
        })));
    }
    if let Some(factors) = floats("rope_freqs.weight")? {
        let theta = f("rope.freq_base")?.unwrap_or(1e4);
        return llama3(file, &factors, theta, head_dim).map(Some);
    }
    Ok(match kind {
        None | Some("none") => None,
        Some("linear") => {
            Some(json!({"rope_type": "linear", "factor": f("rope.scaling.factor")?.unwrap_or(1.0)}))
        }
        Some("yarn") => {
            let mut y =
                json!({"rope_type": "yarn", "factor": f("rope.scaling.factor")?.unwrap_or(1.0)});
            if let Some(o) = original {
                y["original_max_position_embeddings"] = o.into();
            }
            for (g, h) in [
                ("rope.scaling.yarn_beta_fast", "beta_fast"),
                ("rope.scaling.yarn_beta_slow", "beta_slow"),
                ("rope.scaling.yarn_ext_factor", "extrapolation_factor"),
                ("rope.scaling.yarn_attn_factor", "attention_factor"),
            ] {
                if let Some(v) = f(g)? {
                    y[h] = v.into();
                }
            }
            Some(y)
        }
        Some(other) => {
            return Err(Error::Checkpoint(format!(
                "{}: key {:?}: rope scaling {other:?} is not supported (linear, yarn)",
                file.name(),
                key(arch, "rope.scaling.type")
            )));
        }
    })
}

/// Llama 3's `rope_scaling` whose per-frequency divisors `factors`
/// (`rope_freqs.weight`) are: the settings every Llama 3.1 / 3.2 model
/// ships (low 1, high 4, original context 8192) with the largest divisor
/// as the factor, checked against every divisor.
fn llama3(file: &GgufFile, factors: &[f64], theta: f64, head_dim: usize) -> Result<Value> {
    let factor = factors.iter().copied().fold(1.0, f64::max);
    let (low, high, old) = (1.0, 4.0, 8192.0);
    let expect = |i: usize| -> f64 {
        let freq = 1.0 / theta.powf(2.0 * i as f64 / head_dim as f64);
        let wavelen = 2.0 * std::f64::consts::PI / freq;
        let (low_wl, high_wl) = (old / low, old / high);
        if wavelen < high_wl {
            1.0
        } else if wavelen > low_wl {
            factor
        } else {
            let s = (old / wavelen - low) / (high - low);
            1.0 / ((1.0 - s) / factor + s)
        }
    };
    let fits = factors.len() == head_dim / 2
        && factors
            .iter()
            .enumerate()
            .all(|(i, &v)| (v - expect(i)).abs() <= 1e-4 * v.abs());
    if !fits {
        return Err(Error::Checkpoint(format!(
            "{}: tensor \"rope_freqs.weight\" holds RoPE divisors that are not Llama 3's \
             (factor {factor}, low 1, high 4, original context 8192); this file's RoPE is not supported",
            file.name()
        )));
    }
    Ok(json!({
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": old as usize,
    }))
}

/// The Hugging Face name of GGUF tensor `name` of `arch` and what the
/// converter did to it; a name this knows not stays as it is (so loading
/// reports it), a tensor the config carries instead (`rope_freqs`) none.
pub fn gguf_name(arch: &str, name: &str, heads: usize, kv: usize) -> Option<GgufName> {
    let gpt2 = arch == "gpt2";
    let gemma = arch.starts_with("gemma");
    let same = || GgufName {
        key: name.to_string(),
        ..GgufName::default()
    };
    let (base, suffix) = name.rsplit_once('.')?;
    let mut out = GgufName::default();
    let hf: String = if let Some(rest) = base.strip_prefix("blk.") {
        let (layer, part) = rest.split_once('.')?;
        let prefix = if gpt2 {
            format!("transformer.h.{layer}")
        } else {
            format!("model.layers.{layer}")
        };
        let weight = suffix == "weight";
        let local = match (part, arch) {
            ("attn_norm", "gpt2") => "ln_1",
            ("attn_norm", _) => "input_layernorm",
            ("attn_q", _) => "self_attn.q_proj",
            ("attn_k", _) => "self_attn.k_proj",
            ("attn_v", _) => "self_attn.v_proj",
            ("attn_qkv", "gpt2") => "attn.c_attn",
            ("attn_qkv", "phi3") => "self_attn.qkv_proj",
            ("attn_output", "gpt2") => "attn.c_proj",
            ("attn_output", _) => "self_attn.o_proj",
            ("attn_q_norm", _) => "self_attn.q_norm",
            ("attn_k_norm", _) => "self_attn.k_norm",
            ("post_attention_norm", _) if gemma => "post_attention_layernorm",
            ("ffn_norm", "gpt2") => "ln_2",
            ("ffn_norm", _) if gemma => "pre_feedforward_layernorm",
            ("ffn_norm", _) => "post_attention_layernorm",
            ("post_ffw_norm", _) if gemma => "post_feedforward_layernorm",
            ("ffn_gate", _) => "mlp.gate_proj",
            ("ffn_up", "gpt2") => "mlp.c_fc",
            ("ffn_up", "phi3") => "mlp.gate_up_proj",
            ("ffn_up", _) => "mlp.up_proj",
            ("ffn_down", "gpt2") => "mlp.c_proj",
            ("ffn_down", _) => "mlp.down_proj",
            _ => return Some(same()),
        };
        if arch == "llama" {
            out.permuted_heads = match part {
                "attn_q" => Some(heads),
                "attn_k" => Some(kv),
                _ => None,
            };
        }
        out.transposed = gpt2 && weight && !local.starts_with("ln_");
        format!("{prefix}.{local}")
    } else {
        match (base, gpt2) {
            ("token_embd", false) => "model.embed_tokens".into(),
            ("token_embd", true) => "transformer.wte".into(),
            ("position_embd", true) => "transformer.wpe".into(),
            ("output_norm", false) => "model.norm".into(),
            ("output_norm", true) => "transformer.ln_f".into(),
            ("output", _) => "lm_head".into(),
            ("rope_freqs" | "rope_factors_long" | "rope_factors_short", _) => return None,
            _ => return Some(same()),
        }
    };
    if gemma && base.ends_with("norm") && suffix == "weight" {
        out.minus = 1.0;
    }
    out.key = format!("{hf}.{suffix}");
    Some(out)
}

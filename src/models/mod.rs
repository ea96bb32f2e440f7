//! Layer 6, models: one file per model family, each a config (its
//! `config.json`, as a [`DecoderConfig`]), a [`Block`](crate::nn::Block)
//! and its checkpoint names, built into the one decoder skeleton of
//! [`nn`](crate::nn) ([`Decoder`](crate::nn::Decoder), here
//! [`CausalLm`]), which loads, saves, generates and splits into pipeline
//! stages for every family alike.
//!
//! - `gpt2.rs`: GPT-2 ([`Gpt2Config`], [`Gpt2Block`]).
//! - `llama.rs`: the Llama family — Llama, SmolLM2, Mistral, Qwen2, Qwen3
//!   ([`LlamaConfig`], [`LlamaBlock`]).
//! - `gemma.rs`: Gemma 3 (text) and Gemma 2 ([`GemmaConfig`], [`GemmaBlock`]).
//! - `phi3.rs`: Phi-3, Phi-3.5, Phi-4-mini ([`Phi3Config`], [`Phi3Block`]).
//! - `causal.rs`: [`CausalLm::from_pretrained`], the family chosen by
//!   `config.json`'s `model_type` from [`FAMILIES`].
//! - `gguf.rs`: [`CausalLm::from_gguf`], a llama.cpp file's architecture,
//!   metadata and tensor names as the families' config and names
//!   ([`GGUF_ARCHITECTURES`]).
//! - `gguf_save.rs`: [`CausalLm::save_gguf`], the inverse: any model
//!   written as a GGUF file llama.cpp loads ([`GgufSaveOptions`]).
//!
//! Adding a family is adding its file, its `mod` and `pub use` lines here,
//! and one line in [`FAMILIES`].

#[cfg(not(target_arch = "wasm32"))]
mod causal;
mod gemma;
#[cfg(not(target_arch = "wasm32"))]
mod gguf;
#[cfg(not(target_arch = "wasm32"))]
mod gguf_save;
mod gpt2;
mod llama;
mod phi3;

pub use crate::nn::{GenerationConfig, LoadOptions};
pub use gemma::{GEMMA_FAMILY, GemmaBlock, GemmaConfig};
#[cfg(not(target_arch = "wasm32"))]
pub use gguf::{GGUF_ARCHITECTURES, gguf_config, gguf_name};
#[cfg(not(target_arch = "wasm32"))]
pub use gguf_save::GgufSaveOptions;
pub use gpt2::{Gpt2Attention, Gpt2AttentionConfig, Gpt2Block, Gpt2Config};
pub use llama::{LLAMA_FAMILY, LlamaBlock, LlamaConfig};
pub use phi3::{Phi3Block, Phi3Config};

use crate::error::{Error, Result};
use crate::nn::{ConfigFile, DecoderConfig};

/// A causal language model of any family: the decoder skeleton
/// ([`Decoder`](crate::nn::Decoder)) with the family's blocks.
pub type CausalLm = crate::nn::Decoder;

/// A family's `config.json` reader: the text and its path (for errors).
pub type ParseConfig = fn(&str, &str) -> Result<Box<dyn DecoderConfig>>;

/// Every family this crate runs: the `model_type`s it reads, and its reader.
pub const FAMILIES: &[(&[&str], ParseConfig)] = &[
    (&["gpt2"], parse::<Gpt2Config>),
    (&LLAMA_FAMILY, parse::<LlamaConfig>),
    (&GEMMA_FAMILY, parse::<GemmaConfig>),
    (&["phi3"], parse::<Phi3Config>),
];

/// A family's reader of `config.json`, its config boxed.
fn parse<C: ConfigFile + DecoderConfig>(text: &str, file: &str) -> Result<Box<dyn DecoderConfig>> {
    Ok(Box::new(C::from_json(text, file)?))
}

/// The config a `config.json`'s text describes, read by the family its
/// `model_type` names; `file` names it in errors.
pub fn config_from_json(text: &str, file: &str) -> Result<Box<dyn DecoderConfig>> {
    let obj = crate::nn::hf_config::object(text, file)?;
    let model_type = obj.get("model_type").and_then(|v| v.as_str());
    for (types, parse) in FAMILIES {
        if model_type.is_some_and(|t| types.contains(&t)) {
            return parse(text, file);
        }
    }
    let known: Vec<&str> = FAMILIES
        .iter()
        .flat_map(|(t, _)| t.iter().copied())
        .collect();
    Err(Error::Checkpoint(format!(
        "{file}: model_type {model_type:?} is not supported; supported: {known:?}"
    )))
}

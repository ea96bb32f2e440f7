//! Layer 6, models: one module per model family, built from the generic
//! layers of [`nn`](crate::nn), with the Hugging Face directories each
//! reads and writes.
//!
//! - [`Llama`]: the Llama family (`llama`, `mistral`, `qwen2`, `qwen3`).
//! - [`Gpt`](crate::nn::Gpt): GPT-2 (still under `nn`, re-exported here).
//! - [`CausalLm`]: either, picked by a directory's `model_type`.

#[cfg(not(target_arch = "wasm32"))]
mod causal;
mod llama;

pub use crate::nn::{Gpt, GptConfig};
#[cfg(not(target_arch = "wasm32"))]
pub use causal::CausalLm;
#[cfg(not(target_arch = "wasm32"))]
pub use llama::GenerationConfig;
pub use llama::{LLAMA_FAMILY, Llama, LlamaConfig, LlamaDecoderLayer, LlamaModel};

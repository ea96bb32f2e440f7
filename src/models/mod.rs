//! Layer 6, models: one module per model family, built from the generic
//! layers of [`nn`](crate::nn), with the Hugging Face directories each
//! reads and writes.
//!
//! - [`Llama`]: the Llama family (`llama`, `mistral`, `qwen2`, `qwen3`).
//! - [`Gpt`]: GPT-2 (`gpt2/`), with its block, fused-QKV attention and
//!   Hugging Face directories.
//! - [`CausalLm`]: either, picked by a directory's `model_type`.

#[cfg(not(target_arch = "wasm32"))]
mod causal;
mod gpt2;
mod llama;
mod load_options;

#[cfg(not(target_arch = "wasm32"))]
pub use causal::CausalLm;
pub use gpt2::{
    AttentionConfig, BlockConfig, Gpt, GptConfig, GptStage, ParallelSelfAttention, TransformerBlock,
};
#[cfg(not(target_arch = "wasm32"))]
pub use gpt2::{HfGpt2Config, pretrained_config};
#[cfg(not(target_arch = "wasm32"))]
pub use llama::GenerationConfig;
pub use llama::{LLAMA_FAMILY, Llama, LlamaConfig, LlamaDecoderLayer, LlamaModel, LlamaStage};
pub use load_options::LoadOptions;

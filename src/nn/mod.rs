//! Layer 5, neural-network pieces: parallel layers written as forward code
//! on `DTensor` operations (their backward is the tape's), norms (LayerNorm, RMSNorm) and dropout, attention with heads
//! split over ranks, the MLP, the transformer block and a GPT that trains
//! and generates, the vocab-parallel loss,
//! initialisers, optimisers and checkpoints (the crate's own, and Hugging
//! Face GPT-2 directories), and the [`Tokenizer`] of those directories.
//! Layers compose the
//! [`Mapping`](crate::tensor::Mapping)s and redistributions of the tensor
//! layer (the ring-overlapped ones included) and never import `comm`. A
//! serial layer is the same code on a mesh of one rank.

mod attention;
mod block;
#[cfg(not(target_arch = "wasm32"))]
mod chat;
pub(crate) mod checkpoint;
mod cross_entropy;
mod dropout;
mod embedding;
mod gated_mlp;
mod generate;
mod gpt;
mod gqa_attention;
mod init;
mod linear;
mod mlp;
mod model;
mod module;
mod norm;
mod optim;
mod parameter;
mod params;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod pretrained;
mod rope;
mod sampling;
#[cfg(not(target_arch = "wasm32"))]
mod tokenizer;

pub use crate::tensor::{
    RowPenalty, VocabCandidates, vocab_candidates, vocab_candidates_async, vocab_penalized_row,
    vocab_top_k, vocab_top_k_async,
};
pub use attention::{AttentionConfig, KvCache, ParallelSelfAttention};
pub use block::{BlockConfig, TransformerBlock};
#[cfg(not(target_arch = "wasm32"))]
pub use chat::{ChatMessage, ChatTemplate};
pub use checkpoint::{
    from_safetensors_bytes, load_safetensors, save_safetensors, to_safetensors_bytes,
    to_safetensors_bytes_as,
};
pub use cross_entropy::{CrossEntropyConfig, Reduction, VocabParallelCrossEntropy};
pub use dropout::{Dropout, DropoutConfig};
pub use embedding::{Embedding, EmbeddingConfig, ParallelEmbedding, VocabParallelEmbedding};
pub use gated_mlp::{GatedMlp, GatedMlpConfig};
pub use generate::{CausalDecoder, Distribution, generate, generate_uncached};
pub use gpt::{Gpt, GptConfig};
pub use gqa_attention::{GqaAttention, GqaConfig};
pub use init::{Init, InitRng};
pub use linear::{
    ColumnParallelConfig, ColumnParallelLinear, Overlap, ReplicatedLinear, ReplicatedLinearConfig,
    RowParallelConfig, RowParallelLinear,
};
pub use mlp::{MlpConfig, ParallelMlp};
pub use model::{MlpLanguageModel, MlpLmConfig};
pub use module::Module;
pub use norm::{LayerNorm, NormConfig, RMSNorm};
pub use optim::{AdamW, Sgd};
pub use parameter::{ParamId, Parameter};
pub use params::{Params, join_name};
#[cfg(not(target_arch = "wasm32"))]
pub use pretrained::{HfGpt2Config, pretrained_config};
pub use rope::{RopeConfig, RopeScaling};
pub use sampling::{SampleOptions, Sampling};
#[cfg(not(target_arch = "wasm32"))]
pub use tokenizer::{TokenStream, Tokenizer};
/// `#[derive(Params)]`: see the [`Params`] trait.
pub use wgpu_tp_derive::Params;

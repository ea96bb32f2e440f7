//! Layer 5, neural-network pieces, generic over model families: parallel
//! layers written as forward code on `DTensor` operations (their backward is
//! the tape's), and what trains, saves and runs them. Model families are
//! built from these in [`models`](crate::models) (layer 6), which this layer
//! never imports. Layers compose the
//! [`Mapping`](crate::tensor::Mapping)s and redistributions of the tensor
//! layer (the ring-overlapped ones included) and never import `comm`. A
//! serial layer is the same code on a mesh of one rank.
//!
//! Files:
//! - layers: `linear/` (column-, row-parallel and replicated linears),
//!   `embedding.rs`, `norm.rs` (LayerNorm, RMSNorm), `dropout.rs`,
//!   `gqa_attention.rs` (grouped-query attention), `rope.rs`, `mlp.rs`
//!   ([`ParallelMlp`]), `gated_mlp.rs` ([`GatedMlp`]), `cross_entropy.rs`
//!   (the vocab-parallel loss), `model.rs` (a small [`MlpLanguageModel`]);
//! - decoding: `kv_cache.rs`, `generate.rs` ([`CausalDecoder`] and the
//!   generation loop), `sampling.rs`, `tokenizer.rs`, `tokenizer_gguf.rs`
//!   (GGUF tokenizer metadata), `chat.rs`, `chat/`;
//! - parameters and training: `parameter.rs`, `params.rs`
//!   (`#[derive(Params)]` names), `module.rs`, `init.rs`, `optim.rs`,
//!   `data_parallel.rs` ([`DataParallel`]: gradients averaged over a
//!   mesh's data-parallel axis), `zero.rs` ([`ZeroAdamW`]: AdamW's state
//!   and update sharded over that axis), `pipeline.rs` ([`Pipeline`]:
//!   stages along a pipeline axis, run 1F1B over micro-batches);
//! - files: `checkpoint.rs` (the crate's own safetensors checkpoints),
//!   `pretrained/` (Hugging Face weight files, read and written for any
//!   family) and [`gguf`] (llama.cpp's GGUF container, read and written).

mod chat;
pub(crate) mod checkpoint;
mod cross_entropy;
mod data_parallel;
mod decoder;
mod dropout;
mod embedding;
mod file_limits;
mod gated_mlp;
mod generate;
mod generation_config;
pub mod gguf;
mod gqa_attention;
mod held;
pub(crate) mod hf_config;
mod init;
mod kv_cache;
mod linear;
pub mod lora;
mod mlp;
mod model;
mod module;
mod norm;
mod optim;
#[cfg(not(target_arch = "wasm32"))]
mod optim_state;
mod parameter;
mod params;
mod pipeline;
#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod pretrained;
mod rope;
mod rope_json;
mod sampling;
#[cfg(not(target_arch = "wasm32"))]
pub mod sft;
#[cfg(not(target_arch = "wasm32"))]
mod tokenizer;
#[cfg(not(target_arch = "wasm32"))]
mod tokenizer_gguf;
#[cfg(not(target_arch = "wasm32"))]
mod tokenizer_scan;
mod zero;

pub use chat::{
    ChatContent, ChatLimits, ChatMessage, ChatTemplate, ContentPart, ExtraKeys, FunctionCall,
    OrderedJson, ToolArguments, ToolCall,
};
pub use checkpoint::{
    from_safetensors_bytes, load_safetensors, load_safetensors_dir, save_safetensors,
    to_safetensors_bytes, to_safetensors_bytes_as,
};
pub use cross_entropy::{CrossEntropyConfig, Reduction, VocabParallelCrossEntropy};
pub use data_parallel::DataParallel;
pub use decoder::{
    AsAny, Block, BlockAlias, BlockBuild, Branch, CloneConfig, Decoder, DecoderConfig, DecoderSpec,
    FinalNorm, GqaBlockSizes, IntoDecoderConfig, LoadOptions, Names, Stored, Stream,
    num_parameters,
};
pub use dropout::{Dropout, DropoutConfig};
pub use embedding::{Embedding, EmbeddingConfig, ParallelEmbedding, VocabParallelEmbedding};
pub use file_limits::FileLimits;
pub use gated_mlp::{GatedMlp, GatedMlpConfig};
pub use generate::{CausalDecoder, Distribution, generate, generate_uncached};
pub use generation_config::GenerationConfig;
pub use gqa_attention::{GqaAttention, GqaConfig};
pub use hf_config::ConfigFile;
pub use init::{Init, InitRng};
pub use kv_cache::{KvCache, Step};
pub use linear::{
    ColumnParallelConfig, ColumnParallelLinear, KvHeadConfig, KvHeadLinear, Overlap,
    ReplicatedLinear, ReplicatedLinearConfig, RowParallelConfig, RowParallelLinear,
};
pub use lora::{Adaptable, Lora, LoraConfig};
pub use mlp::{MlpConfig, ParallelMlp};
pub use model::{MlpLanguageModel, MlpLmConfig};
pub use module::Module;
pub use norm::{LayerNorm, Norm, NormConfig, Normalize, RMSNorm};
pub use optim::{AdamW, Sgd};
pub use parameter::{ParamId, Parameter};
pub use params::{Params, join_name};
pub use pipeline::{Pipeline, PipelineStage, StageDecoder, Work};
#[cfg(not(target_arch = "wasm32"))]
pub use pretrained::gguf::GgufName;
pub use rope::{RopeConfig, RopeScaling};
pub use sampling::{SampleOptions, Sampling};
#[cfg(not(target_arch = "wasm32"))]
pub use tokenizer::{TokenStream, Tokenizer};
#[cfg(not(target_arch = "wasm32"))]
pub use tokenizer_gguf::GgufVocab;
/// `#[derive(Params)]`: see the [`Params`] trait.
pub use wgpu_tp_derive::Params;
pub use zero::ZeroAdamW;

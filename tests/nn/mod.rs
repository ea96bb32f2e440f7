//! Layer 5, `src/nn/`: layers against the f64 references and the serial
//! (P = 1) run, their exact communication, optimisers, initialisers,
//! checkpoints and whole models:
//! - `linear`: column- and row-parallel layers, the Megatron MLP pair;
//! - `mixed_precision`: the same layers fed f16 (where `SHADER_F16` exists);
//! - `sequence_parallel`: the same layers with tokens split, plain and
//!   ring-overlapped, on both transports;
//! - `embedding`: vocab- and dim-split embeddings;
//! - `cross_entropy`: the vocab-parallel cross-entropy;
//! - `parameter`: gradient accumulation and `zero_grad`;
//! - `params`: `#[derive(Params)]` names and order (a user struct, `Gpt`),
//!   and an optimiser stepping a set of borrowed parameters;
//! - `optim`: SGD and AdamW;
//! - `fuzz`: mutated config.json, tokenizer.json, GGUF, model and adapter
//!   directories: an answer or an error, never a panic or a hang;
//! - `sft`: fine-tuning data (JSONL errors, the assistant-only mask,
//!   packing) and AdamW's state resumed at another world size;
//! - `pack_cache`: layers' kept weight packs follow optimiser steps;
//! - `init`: initialisers;
//! - `checkpoint`: safetensors save/load across world sizes;
//! - `model`: a two-layer MLP and `MlpLanguageModel` training end to end;
//! - `shard_units`: linear layers that keep whole attention heads per rank;
//! - `norm`: LayerNorm and RMSNorm, replicated and sequence-parallel;
//! - `rope`: `RopeConfig`'s frequencies and tables against transformers'
//!   (`fixtures/hf/rope/rope.json`, every RoPE variant);
//! - `attention`: self-attention on the tape, dropout, cached decoding;
//! - `dropout`: masks independent of the world size and placement;
//! - `generate`: the on-device greedy / top-k choice against the host sampler;
//! - `sampling`: repetition penalty, top-k and top-p on the device against
//!   an f64 reference of transformers' processors and transformers itself;
//! - `fused_decode`: decoding runs no separate bias, residual or activation
//!   kernel; `forward_activation` gives the two steps' bits;
//! - `gpt`: the transformer block and the GPT against an f64 model, cached
//!   decoding, GPT-2 names and checkpoints across world sizes;
//! - `pretrained`: Hugging Face GPT-2 directories against an independent f64
//!   numpy GPT-2, saved and loaded across world sizes, and bad directories;
//! - `model_dir`: weights and tokenizer of one directory together: the
//!   shipped tiny GPT-2 decodes the same text at every world size; GPT-2's
//!   vocab.json + merges.txt stream generated text;
//! - `tokenizer`: GPT-2's vocabulary against tiktoken's `r50k_base`, round
//!   trips, streaming decode, bad files;
//! - `gguf`: the GGUF container against gguf-py's files and reader, the
//!   writer's pinned output, truncated and malformed files.
//! - `tokenizer_gguf`: tokenizers from and to GGUF metadata against the
//!   original tokenizer.json, llama.cpp and llama.cpp's converter.

/// Relative tolerance of every layer-level f64 comparison (docs/MATH.md,
/// "How it is tested: tolerances and coverage").
const TOL: f64 = 1e-5;

mod attention;
mod blocked;
mod chat;
mod chat_limits;
mod checkpoint;
mod cross_entropy;
mod data_parallel;
mod dropout;
mod embedding;
mod fused_decode;
mod fuzz;
mod generate;
mod gguf;
mod gpt;
mod hostile_files;
mod init;
mod kv_heads;
mod linear;
mod mixed_precision;
mod model;
mod model_dir;
mod norm;
mod optim;
mod pack_cache;
mod parameter;
mod params;
mod pipeline;
mod pretrained;
mod rope;
mod sampling;
mod sequence_parallel;
mod sft;
mod shard_units;
mod tokenizer;
mod tokenizer_gguf;
mod zero;

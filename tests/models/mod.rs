//! Layer 6, `src/models/`: model families against transformers itself.
//! - `llama`: the Llama family (CausalLm 3 with GQA and `llama3` RoPE and an
//!   untied head, a SmolLM2-like tied 9/3-head model, Qwen2 with q/k/v
//!   biases stored in BF16 and sharded, Qwen3 with q/k norms and `head_dim`
//!   ≠ hidden / heads, Mistral with a window shorter than the sequence)
//!   against fixtures transformers computed in float64
//!   (`tests/fixtures/hf/make_fixtures.py`), at P = 1..4 on both
//!   transports and at every P up to the heads for one model, sequence
//!   parallel too; cached decoding and greedy tokens; AdamW steps equal
//!   across P.
//! - `llama_bad_dirs`: unsupported configs and bad weight files are errors
//!   naming the key, file and tensor; the mesh still works.
//! - `bf16_weights`: models loaded with weights kept in bf16, equal bit for
//!   bit to f32 weights rounded to bf16, and greedy tokens as f32's.
//! - `sizes`: parameter counts, and configurations past memory refused
//!   before anything is allocated (GPT-2 and the Llama family).

mod bf16_weights;
mod llama;
mod llama_bad_dirs;
mod llama_pipeline;
mod sizes;

//! Layer 6, `src/models/`: model families against transformers itself.
//! - `families`: every family (Llama 3 with GQA and `llama3` RoPE and an
//!   untied head, a SmolLM2-like tied 9/3-head model, Qwen2 with q/k/v
//!   biases stored in BF16 and sharded, Qwen3 with q/k norms and `head_dim`
//!   ≠ hidden / heads, Mistral with a window shorter than the sequence,
//!   Gemma 3 with sliding and global layers, Gemma 2 with soft-capping,
//!   Phi-3 with fused projections, partial rotary and longrope) against
//!   fixtures transformers computed in float64
//!   (`tests/fixtures/hf/make_fixtures.py`), at P = 1..4 on both
//!   transports and at every P up to the heads for one model, sequence
//!   parallel too; cached decoding and greedy tokens; AdamW steps equal
//!   across P; `save_pretrained` read back across P.
//! - `bad_dirs`: unsupported configs and bad weight files are errors
//!   naming the key, file and tensor; the mesh still works.
//! - `gguf`: `.gguf` files of every architecture (quantized, mixed
//!   types) against transformers on the dequantized weights, at P = 1..4,
//!   and bad files.
//! - `gguf_save`: `save_gguf` writing GGUF fixtures back byte for byte and
//!   Hugging Face models as F32 / Q8_0 files read back; what llama.cpp
//!   cannot run refused.
//! - `lora`: PEFT's LoRA adapters for three families against PEFT itself
//!   (logits, gradients, AdamW steps, merging) at P = 1..6, both
//!   transports, sequence-parallel; our adapter files read back.
//! - `pipeline`: pipeline stages of every family equal the whole model.
//! - `bf16_weights`: models loaded with weights kept in bf16, equal bit for
//!   bit to f32 weights rounded to bf16, and greedy tokens as f32's.
//! - `quantized_load`: weights quantized as a checkpoint loads, for
//!   every family, against f32 holding the dequantized weights.
//! - `quantized`: a GPT quantized as it is built or afterwards (awaited,
//!   as in a browser): every llama.cpp type fallback, P = 3 and 4 equal
//!   P = 1, near the f32 logits, cached generation.
//! - `recompute`: activation recomputation gives the plain tape's loss
//!   and gradients bit for bit (every family, P = 1..4, LoRA, pipeline).
//! - `sizes`: parameter counts, and configurations past memory refused
//!   before anything is allocated (GPT-2 and the Llama family).

mod bad_dirs;
mod bf16_weights;
mod families;
mod gguf;
mod gguf_save;
mod lora;
mod pipeline;
mod quantized;
mod quantized_load;
mod recompute;
mod sizes;

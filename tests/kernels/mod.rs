//! Layer 2, `src/kernels/`: each kernel family on one rank against the f64
//! references in `util::reference`, plus its error cases:
//! - `gemm`: gemm (transposes, bias, accumulate, every variant) and `sum_rows`;
//! - `gemv_activation`: an activation applied in the product's store;
//! - `gemv`: the small-M GEMM reading B as stored; `gemv_split`: its
//!   split-K entry for GPUs, forced; `gemv_texture`: its texture entries
//!   (CPU adapters, a weight read again);
//! - `pack_cache`: the packs `GemmOptions::weight` keeps, dropped by in-place writes;
//! - `elementwise`: add/scale/axpby and activations with their backward;
//! - `embedding`: one shard's lookup and deterministic scatter-add backward;
//! - `cross_entropy`: softmax cross-entropy pieces on a padded vocab shard,
//!   the single-rank loss and gradient; `cross_entropy_tree`: its row
//!   reductions as a workgroup per row (GPUs) and an invocation per row;
//! - `gemm_coop`: the cooperative-matrix (tensor-core) f16 GEMM, or its refusal;
//! - `gemm_split`: products past the device's textures, run in parts;
//! - `slicing`: `narrow` and `concat`;
//! - `topk`: the on-device top-k of a logits row (greedy / top-k decoding);
//! - `transpose`: the pack kernel the GEMM uses for transposed operands;
//! - `norm_rows`: the one-dispatch norm of a decoding step's rows;
//! - `attention`: causal attention forward, backward and cached decoding;
//!   `attention_dropout`: dropout on its probabilities;
//! - `gqa`: grouped-query attention on separate q, k, v (groups, sliding
//!   windows, one rank's query heads, decoding after a past); `rope`: the
//!   rotary kernel and its inverse;
//! - `random`: the counter-based draws of initialisation, per shard;
//! - `f16`: casts, the f16 GEMM and f16 tensors (where `SHADER_F16` exists);
//! - `bf16`: bf16 casts and weights kept in bf16 or f16 read by the GEMM.
//!
//! The optimiser kernels are checked through `nn::optim`.

mod attention;
mod attention_dropout;
mod bf16;
mod cross_entropy;
mod cross_entropy_tree;
mod elementwise;
mod embedding;
mod f16;
mod gemm;
mod gemm_coop;
mod gemm_split;
mod gemv;
mod gemv_activation;
mod gemv_split;
mod gemv_texture;
mod gqa;
mod loop_limit;
mod norm_rows;
mod pack_cache;
mod quant;
mod random;
mod rope;
mod slicing;
mod topk;
mod transpose;

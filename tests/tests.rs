//! One integration-test binary, so every module shares the meshes in `util`.
//! Each module covers one topic:
//! - `kernels_elementwise`: add/scale/axpy and activations against f64.
//! - `kernels_embedding`: one shard's embedding lookup and deterministic
//!   scatter-add backward against f64.
//! - `kernels_cross_entropy`: softmax cross-entropy pieces on a padded vocab
//!   shard, the single-rank loss and gradient, against f64.
//! - `comm`: collectives on both transports, every world size, bad inputs.
//! - `device`: adapter selection errors and software adapters.
//! - `shaders`: every WGSL family validated by naga and translated to MSL,
//!   HLSL, SPIR-V and GLSL.
//! - `tensor`: DTensor placements, redistribution, conjugate mappings, layout kernels.
//! - `nn_linear`: column/row-parallel layers vs f64 and serial, comm counts, SGD, init.
//! - `nn_embedding_ce`: embeddings and vocab-parallel cross-entropy vs f64 and serial.
//! - `kernels_gemm`: gemm (transposes, bias, accumulate) and sum_rows against f64.
//! - `nn_model`: a two-layer MLP and `MlpLanguageModel` train like the serial
//!   model (and f64) on every world size; the LM's exact per-step communication;
//!   vocab 50257 and vocab 5 on 8 ranks; no new pipelines or buffers after a warm-up step.
//! - `nn_optim_ckpt`: SGD and AdamW against f64 on sharded parameters, gradient
//!   accumulation and zero-grad, initialiser determinism and statistics,
//!   safetensors checkpoints resharded from P = 4 to 3 and 1, bad files rejected.
//! - `nn_sequence_parallel`: sequence-parallel column/row layers, plain and
//!   ring-overlapped, on both transports vs f64 and the plain layers; exact
//!   comm counts; `ring_shift`.
//! - `trace`: per-kernel tracing (kernel slices, collective spans, Chrome JSON).

mod util;

mod comm;
mod device;
mod kernels_cross_entropy;
mod kernels_elementwise;
mod kernels_embedding;
mod kernels_gemm;
mod nn_embedding_ce;
mod nn_linear;
mod nn_model;
mod nn_optim_ckpt;
mod nn_sequence_parallel;
mod shaders;
mod tensor;
mod trace;

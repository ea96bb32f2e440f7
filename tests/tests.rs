//! One integration-test binary, so every module shares the meshes in `util`.
//! Each module covers one topic:
//! - `kernels::elementwise`: add/scale/axpy and activations against f64.
//! - `kernels::embedding`: one shard's embedding lookup and deterministic
//!   scatter-add backward against f64.
//! - `kernels::cross_entropy`: softmax cross-entropy pieces on a padded vocab
//!   shard, the single-rank loss and gradient, against f64.
//! - `comm::collectives`: collectives on both transports, every world size, bad inputs.
//! - `device`: adapter selection errors and software adapters.
//! - `shaders`: every WGSL family validated by naga and translated to MSL,
//!   HLSL, SPIR-V and GLSL.
//! - `tensor::dtensor`: DTensor placements, redistribution, conjugate mappings, layout kernels.
//! - `nn::linear`: column/row-parallel layers vs f64 and serial, comm counts, SGD, init.
//! - `nn::embedding`: embeddings and vocab-parallel cross-entropy vs f64 and serial.
//! - `kernels::gemm`: gemm (transposes, bias, accumulate) and sum_rows against f64.
//! - `nn::model`: a two-layer MLP and `MlpLanguageModel` train like the serial
//!   model (and f64) on every world size; the LM's exact per-step communication;
//!   vocab 50257 and vocab 5 on 8 ranks; no new pipelines or buffers after a warm-up step.
//! - `nn::optim`: SGD and AdamW against f64 on sharded parameters, gradient
//!   accumulation and zero-grad, initialiser determinism and statistics,
//!   safetensors checkpoints resharded from P = 4 to 3 and 1, bad files rejected.
//! - `nn::sequence_parallel`: sequence-parallel column/row layers, plain and
//!   ring-overlapped, on both transports vs f64 and the plain layers; exact
//!   comm counts; `ring_shift`.

mod util;

mod comm;
mod device;
mod kernels;
mod nn;
mod shaders;
mod tensor;

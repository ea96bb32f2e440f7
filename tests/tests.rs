//! One integration-test binary, so every module shares the meshes in `util`
//! (each wgpu device compiles its own pipelines; sharing saves minutes). The
//! modules mirror `src/`, one test module per source concept; each folder's
//! `mod.rs` lists its modules:
//! - `util`: shared meshes (`mesh`), the f64 references every module checks
//!   against (`reference`), tolerance and exactness asserts (`check`), the
//!   seeded random generator.
//! - `device/`: adapter selection errors, software adapters, binding limits,
//!   wgpu validation errors as results; `trace` (the per-kernel timeline).
//! - `kernels/`: `gemm`, `elementwise`, `embedding`, `cross_entropy`,
//!   `slicing`, `attention`: each kernel family on one rank against f64, and
//!   its errors.
//! - `comm/`: `collectives` (every collective, both transports, every world
//!   size, bad inputs), `ring` (`ring_shift`), `host` (pooled staging at large
//!   sizes), `shared` (one-buffer replicated results), `stats` (exact counters).
//! - `tensor/`: `dtensor` (placements, redistribution), `mappings` (the
//!   conjugate mappings' values and communication), `elementwise`, `matmul`
//!   and `rows` (the per-shard products and bias ops), `ops_vs_layers`.
//! - `nn/`: `linear` (column/row-parallel layers), `sequence_parallel` (the
//!   same with tokens split, plain and ring-overlapped), `embedding`,
//!   `cross_entropy`, `parameter` (gradient accumulation), `optim` (SGD,
//!   AdamW), `init`, `checkpoint` (safetensors across world sizes), `model`
//!   (a two-layer MLP and `MlpLanguageModel` training end to end),
//!   `shard_units` (whole heads per rank), `norm`, `dropout`, `gpt` (the
//!   block and the GPT against an f64 model, decoding, checkpoints),
//!   `tokenizer` (GPT-2's ids against tiktoken, streaming decode),
//!   `model_dir` (weights and tokenizer of one directory, the shipped model).
//! - `models/`: model families (`llama`) against transformers' own numbers.
//! - `quant/`: host quantization and dequantization against gguf-py and
//!   ggml's reference C code, bit for bit (`tests/fixtures/quant/`).
//! - `layout`: no file of `src/` imports one that imports it back (each
//!   loop printed with the paths that make it).
//! - `shaders`: every shader the crate builds validated by naga, checked for
//!   FXC-rejected stores, translated to MSL, HLSL, SPIR-V and GLSL, and run
//!   through `spirv-val` and `glslangValidator` where installed.
//!
//! The maths every test holds the crate to is docs/MATH.md.

mod util;

mod comm;
mod device;
mod kernels;
mod layout;
mod models;
mod nn;
mod quant;
mod shaders;
mod tensor;

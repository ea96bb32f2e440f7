//! # wgpu-tp
//!
//! Megatron-style tensor parallelism on any GPU wgpu can reach: Vulkan, Metal,
//! DX12, GL, and the software adapters CI machines have (lavapipe, llvmpipe,
//! WARP). Ranks are separate adapters or simulated logical devices on one GPU;
//! one controller (your program) drives them all, recording work into every
//! rank's queue without waiting, and the host waits only where bytes must
//! cross ranks (inside collectives) or reach you. With the cargo feature
//! `mpi`, [`MeshBuilder::mpi`] puts each rank in its own process, on one host
//! or several: every process runs the same program on its own rank, and
//! collectives go through MPI with the same bytes as in one process.
//!
//! It also builds for `wasm32-unknown-unknown` and runs in a browser on
//! WebGPU. There every rank shares the page's one device (collectives stay
//! on the GPU) and nothing may block, so what waits for the GPU is `async`
//! at its core: [`MeshBuilder::build_async`], [`DTensor::to_host_async`],
//! [`download_many_async`], [`nn::Decoder::generate_async`], … On native the
//! blocking forms ([`MeshBuilder::build`], [`DTensor::to_host`], …) run the
//! same futures to their end; in a browser they return
//! [`Error::WouldBlock`] naming the `async` form to await.
//!
//! The crate is layered, each layer using only the ones below it:
//! 1. devices: [`Mesh`], [`MeshBuilder`], [`Rank`], [`Device`], [`LocalTensor`],
//!    per-kernel tracing ([`Trace`]), and the process's [`Settings`] (every
//!    `WGPU_TP_*` variable, read once; [`settings`], [`set_settings`]);
//! 2. [`kernels`]: typed wrappers around the WGSL shaders in `shaders/`;
//! 3. [`comm`]: all-reduce, all-gather, reduce-scatter, broadcast, scatter, all-to-all;
//! 4. [`tensor`]: [`DTensor`] with its [`Placement`] and the conjugate [`Mapping`]s;
//! 5. [`nn`]: generic layers (parallel linears, embeddings, norms,
//!    grouped-query attention, MLPs, the vocab-parallel loss), the key/value
//!    cache and generation for any causal decoder, sampling, tokenizer and
//!    chat templates, initialisers, optimisers, checkpoints and the Hugging
//!    Face weight-file reader and writer, no model family;
//! 6. [`models`]: model families built from `nn`'s decoder skeleton, one
//!    file each (GPT-2 in `models/gpt2.rs`, the Llama family in
//!    `models/llama.rs`): a config, a block and the family's checkpoint
//!    names.
//!
//! ## Example: a Megatron MLP on 2 ranks equals the serial layers
//!
//! ```
//! use wgpu_tp::nn::{ColumnParallelConfig, ColumnParallelLinear, InitRng, RowParallelConfig, RowParallelLinear};
//! use wgpu_tp::{DTensor, Mesh, Placement};
//!
//! # fn main() -> wgpu_tp::Result<()> {
//! let (tokens, hidden, ffn) = (5, 8, 12);
//! let x: Vec<f32> = (0..tokens * hidden).map(|i| (i % 7) as f32 / 7.0).collect();
//! let mut outputs = Vec::new();
//! for ranks in [1, 2] {
//!     let mesh = Mesh::simulated(ranks)?;
//!     // The same seed gives the same master weights for every world size.
//!     let mut rng = InitRng::new(0);
//!     let mut fc1 = ColumnParallelLinear::new(&mesh, ColumnParallelConfig::new(hidden, ffn), &mut rng)?;
//!     let mut fc2 = RowParallelLinear::new(&mesh, RowParallelConfig::new(ffn, hidden), &mut rng)?;
//!     let input = DTensor::from_host(&mesh, &[tokens, hidden], &x, Placement::Replicate)?;
//!     // Column (no gather) -> Row (input parallel): one all-reduce in forward.
//!     let y = fc2.forward(&fc1.forward(&input)?)?;
//!     outputs.push(y.to_host()?);
//! }
//! let diff = outputs[0].iter().zip(&outputs[1]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
//! assert!(diff < 1e-5);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

// `#[derive(Params)]` names `::wgpu_tp::nn::Params`, inside this crate too.
extern crate self as wgpu_tp;

pub mod comm;
mod device;
mod element;
mod error;
pub mod kernels;
pub mod models;
pub mod nn;
pub mod quant;
pub mod shard;
pub mod tensor;

pub use comm::{Collective, CommCount, CommStats, Transport};
pub use device::{
    AdapterReport, AttentionEntries, AxisGroup, Device, DeviceLayout, EventKind, GemmTile,
    KernelTotal, LimitsPreset, LocalTensor, MemoryStats, Mesh, MeshBuilder, Rank, Settings,
    TileLanes, Trace, TraceClock, TraceEvent, TraceTrack, Tuning, adapters, adapters_async,
    download_many, download_many_async, parse_backends, set_settings, set_tuning, settings,
    tuned_choices, tuning, tuning_file, update_settings,
};
pub use element::{DType, ReduceOp};
pub use error::{Error, Result, Shape};
/// The `half` crate, whose `f16` and `bf16` are the host types of
/// [`DType::F16`] and [`DType::BF16`] data.
pub use half;
pub use nn::Params;
pub use tensor::{
    DTensor, Mapping, MatmulOptions, NoGradGuard, Placement, is_grad_enabled, no_grad,
};

// The README's Rust examples run as doctests, so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// So do the examples of the docs beside it.
#[cfg(doctest)]
#[doc = include_str!("../docs/ARCHITECTURE.md")]
struct ArchitectureDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/PLATFORMS.md")]
struct PlatformsDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/PERFORMANCE.md")]
struct PerformanceDoctests;

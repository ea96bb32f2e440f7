//! # wgpu-tp
//!
//! Megatron-style tensor parallelism on any GPU wgpu can reach.
#![deny(missing_docs)]

pub mod comm;
mod device;
mod error;
pub mod kernels;
pub mod shard;

pub use device::{
    AdapterReport, Collective, CommCount, CommStats, DType, Gpu, LocalTensor, Mesh, MeshBuilder,
    Placement, Rank, Transport, adapters, download_many, parse_backends,
};
pub use error::{Error, Result, Shape};

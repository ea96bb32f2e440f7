//! # wgpu-tp
//!
//! Megatron-style tensor parallelism on any GPU wgpu can reach.
#![deny(missing_docs)]

pub mod comm;
mod device;
mod error;
pub mod kernels;
pub mod nn;
pub mod shard;
pub mod tensor;

pub use comm::ReduceOp;
pub use device::{
    AdapterReport, Collective, CommCount, CommStats, DType, DeviceLayout, Gpu, LocalTensor, Mesh,
    MeshBuilder, Rank, Transport, adapters, download_many, parse_backends,
};
pub use error::{Error, Result, Shape};
pub use tensor::{DTensor, Mapping, Placement};

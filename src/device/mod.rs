//! Layer 1, devices: adapter choice, one wgpu `Device` + `Queue` per rank
//! (or one shared by all ranks), the pipeline cache, the buffer pool, uploads
//! and downloads, and wgpu errors turned into [`Result`](crate::Result).

mod gpu;
mod local;
mod mesh;
mod select;
mod staging;

pub use gpu::Gpu;
pub(crate) use gpu::{Access, KernelSpec};
pub use local::{DType, LocalTensor, Rank, download_many};
#[allow(unused_imports)]
pub(crate) use local::{Dispatch, copy_region};
pub use mesh::{Collective, CommCount, CommStats, Mesh, Transport};
pub use select::{AdapterReport, DeviceLayout, MeshBuilder, adapters, parse_backends};
pub(crate) use staging::{Exchange, Mapped, OutView};

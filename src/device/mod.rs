//! Layer 1, devices: adapter choice, one wgpu `Device` + `Queue` per rank
//! (or one shared by all ranks), the pipeline cache, the buffer pool, uploads
//! and downloads, and wgpu errors turned into [`Result`](crate::error::Result).
//!
//! Rooms, each importing only the ones listed before it:
//! - `pool.rs`: buffer pools (storage, read staging, write staging);
//! - `pipeline.rs`: [`KernelSpec`] and the per-device pipeline cache;
//! - `derived.rs`: operands derived from a buffer (GEMM packs, textures),
//!   kept until an in-place write bumps its version;
//! - `trace/`: a device's trace recorder ([`TraceEvent`], [`TraceClock`]):
//!   kernels timed by timestamp queries (`timestamps.rs`) or the host, host
//!   spans;
//! - `recording.rs`: a device's pending encoder, submits and polls (and
//!   the ordering contract that keeps pooled buffers safe);
//! - `context.rs`: [`Device`], one wgpu device + queue with its pending
//!   encoder (kept by `recording.rs`), error capture, pool, pipelines and
//!   trace recorder;
//! - `probe.rs`: what the adapter and host are beyond wgpu's report (the
//!   CPU's vendor, the Mesa version), which kernels choose tiles by;
//! - `tensor.rs`: [`LocalTensor`], a buffer (or row blocks) on one rank;
//! - `copy.rs`: copying a region between tensors, block by block;
//! - `blocks.rs`: the row-block layout of tensors past one binding, and
//!   running a kernel block by block;
//! - `rank.rs`: [`Rank`] and tensor allocation;
//! - `texture.rs`: a matrix copied into an RGBA texture (how CPU adapters
//!   read GEMM operands fastest);
//! - `dispatch.rs`: recording a kernel dispatch;
//! - `staging.rs`: the device → host → device path;
//! - `readback.rs`: reading tensors back ([`download_many`], `to_vec`);
//! - `mesh.rs`: [`Mesh`], the ordered ranks one controller drives;
//!   `axes.rs` + `axis_groups.rs`: its named axes and their sub-meshes
//!   ([`Mesh::axis`]);
//!   `budget.rs`: what a model will allocate against the memory there is;
//! - `timeline/`: a mesh's [`Trace`] (Chrome JSON, top kernels; in
//!   `report.rs`), and in
//!   `control.rs` starting and stopping it and the host-span API upper
//!   layers report spans with;
//! - `adapters.rs`: listing adapters ([`adapters`]) and parsing backend names;
//! - `select.rs`: adapter choice and [`MeshBuilder`]; `open.rs`: opening
//!   one device with the limits and features asked for;
//! - `wait.rs`: the one place the crate waits for the GPU (async at the
//!   core, blocking on native);
//! - `tune.rs`: kernel variants chosen by timing them on the device,
//!   remembered per adapter on disk.
//!
//! Beneath them all, `settings/`: [`Settings`], every `WGPU_TP_*` variable
//! as a typed field, read once from the environment and changed in code.

mod adapters;
mod axes;
mod axis_groups;
mod blocks;
mod budget;
mod capability;
mod context;
mod copy;
mod derived;
mod dispatch;
mod mesh;
mod multi_process;
mod open;
mod ownership;
mod pipeline;
mod pool;
mod probe;
#[cfg(feature = "mpi")]
mod process;
mod rank;
mod readback;
mod recording;
mod select;
pub(crate) mod settings;
mod staging;
mod tensor;
mod texture;
mod timeline;
mod trace;
pub(crate) mod tune;
mod wait;
mod write;

pub use adapters::{AdapterReport, adapters, adapters_async, parse_backends};
pub use axes::AxisGroup;
pub use context::Device;
pub use mesh::{DeviceLayout, Mesh};
pub use pool::MemoryStats;
pub use rank::Rank;
pub use readback::{download_many, download_many_async};
pub use select::MeshBuilder;
pub use settings::{
    AttentionEntries, GemmTile, LimitsPreset, Settings, TileLanes, Tuning, set_settings,
    set_tuning, settings, tuning, update_settings,
};
pub use tensor::LocalTensor;
pub use timeline::{KernelTotal, Trace, TraceTrack};
pub use trace::{EventKind, TraceClock, TraceEvent};
pub use tune::{tuned_choices, tuning_file};

pub(crate) use blocks::{common_blocks, for_each_block, map_blocks};
pub(crate) use budget::host_available;
pub(crate) use copy::copy_region;
pub(crate) use dispatch::Dispatch;
pub(crate) use pipeline::{Access, KernelSpec};
pub(crate) use probe::{intel_cpu, loop_limit, old_mesa};
#[cfg(feature = "mpi")]
pub(crate) use process::Process;
pub(crate) use staging::{Exchange, InFlight, Mapped, OutView};
pub(crate) use tensor::blocked_error;
pub(crate) use texture::{
    flat_texture_shift, storage_textures_work, texel_format, texture_row_align,
};
pub(crate) use timeline::HostSpan;
pub(crate) use wait::block_on;

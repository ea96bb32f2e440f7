//! [`Trace`]: what a mesh's devices recorded between [`Mesh::start_trace`](crate::device::Mesh::start_trace)
//! and [`Mesh::stop_trace`](crate::device::Mesh::stop_trace) (see `trace/` for how each device records and
//! which clock times its kernels), with
//! - [`Trace::write_chrome_json`]: Chrome trace-event JSON, which opens in
//!   <https://ui.perfetto.dev> and `chrome://tracing`;
//! - [`Trace::top_kernels`]: the kernels that took the most time;
//! - the host-span API the upper layers time their work with
//!   ([`Mesh::host_span`](crate::device::Mesh::host_span): the comm layer times every collective and ring step);
//! - tracing a mesh for its whole life: `WGPU_TP_TRACE=path.json` (or
//!   [`MeshBuilder::trace_to`](super::MeshBuilder::trace_to)) starts tracing
//!   when the mesh is built and writes the file when the mesh is dropped.
//!
//! Layout of the JSON: one process (`pid` = this process's id); per rank `r`
//! two threads, kept next to each other by `thread_sort_index`:
//! - `tid = r`, named `rank r · <adapter> (<backend>) · kernels`: one `"X"`
//!   slice per dispatch, named `family::entry`, with `args.shapes` (each
//!   buffer's shape, in binding order) and `args.workgroups`;
//! - `tid = 100000 + r`, named `rank r · collectives (host clock)`: one `"X"`
//!   slice per collective or ring step the rank took part in, named by its
//!   kind (`AllReduce`, `SendRecv`, …), with `args.bytes` (the whole
//!   payload, as `Mesh::comm_stats` counts it), `args.rank_bytes` (this
//!   rank's part) and `args.participants`.
//!
//! Kernels and collectives cannot share one thread track: the trace-event
//! format requires the slices of a thread to nest, and a collective's host
//! span overlaps the kernels that run while the host waits inside it.
//! Times are microseconds since [`Mesh::start_trace`](crate::device::Mesh::start_trace), on the host clock.

//!
//! Files: `report.rs` (the [`Trace`] and its JSON), `control.rs` (starting
//! and stopping a mesh's trace, host spans, tracing for a mesh's whole
//! life); neither imports this one.

mod control;
mod report;

pub(crate) use self::control::HostSpan;
pub use self::report::{KernelTotal, Trace, TraceTrack};

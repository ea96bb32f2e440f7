//! Layer 3, communication: collectives over a group of ranks.
//!
//! A group is given by the tensors themselves: `shards[i]` lives on the i-th
//! participating rank, so passing fewer tensors than the mesh has ranks runs
//! the collective on that subgroup (e.g. ranks `[1, 3]` of 4). Uneven splits
//! follow [`crate::shard`]: the first `n % P` ranks take one more. Reductions
//! combine in one fixed order (participant 0, 1, 2, ...), so every rank ends
//! with bit-identical bytes, on either transport.
//!
//! Contract of every collective:
//! - inputs are checked first (group on distinct ranks of *this* mesh, one
//!   dtype, compatible shapes, dims in range); a bad input is an
//!   [`Error`](crate::error::Error),
//!   never a panic, and nothing is recorded or sent;
//! - results are tensors on the participating ranks in the order given (rank
//!   tags from [`Mesh::ranks`](crate::device::Mesh::ranks)); an output may share its buffer with an input
//!   when the bytes are the same (world size 1, the root of a broadcast), which
//!   is invisible because tensors are immutable;
//! - each call counts once in [`Mesh::comm_stats`](crate::device::Mesh::comm_stats) (world size 1 too), with
//!   bytes = the sum over participating ranks of the bytes each contributed
//!   (every shard for the many-to-many collectives, the root's tensor for
//!   broadcast and scatter).
//!
//! Transports: [`Transport::HostStaged`] (each rank its own device) downloads
//! every input with one wait per device, combines on the host and uploads;
//! [`Transport::SharedDevice`] (all ranks on one device) never touches the
//! host: on-device copies plus a fused reduce kernel
//! (`shaders/copy_fold.wgsl`); a result that is the same on every rank is
//! computed once and every rank's tensor uses that one buffer.
//!
//! Point-to-point: [`ring_shift`] / [`RingShift`] move each participant's
//! tensor to the next one in a ring (one [`Collective::SendRecv`] per step),
//! the building block of the overlapped ring gather / reduce-scatter;
//! [`send`] / [`recv`] move one tensor between two ranks (pipeline stages).
//!
//! Files: `collectives.rs` (the public functions), `group.rs` (participant
//! checks), `plan.rs` (the all-to-all plan), `host.rs` and `same_device.rs`
//! (the two transports), `reduce_add.rs` (a shared device's all-reduce with a residual
//! added in the same pass), `ring.rs` (point-to-point ring steps), `p2p.rs` (single messages), `stats.rs`
//! and `transport.rs` (what a mesh counts and how it moves bytes),
//! `trace.rs` (each collective as a span on a traced mesh's timeline).

mod collectives;
mod group;
mod host;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(not(feature = "mpi"))]
#[path = "mpi/stub.rs"]
mod mpi;
mod p2p;
mod plan;
mod reduce_add;
mod ring;
mod same_device;
mod stats;
mod trace;
mod transport;

/// Re-exported from where it lives, `crate::element`, for existing paths.
pub use crate::element::ReduceOp;
pub use collectives::{
    all_gather, all_reduce, all_to_all, broadcast, broadcast_from, reduce_scatter, scatter,
};
pub(crate) use mpi::gather_words;
pub use p2p::{Channel, discard_queued, recv, send, wait_sends};
pub(crate) use reduce_add::{all_reduce_sum_add, all_reduce_sum_add_norm};
pub use ring::{RingShift, ring_shift};
pub use stats::{Collective, CommCount, CommStats};
pub use transport::Transport;

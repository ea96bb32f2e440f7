//! The MPI transport (feature `mpi`): collectives of a multi-process mesh
//! ([`MeshBuilder::mpi`](crate::device::MeshBuilder::mpi)).
//!
//! Files: `p2p.rs` (messages with a time limit), `header.rs` (what every
//! rank agrees on before data moves), `peers.rs` (the processes of one
//! collective: the whole mesh or a sub-mesh's members), `ops.rs` (the
//! collectives), `ring.rs` (ring steps), `pipe.rs` (point-to-point sends
//! and receives).

mod header;
mod ops;
mod p2p;
mod peers;
mod pipe;
mod ring;

pub(crate) use ops::{all_gather, all_reduce, all_to_all, broadcast, gather_words, reduce_scatter};
pub(crate) use pipe::{PendingSend, recv, send};
pub(crate) use ring::MpiShift;

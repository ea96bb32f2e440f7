//! Layer 3, communication: collectives over a group of ranks.
//!
//! A group is given by the tensors themselves: `shards[i]` lives on the i-th
//! participating rank, so passing fewer tensors than the mesh has ranks runs
//! the collective on that subgroup. Uneven splits follow [`crate::shard`].
//! Reductions combine in one fixed order (rank 0, 1, 2, ...), so every rank
//! ends with bit-identical bytes.

use crate::device::{LocalTensor, Mesh};
use crate::error::{Error, Result};

/// How a reduction combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum.
    Sum,
    /// Element-wise maximum.
    Max,
}

fn todo(op: &'static str) -> Error {
    Error::invalid(op, "not implemented yet")
}

/// Every rank ends with the element-wise reduction of all shards (same shapes).
pub fn all_reduce(mesh: &Mesh, shards: &[LocalTensor], op: ReduceOp) -> Result<Vec<LocalTensor>> {
    let _ = (mesh, shards, op);
    Err(todo("all_reduce"))
}

/// Every rank ends with the concatenation of all shards along `dim` (shards may
/// differ in size along `dim`, including 0; other dims must match).
pub fn all_gather(mesh: &Mesh, shards: &[LocalTensor], dim: usize) -> Result<Vec<LocalTensor>> {
    let _ = (mesh, shards, dim);
    Err(todo("all_gather"))
}

/// Reduce full-shape shards, then rank i keeps its [`crate::shard::split_range`]
/// slice along `dim`.
pub fn reduce_scatter(
    mesh: &Mesh,
    shards: &[LocalTensor],
    dim: usize,
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    let _ = (mesh, shards, dim, op);
    Err(todo("reduce_scatter"))
}

/// Copies of `src` (which lives on one of `ranks`, the root) on every rank of `ranks`, in order.
pub fn broadcast(
    mesh: &Mesh,
    src: &LocalTensor,
    ranks: &[crate::Rank],
) -> Result<Vec<LocalTensor>> {
    let _ = (mesh, src, ranks);
    Err(todo("broadcast"))
}

/// Slice `src` (on the root) along `dim` with the uneven-split rule and send
/// slice i to `ranks[i]`.
pub fn scatter(
    mesh: &Mesh,
    src: &LocalTensor,
    ranks: &[crate::Rank],
    dim: usize,
) -> Result<Vec<LocalTensor>> {
    let _ = (mesh, src, ranks, dim);
    Err(todo("scatter"))
}

/// Re-split along `concat_dim` what is split along `split_dim` (Shard(split) -> Shard(concat)).
pub fn all_to_all(
    mesh: &Mesh,
    shards: &[LocalTensor],
    split_dim: usize,
    concat_dim: usize,
) -> Result<Vec<LocalTensor>> {
    let _ = (mesh, shards, split_dim, concat_dim);
    Err(todo("all_to_all"))
}

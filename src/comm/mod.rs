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
//!   dtype, compatible shapes, dims in range); a bad input is an [`Error`],
//!   never a panic, and nothing is recorded or sent;
//! - results are tensors on the participating ranks in the order given (rank
//!   tags from [`Mesh::ranks`]); an output may share its buffer with an input
//!   when the bytes are the same (world size 1, the root of a broadcast), which
//!   is invisible because tensors are immutable;
//! - each call counts once in [`Mesh::record_comm`] (world size 1 too), with
//!   bytes = the sum over participating ranks of the bytes each contributed
//!   (every shard for the many-to-many collectives, the root's tensor for
//!   broadcast and scatter).
//!
//! Transports: [`Transport::HostStaged`] (each rank its own device) downloads
//! every input with one wait per device, combines on the host and uploads;
//! [`Transport::SharedDevice`] (all ranks on one device) never touches the
//! host: on-device copies plus a fused reduce kernel
//! (`shaders/collective.wgsl`); a result that is the same on every rank is
//! computed once and every rank's tensor uses that one buffer.
//!
//! Point-to-point: [`ring_shift`] / [`RingShift`] move each participant's
//! tensor to the next one in a ring (one [`Collective::SendRecv`] per step),
//! the building block of the overlapped ring gather / reduce-scatter.

mod host;
mod layout;
mod ring;
mod shared;

pub use ring::{RingShift, ring_shift};

use crate::device::{Collective, DType, LocalTensor, Mesh, Rank, Transport};
use crate::error::{Error, Result};
use crate::shard::{outer_dim_inner, split_range};

/// How a reduction combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum (i32 sums wrap around).
    Sum,
    /// Element-wise maximum.
    Max,
}

/// Every rank ends with the element-wise reduction of all shards (same shapes).
pub fn all_reduce(mesh: &Mesh, shards: &[LocalTensor], op: ReduceOp) -> Result<Vec<LocalTensor>> {
    const OP: &str = "all_reduce";
    let ranks = check_group(OP, mesh, shards)?;
    check_same_shapes(OP, shards)?;
    let out = if shards.len() == 1 {
        shards.to_vec()
    } else {
        match mesh.transport() {
            Transport::HostStaged => host::all_reduce(shards, &ranks, op)?,
            Transport::SharedDevice => shared::all_reduce(shards, &ranks, op)?,
        }
    };
    mesh.record_comm(Collective::AllReduce, bytes_of(shards));
    Ok(out)
}

/// Every rank ends with the concatenation of all shards along `dim` (shards may
/// differ in size along `dim`, including 0; other dims must match).
pub fn all_gather(mesh: &Mesh, shards: &[LocalTensor], dim: usize) -> Result<Vec<LocalTensor>> {
    const OP: &str = "all_gather";
    let ranks = check_group(OP, mesh, shards)?;
    check_dim(OP, "dim", dim, shards[0].shape().len())?;
    check_same_except(OP, shards, dim)?;
    let out = if shards.len() == 1 {
        shards.to_vec()
    } else {
        match mesh.transport() {
            Transport::HostStaged => host::all_gather(shards, &ranks, dim)?,
            Transport::SharedDevice => shared::all_gather(shards, &ranks, dim)?,
        }
    };
    mesh.record_comm(Collective::AllGather, bytes_of(shards));
    Ok(out)
}

/// Reduce full-shape shards, then rank i keeps its [`crate::shard::split_range`]
/// slice along `dim`.
pub fn reduce_scatter(
    mesh: &Mesh,
    shards: &[LocalTensor],
    dim: usize,
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    const OP: &str = "reduce_scatter";
    let ranks = check_group(OP, mesh, shards)?;
    check_dim(OP, "dim", dim, shards[0].shape().len())?;
    check_same_shapes(OP, shards)?;
    let out = if shards.len() == 1 {
        shards.to_vec()
    } else {
        match mesh.transport() {
            Transport::HostStaged => host::reduce_scatter(shards, &ranks, dim, op)?,
            Transport::SharedDevice => shared::reduce_scatter(shards, &ranks, dim, op)?,
        }
    };
    mesh.record_comm(Collective::ReduceScatter, bytes_of(shards));
    Ok(out)
}

/// Copies of `src` (which lives on one of `ranks`, the root) on every rank of `ranks`, in order.
pub fn broadcast(
    mesh: &Mesh,
    src: &LocalTensor,
    ranks: &[crate::Rank],
) -> Result<Vec<LocalTensor>> {
    const OP: &str = "broadcast";
    let (ranks, root) = check_rooted(OP, mesh, src, ranks)?;
    let out = if ranks.len() == 1 {
        vec![src.clone()]
    } else {
        match mesh.transport() {
            Transport::HostStaged => host::broadcast(src, &ranks, root)?,
            Transport::SharedDevice => shared::broadcast(src, &ranks, root)?,
        }
    };
    mesh.record_comm(Collective::Broadcast, src.byte_len());
    Ok(out)
}

/// Slice `src` (on the root) along `dim` with the uneven-split rule and send
/// slice i to `ranks[i]`.
pub fn scatter(
    mesh: &Mesh,
    src: &LocalTensor,
    ranks: &[crate::Rank],
    dim: usize,
) -> Result<Vec<LocalTensor>> {
    const OP: &str = "scatter";
    check_dim(OP, "dim", dim, src.shape().len())?;
    let (ranks, _root) = check_rooted(OP, mesh, src, ranks)?;
    let out = if ranks.len() == 1 {
        vec![src.clone()]
    } else {
        match mesh.transport() {
            Transport::HostStaged => host::scatter(src, &ranks, dim)?,
            Transport::SharedDevice => shared::scatter(src, &ranks, dim)?,
        }
    };
    mesh.record_comm(Collective::Scatter, src.byte_len());
    Ok(out)
}

/// Re-shard: each rank splits its shard along `split_dim` (uneven-split rule),
/// sends piece j to participant j, and concatenates what it receives along
/// `concat_dim` in participant order. With shards that are the slices of a
/// logical tensor along `concat_dim`, this turns `Shard(concat_dim)` into
/// `Shard(split_dim)`. Shards must match in every dim but `concat_dim`.
pub fn all_to_all(
    mesh: &Mesh,
    shards: &[LocalTensor],
    split_dim: usize,
    concat_dim: usize,
) -> Result<Vec<LocalTensor>> {
    const OP: &str = "all_to_all";
    let ranks = check_group(OP, mesh, shards)?;
    let ndim = shards[0].shape().len();
    check_dim(OP, "split_dim", split_dim, ndim)?;
    check_dim(OP, "concat_dim", concat_dim, ndim)?;
    check_same_except(OP, shards, concat_dim)?;
    let out = if shards.len() == 1 {
        shards.to_vec()
    } else {
        let plan = AllToAll::new(shards, split_dim, concat_dim);
        match mesh.transport() {
            Transport::HostStaged => host::all_to_all(shards, &ranks, &plan)?,
            Transport::SharedDevice => shared::all_to_all(shards, &ranks, &plan)?,
        }
    };
    mesh.record_comm(Collective::AllToAll, bytes_of(shards));
    Ok(out)
}

/// Where each piece of an all-to-all goes: piece (i -> j) is `split` range
/// `pieces[i][j]` of shard i, placed at `offsets[i][j]` along `concat_dim` of
/// output j.
pub(crate) struct AllToAll {
    split_dim: usize,
    concat_dim: usize,
    pieces: Vec<Vec<std::ops::Range<usize>>>,
    offsets: Vec<Vec<usize>>,
    out_shapes: Vec<Vec<usize>>,
}

impl AllToAll {
    fn new(shards: &[LocalTensor], split_dim: usize, concat_dim: usize) -> AllToAll {
        let p = shards.len();
        let pieces: Vec<Vec<_>> = shards
            .iter()
            .map(|s| {
                (0..p)
                    .map(|j| split_range(s.shape()[split_dim], p, j))
                    .collect()
            })
            .collect();
        let mut offsets = vec![vec![0; p]; p];
        let mut out_shapes = Vec::with_capacity(p);
        for j in 0..p {
            let mut at = 0;
            for i in 0..p {
                offsets[i][j] = at;
                let piece = layout::with_dim(shards[i].shape(), split_dim, pieces[i][j].len());
                at += piece[concat_dim];
            }
            let piece0 = layout::with_dim(shards[0].shape(), split_dim, pieces[0][j].len());
            out_shapes.push(layout::with_dim(&piece0, concat_dim, at));
        }
        AllToAll {
            split_dim,
            concat_dim,
            pieces,
            offsets,
            out_shapes,
        }
    }
}

fn bytes_of(shards: &[LocalTensor]) -> u64 {
    shards.iter().map(LocalTensor::byte_len).sum()
}

/// The mesh's [`Rank`] for index `r`, if `device_id` is that rank's device
/// (a tensor or rank from another mesh fails this).
fn member(mesh: &Mesh, r: usize, device_id: u64) -> Option<Rank> {
    mesh.ranks()
        .get(r)
        .filter(|rank| rank.gpu().id() == device_id)
        .cloned()
}

fn foreign(op: &'static str, r: usize, mesh: &Mesh) -> Error {
    let what = if r < mesh.size() {
        format!("rank {r} belongs to another mesh")
    } else {
        format!("rank {r} is not one of this mesh's {} ranks", mesh.size())
    };
    Error::invalid(
        op,
        format!("{what}; pass tensors and ranks of the mesh the collective runs on"),
    )
}

fn check_distinct(op: &'static str, indices: &[usize]) -> Result<()> {
    for (i, a) in indices.iter().enumerate() {
        if indices[..i].contains(a) {
            return Err(Error::invalid(
                op,
                format!(
                    "rank {a} appears twice in the group {indices:?}; pass one tensor per participating rank"
                ),
            ));
        }
    }
    Ok(())
}

/// Shards form a group: at least one, on distinct ranks of this mesh, one dtype.
fn check_group(op: &'static str, mesh: &Mesh, shards: &[LocalTensor]) -> Result<Vec<Rank>> {
    if shards.is_empty() {
        return Err(Error::invalid(
            op,
            "needs at least one tensor (one per participating rank)",
        ));
    }
    let ranks = shards
        .iter()
        .map(|s| {
            member(mesh, s.rank_index(), s.gpu().id())
                .ok_or_else(|| foreign(op, s.rank_index(), mesh))
        })
        .collect::<Result<Vec<_>>>()?;
    check_distinct(op, &ranks.iter().map(Rank::index).collect::<Vec<_>>())?;
    let dtype: DType = shards[0].dtype();
    for s in &shards[1..] {
        s.expect_dtype(op, dtype)?;
    }
    Ok(ranks)
}

/// Ranks of a rooted collective are distinct ranks of this mesh and include
/// `src`'s rank; returns them and the root's position among them.
fn check_rooted(
    op: &'static str,
    mesh: &Mesh,
    src: &LocalTensor,
    ranks: &[Rank],
) -> Result<(Vec<Rank>, usize)> {
    if member(mesh, src.rank_index(), src.gpu().id()).is_none() {
        return Err(foreign(op, src.rank_index(), mesh));
    }
    let ranks = ranks
        .iter()
        .map(|r| member(mesh, r.index(), r.gpu().id()).ok_or_else(|| foreign(op, r.index(), mesh)))
        .collect::<Result<Vec<_>>>()?;
    let indices: Vec<usize> = ranks.iter().map(Rank::index).collect();
    check_distinct(op, &indices)?;
    let root = indices
        .iter()
        .position(|&r| r == src.rank_index())
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "the source lives on rank {}, which is not among the ranks {indices:?}; include the root",
                    src.rank_index()
                ),
            )
        })?;
    Ok((ranks, root))
}

fn check_dim(op: &'static str, what: &'static str, dim: usize, ndim: usize) -> Result<()> {
    if dim >= ndim {
        return Err(Error::OutOfRange {
            op,
            what,
            value: dim as i64,
            bound: ndim,
        });
    }
    Ok(())
}

fn check_same_shapes(op: &'static str, shards: &[LocalTensor]) -> Result<()> {
    let want = shards[0].shape();
    for s in &shards[1..] {
        if s.shape() != want {
            return Err(Error::shape(op, want, s.shape()));
        }
    }
    Ok(())
}

/// Same number of dims, equal in every dim but `dim`.
fn check_same_except(op: &'static str, shards: &[LocalTensor], dim: usize) -> Result<()> {
    let want = shards[0].shape();
    for s in &shards[1..] {
        let got = s.shape();
        let ok = got.len() == want.len()
            && got
                .iter()
                .zip(want)
                .enumerate()
                .all(|(d, (a, b))| d == dim || a == b);
        if !ok {
            let mut expected: Vec<String> = want.iter().map(ToString::to_string).collect();
            expected[dim] = "*".into();
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("[{}] (any size along dim {dim})", expected.join(", ")),
                got: format!("{got:?}"),
            });
        }
    }
    Ok(())
}

/// `(outer, size, inner)` of a shape around `dim` (re-exported for the transports).
pub(crate) fn around(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    outer_dim_inner(shape, dim)
}

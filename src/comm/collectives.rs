//! The collectives: check the group, run the mesh's transport, count the call
//! (and, on a traced mesh, time it: `trace.rs`). A group of one returns its
//! input (no copy) and still counts. Shards stored in row blocks (past one
//! binding) are moved block by block where blocks map to blocks (all-reduce,
//! broadcast, reduce-scatter along a dim other than 0); the others refuse
//! them with an error naming the limit.

use super::group::{
    bytes_of, check_dim, check_group, check_rooted, check_same_except, check_same_shapes,
};
use super::plan::AllToAll;
use super::stats::Collective;
use super::trace::{CommSpan, finish_span};
use super::transport::Transport;
use super::{host, mpi, same_device};
use crate::device::{LocalTensor, Mesh, Rank, blocked_error, common_blocks};
use crate::element::ReduceOp;
use crate::error::{Error, Result};

/// Every rank ends with the element-wise reduction of all shards (same shapes).
pub fn all_reduce(mesh: &Mesh, shards: &[LocalTensor], op: ReduceOp) -> Result<Vec<LocalTensor>> {
    const OP: &str = "all_reduce";
    let ranks = check_group(OP, mesh, shards)?;
    check_same_shapes(OP, shards)?;
    let span = CommSpan::begin(mesh, Collective::AllReduce, contributions(shards));
    let mut bytes = bytes_of(shards);
    let out = if alone(mesh, shards) {
        shards.to_vec()
    } else {
        match mesh.transport() {
            Transport::HostStaged => per_block(OP, shards, |s| host::all_reduce(s, &ranks, op))?,
            Transport::SharedDevice => {
                per_block(OP, shards, |s| same_device::all_reduce(s, &ranks, op))?
            }
            Transport::Mpi => {
                let (out, b) = per_block_counted(OP, shards, |s| mpi::all_reduce(mesh, s, op))?;
                bytes = b;
                out
            }
        }
    };
    mesh.record_comm(Collective::AllReduce, bytes);
    finish_span(span);
    Ok(out)
}

/// Every rank ends with the concatenation of all shards along `dim` (shards may
/// differ in size along `dim`, including 0; other dims must match).
pub fn all_gather(mesh: &Mesh, shards: &[LocalTensor], dim: usize) -> Result<Vec<LocalTensor>> {
    const OP: &str = "all_gather";
    let ranks = check_group(OP, mesh, shards)?;
    check_dim(OP, "dim", dim, shards[0].shape().len())?;
    check_same_except(OP, shards, dim)?;
    check_unblocked(OP, shards)?;
    let span = CommSpan::begin(mesh, Collective::AllGather, contributions(shards));
    let mut bytes = bytes_of(shards);
    let out = if alone(mesh, shards) {
        shards.to_vec()
    } else {
        match mesh.transport() {
            Transport::HostStaged => host::all_gather(shards, &ranks, dim)?,
            Transport::SharedDevice => same_device::all_gather(shards, &ranks, dim)?,
            Transport::Mpi => {
                let (out, b) = mpi::all_gather(mesh, shards, dim)?;
                bytes = b;
                out
            }
        }
    };
    mesh.record_comm(Collective::AllGather, bytes);
    finish_span(span);
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
    if dim == 0 {
        check_unblocked(OP, shards)?;
    }
    let span = CommSpan::begin(mesh, Collective::ReduceScatter, contributions(shards));
    let mut bytes = bytes_of(shards);
    let out = if alone(mesh, shards) {
        shards.to_vec()
    } else {
        match mesh.transport() {
            Transport::HostStaged => {
                per_block(OP, shards, |s| host::reduce_scatter(s, &ranks, dim, op))?
            }
            Transport::SharedDevice => per_block(OP, shards, |s| {
                same_device::reduce_scatter(s, &ranks, dim, op)
            })?,
            Transport::Mpi => {
                let (out, b) =
                    per_block_counted(OP, shards, |s| mpi::reduce_scatter(mesh, s, dim, op))?;
                bytes = b;
                out
            }
        }
    };
    mesh.record_comm(Collective::ReduceScatter, bytes);
    finish_span(span);
    Ok(out)
}

/// Copies of `src` (which lives on one of `ranks`, the root) on every rank of `ranks`, in order.
/// In a multi-process mesh, where only the root holds `src`, use [`broadcast_from`].
pub fn broadcast(mesh: &Mesh, src: &LocalTensor, ranks: &[Rank]) -> Result<Vec<LocalTensor>> {
    const OP: &str = "broadcast";
    multi_controller_form(OP, mesh, "broadcast_from")?;
    let (ranks, root) = check_rooted(OP, mesh, src, ranks)?;
    let span = CommSpan::begin(mesh, Collective::Broadcast, rooted(src, &ranks));
    let out = if ranks.len() == 1 {
        vec![src.clone()]
    } else {
        match mesh.transport() {
            // Past `multi_controller_form`, every rank is in this process.
            Transport::HostStaged | Transport::Mpi => {
                per_block(OP, std::slice::from_ref(src), |s| {
                    host::broadcast(&s[0], &ranks, root)
                })?
            }
            Transport::SharedDevice => per_block(OP, std::slice::from_ref(src), |s| {
                same_device::broadcast(&s[0], &ranks, root)
            })?,
        }
    };
    mesh.record_comm(Collective::Broadcast, src.byte_len());
    finish_span(span);
    Ok(out)
}

/// Every rank of the mesh ends with rank `root`'s tensor: each addressable
/// rank passes one tensor of the same shape and dtype (only the root's bytes
/// are read), so a multi-process program calls it alike on every process.
/// Counts one [`Collective::Broadcast`] of the root's bytes.
pub fn broadcast_from(
    mesh: &Mesh,
    shards: &[LocalTensor],
    root: usize,
) -> Result<Vec<LocalTensor>> {
    const OP: &str = "broadcast";
    check_group(OP, mesh, shards)?;
    check_same_shapes(OP, shards)?;
    if shards.len() != mesh.ranks().len() {
        return Err(Error::invalid(
            OP,
            format!(
                "broadcast_from takes one tensor per addressable rank ({}), got {}",
                mesh.ranks().len(),
                shards.len()
            ),
        ));
    }
    if mesh.transport() != Transport::Mpi || alone(mesh, shards) {
        let src = shards
            .iter()
            .find(|s| s.rank_index() == root)
            .ok_or(Error::OutOfRange {
                op: OP,
                what: "root",
                value: root as i64,
                bound: mesh.size(),
            })?;
        return broadcast(mesh, src, mesh.ranks());
    }
    let span = CommSpan::begin(mesh, Collective::Broadcast, contributions(shards));
    let (out, bytes) = per_block_counted(OP, shards, |s| mpi::broadcast(mesh, s, root))?;
    mesh.record_comm(Collective::Broadcast, bytes);
    finish_span(span);
    Ok(out)
}

/// Slice `src` (on the root) along `dim` with the uneven-split rule and send
/// slice i to `ranks[i]`.
pub fn scatter(
    mesh: &Mesh,
    src: &LocalTensor,
    ranks: &[Rank],
    dim: usize,
) -> Result<Vec<LocalTensor>> {
    const OP: &str = "scatter";
    multi_controller_form(OP, mesh, "broadcast_from, then a narrow per rank")?;
    check_dim(OP, "dim", dim, src.shape().len())?;
    let (ranks, _root) = check_rooted(OP, mesh, src, ranks)?;
    check_unblocked(OP, std::slice::from_ref(src))?;
    let span = CommSpan::begin(mesh, Collective::Scatter, rooted(src, &ranks));
    let out = if ranks.len() == 1 {
        vec![src.clone()]
    } else {
        match mesh.transport() {
            // Past `multi_controller_form`, every rank is in this process.
            Transport::HostStaged | Transport::Mpi => host::scatter(src, &ranks, dim)?,
            Transport::SharedDevice => same_device::scatter(src, &ranks, dim)?,
        }
    };
    mesh.record_comm(Collective::Scatter, src.byte_len());
    finish_span(span);
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
    check_unblocked(OP, shards)?;
    let span = CommSpan::begin(mesh, Collective::AllToAll, contributions(shards));
    let mut bytes = bytes_of(shards);
    let out = if alone(mesh, shards) {
        shards.to_vec()
    } else if mesh.transport() == Transport::Mpi {
        let (out, b) = mpi::all_to_all(mesh, shards, split_dim, concat_dim)?;
        bytes = b;
        out
    } else {
        let plan = AllToAll::new(shards, split_dim, concat_dim);
        match mesh.transport() {
            Transport::HostStaged | Transport::Mpi => host::all_to_all(shards, &ranks, &plan)?,
            Transport::SharedDevice => same_device::all_to_all(shards, &ranks, &plan)?,
        }
    };
    mesh.record_comm(Collective::AllToAll, bytes);
    finish_span(span);
    Ok(out)
}

/// The group is one rank and no other process takes part: nothing moves.
pub(super) fn alone(mesh: &Mesh, shards: &[LocalTensor]) -> bool {
    shards.len() == 1 && !mesh.is_multi_process()
}

/// Rooted collectives that take the root's tensor alone cannot be called
/// alike on every process; name the form that can.
fn multi_controller_form(op: &'static str, mesh: &Mesh, instead: &str) -> Result<()> {
    if mesh.is_multi_process() {
        return Err(Error::invalid(
            op,
            format!("in a multi-process mesh only the root holds the source; use {instead}"),
        ));
    }
    Ok(())
}

/// [`per_block`] for a transport that also reports the bytes every rank
/// contributed (MPI, where the other ranks' sizes come from their headers).
fn per_block_counted(
    op: &'static str,
    shards: &[LocalTensor],
    f: impl Fn(&[LocalTensor]) -> Result<(Vec<LocalTensor>, u64)>,
) -> Result<(Vec<LocalTensor>, u64)> {
    let bytes = std::cell::Cell::new(0);
    let out = per_block(op, shards, |s| {
        let (out, b) = f(s)?;
        bytes.set(bytes.get() + b);
        Ok(out)
    })?;
    Ok((out, bytes.get()))
}

/// Run a transport call on `shards`, block by block when they are stored in
/// row blocks (every shard alike), joining each output's blocks.
fn per_block(
    op: &'static str,
    shards: &[LocalTensor],
    f: impl Fn(&[LocalTensor]) -> Result<Vec<LocalTensor>>,
) -> Result<Vec<LocalTensor>> {
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let Some(n) = common_blocks(op, &refs)? else {
        return f(shards);
    };
    let mut outs: Vec<Vec<LocalTensor>> = Vec::new();
    for b in 0..n {
        let parts: Vec<LocalTensor> = shards.iter().map(|s| s.blocks()[b].clone()).collect();
        let got = f(&parts)?;
        outs.resize_with(got.len(), Vec::new);
        for (o, t) in outs.iter_mut().zip(got) {
            o.push(t);
        }
    }
    outs.into_iter().map(LocalTensor::from_blocks).collect()
}

/// Collectives whose pieces cross row blocks refuse blocked shards up front.
fn check_unblocked(op: &'static str, shards: &[LocalTensor]) -> Result<()> {
    match shards.iter().find(|s| s.is_blocked()) {
        Some(s) => Err(blocked_error(op, s)),
        None => Ok(()),
    }
}

/// (rank, bytes) of each participant of a many-to-many collective.
pub(super) fn contributions(shards: &[LocalTensor]) -> impl Iterator<Item = (usize, u64)> + '_ {
    shards.iter().map(|s| (s.rank_index(), s.byte_len()))
}

/// (rank, bytes) of each participant of a rooted collective: the root sends `src`.
fn rooted<'a>(src: &'a LocalTensor, ranks: &'a [Rank]) -> impl Iterator<Item = (usize, u64)> + 'a {
    ranks.iter().map(move |r| {
        let bytes = if r.index() == src.rank_index() {
            src.byte_len()
        } else {
            0
        };
        (r.index(), bytes)
    })
}

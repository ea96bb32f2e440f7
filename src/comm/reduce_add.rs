//! A row-parallel layer's all-reduce with its residual add in the same pass,
//! where ranks share one device: [`all_reduce`](super::all_reduce)'s sum in
//! participant order, then `residual + sum` as `kernels::add` rounds it, so
//! the bits are those of the two steps with one dispatch (and one pass over
//! the output) fewer per branch. Elsewhere the caller takes the two steps.

use super::collectives::{alone, contributions};
use super::group::{bytes_of, check_group, check_same_shapes};
use super::stats::Collective;
use super::trace::{CommSpan, finish_span};
use super::transport::Transport;
use crate::device::{LocalTensor, Mesh};
use crate::element::{DType, ReduceOp};
use crate::error::Result;
use crate::kernels::copy_fold::{Block, FOLD_INPUTS, fold_add, fold_block};

/// Every rank ends with `residual + Σ shards` (f32 sums in participant
/// order, the residual added last), counted as one all-reduce; `None`, with
/// nothing recorded, unless the mesh's transport is
/// [`Transport::SharedDevice`], there are two or more participants, and the
/// shards and `residual` are whole f32 tensors of one shape whose length is
/// a multiple of 4, `residual` on the participants' device.
pub(crate) fn all_reduce_sum_add(
    mesh: &Mesh,
    shards: &[LocalTensor],
    residual: &LocalTensor,
) -> Result<Option<Vec<LocalTensor>>> {
    const OP: &str = "all_reduce";
    let ranks = check_group(OP, mesh, shards)?;
    check_same_shapes(OP, shards)?;
    let fits = mesh.transport() == Transport::SharedDevice
        && !alone(mesh, shards)
        && residual.shape() == shards[0].shape()
        && residual.device().id() == ranks[0].device().id()
        && residual.len().is_multiple_of(4)
        && shards
            .iter()
            .chain([residual])
            .all(|t| t.dtype() == DType::F32 && !t.is_blocked());
    if !fits {
        return Ok(None);
    }
    let span = CommSpan::begin(mesh, Collective::AllReduce, contributions(shards));
    let acc = ranks[0].alloc(OP, shards[0].shape(), DType::F32)?;
    let groups: Vec<Vec<&LocalTensor>> = shards
        .chunks(FOLD_INPUTS)
        .map(|g| g.iter().collect())
        .collect();
    let last = groups.len() - 1;
    for (i, group) in groups.iter().enumerate() {
        if i == last {
            fold_add(group, residual, &acc, i > 0)?;
        } else {
            fold_block(group, &acc, Block::whole(acc.len()), ReduceOp::Sum, i > 0)?;
        }
    }
    let out = acc.with_aliases_on(&ranks[1..])?;
    mesh.record_comm(Collective::AllReduce, bytes_of(shards));
    finish_span(span);
    Ok(Some(out))
}

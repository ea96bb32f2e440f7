//! A row-parallel layer's all-reduce with its residual add in the same pass,
//! where ranks share one device: [`all_reduce`](super::all_reduce)'s sum in
//! participant order, then `residual + sum` as `kernels::add` rounds it, so
//! the bits are those of the two steps with one dispatch (and one pass over
//! the output) fewer per branch; for a few rows, also the RMSNorm that
//! follows (`kernels::fold_norm`). Elsewhere the caller takes the steps.

use super::collectives::{alone, contributions};
use super::group::{bytes_of, check_group, check_same_shapes};
use super::stats::Collective;
use super::trace::{CommSpan, finish_span};
use super::transport::Transport;
use crate::device::{LocalTensor, Mesh};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::kernels::copy_fold::{Block, FOLD_INPUTS, fold_add, fold_block};
use crate::kernels::fold_norm::{self, fold_norm_rows};

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
    let fits = residual.len().is_multiple_of(4);
    Ok(reduce_add(mesh, shards, residual, None, fits)?.map(|(sum, _)| sum))
}

/// [`all_reduce_sum_add`] of `[rows, cols]` shards, and the RMSNorm of its
/// result (on every rank, like the sum) with `gamma` `[cols]` and `eps`, with
/// [`norm_forward`](crate::kernels::norm_forward)'s bits, in the same
/// dispatch (`kernels::fold_norm`): `None`, with nothing recorded, where
/// [`all_reduce_sum_add`] would be or that kernel does not fit.
pub(crate) fn all_reduce_sum_add_norm(
    mesh: &Mesh,
    shards: &[LocalTensor],
    residual: &LocalTensor,
    (gamma, eps): (&LocalTensor, f32),
) -> Result<Option<(Vec<LocalTensor>, Vec<LocalTensor>)>> {
    // The output is shaped and placed like the residual.
    let fits = fold_norm::fits(residual, (gamma, eps));
    match reduce_add(mesh, shards, residual, Some((gamma, eps)), fits)? {
        Some((sum, Some(y))) => Ok(Some((sum, y))),
        Some((_, None)) => Err(Error::invalid(
            "all_reduce",
            "internal: the fused norm recorded nothing (please report this)",
        )),
        None => Ok(None),
    }
}

/// The sum on every rank, and the norm of it on every rank where asked.
type Reduced = (Vec<LocalTensor>, Option<Vec<LocalTensor>>);

/// Both entries: the fold into one buffer aliased on every rank, the
/// residual in its last pass, and that pass the fused norm where asked.
fn reduce_add(
    mesh: &Mesh,
    shards: &[LocalTensor],
    residual: &LocalTensor,
    norm: Option<(&LocalTensor, f32)>,
    fits: bool,
) -> Result<Option<Reduced>> {
    const OP: &str = "all_reduce";
    let ranks = check_group(OP, mesh, shards)?;
    check_same_shapes(OP, shards)?;
    let fits = fits
        && mesh.transport() == Transport::SharedDevice
        && !alone(mesh, shards)
        && residual.shape() == shards[0].shape()
        && std::sync::Arc::ptr_eq(residual.device(), ranks[0].device())
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
    let mut normed = None;
    for (i, group) in groups.iter().enumerate() {
        match (i == last, norm) {
            (true, Some(n)) => normed = Some(fold_norm_rows(group, residual, &acc, n, i > 0)?),
            (true, None) => fold_add(group, residual, &acc, i > 0)?,
            _ => fold_block(group, &acc, Block::whole(acc.len()), ReduceOp::Sum, i > 0)?,
        }
    }
    let out = acc.with_aliases_on(&ranks[1..])?;
    let normed = normed.map(|y| y.with_aliases_on(&ranks[1..])).transpose()?;
    mesh.record_comm(Collective::AllReduce, bytes_of(shards));
    finish_span(span);
    Ok(Some((out, normed)))
}

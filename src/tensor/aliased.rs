//! One computation for every rank where a replicated value is one buffer.
//!
//! On a shared-device mesh a replicated collective's result, and a
//! replicated upload, is a single buffer that every rank's shard aliases
//! ([`LocalTensor::alias_on`]). An operation whose operands are all so
//! would compute the same bits once per rank, one after another on the one
//! device; outside a recorded forward (inference) it computes them once and
//! hands every rank the result over the same buffer, as the collectives do.
//! Tensors are immutable, and an in-place update copies a shared buffer
//! first (loading one value into every rank writes it once), so no rank
//! can see another's change.

use super::autograd::in_taped_forward;
use super::dtensor::DTensor;
use crate::device::{LocalTensor, Mesh, Rank};
use crate::error::Result;

/// Whether there are several shards and they are one buffer.
pub(crate) fn one_buffer(shards: &[LocalTensor]) -> bool {
    shards.len() > 1 && shards[1..].iter().all(|x| x.same_buffer(&shards[0]))
}

/// Whether each operand's shards are one buffer ([`one_buffer`]).
pub(super) fn one_buffer_each(operands: &[&DTensor]) -> bool {
    operands.iter().all(|t| one_buffer(t.shards()))
}

/// Whether an operation on `operands` may run once for every rank: each is
/// one buffer, and no recorded forward is running (training keeps a
/// computation per rank: its replicated parameters get a buffer per rank
/// at the first update, and its steps should all do alike).
fn once(operands: &[&DTensor]) -> bool {
    !in_taped_forward() && one_buffer_each(operands)
}

/// A value every rank of `mesh` holds alike, made once by `make` on the
/// first rank and aliased onto the others, where this process's ranks (two
/// or more) share one device; `None` elsewhere (make one per rank).
pub(crate) fn made_once(
    mesh: &Mesh,
    make: impl FnOnce(&Rank) -> Result<LocalTensor>,
) -> Result<Option<Vec<LocalTensor>>> {
    let [first, rest @ ..] = mesh.ranks() else {
        return Ok(None);
    };
    if rest.is_empty() || rest.iter().any(|r| r.device().id() != first.device().id()) {
        return Ok(None);
    }
    Ok(Some(make(first)?.with_aliases_on(rest)?))
}

/// `f(i)` for every shard position `i` of `operands[0]` (each call's `N`
/// outputs, e.g. a result and its statistics), or where [`once`] holds,
/// `f(0)`'s outputs aliased onto every other shard's rank.
pub(super) fn per_shard<const N: usize>(
    operands: &[&DTensor],
    mut f: impl FnMut(usize) -> Result<[LocalTensor; N]>,
) -> Result<Vec<[LocalTensor; N]>> {
    let shards = operands[0].shards();
    if !once(operands) {
        return (0..shards.len()).map(f).collect();
    }
    let first = f(0)?;
    let mut all = Vec::with_capacity(shards.len());
    for s in &shards[1..] {
        let rank = s.rank();
        let mut aliases = first.clone();
        for t in &mut aliases {
            *t = t.alias_on(&rank)?;
        }
        all.push(aliases);
    }
    all.insert(0, first);
    Ok(all)
}

/// [`per_shard`] for one output a call.
pub(super) fn per_shard1(
    operands: &[&DTensor],
    mut f: impl FnMut(usize) -> Result<LocalTensor>,
) -> Result<Vec<LocalTensor>> {
    let outs = per_shard(operands, |i| Ok([f(i)?]))?;
    Ok(outs.into_iter().map(|[t]| t).collect())
}

//! The sequence-parallel gather and reduce-scatter along tokens (dim 0) as
//! `P − 1` point-to-point ring steps, each fused with per-chunk work so a
//! step's transfer is in flight while that work is recorded (xlstm-jax's
//! `TPAsyncDense`, `async_gather` / `async_scatter`). They are the ring forms
//! of [`Mapping::AllGatherToParallel(0)`](super::Mapping::AllGatherToParallel)
//! and [`Mapping::ReduceScatterToParallel(0)`](super::Mapping::ReduceScatterToParallel),
//! and each is the other's backward: a layer that gathers with
//! [`ring_all_gather_fused`] in forward reduce-scatters with
//! [`ring_reduce_scatter_fused`] in backward, and the other way round.
//!
//! Token chunk `c` is rows [`split_range`]`(tokens, P, c)` (the uneven-split
//! rule), so chunk `r` is what rank `r` holds under `Shard(0)`. No
//! all-gather or reduce-scatter collective is issued: each step counts one
//! [`Collective::SendRecv`](crate::comm::Collective::SendRecv).

use super::dtensor::DTensor;
use super::placement::{Placement, local_shape_in_units};
use crate::comm::RingShift;
use crate::device::{LocalTensor, Mesh};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels;
use crate::shard::split_range;

/// Ring all-gather of a `Shard(0)` tensor fused with `visit`: rank r starts
/// with chunk r; at step s it holds chunk `(r − s) mod P`, and
/// `visit(i, chunk_index, chunk)` records that step's work after the step's
/// transfer has started, `i` being the position in `x.shards()` (the global
/// rank is `x.shards()[i].rank_index()`). Returns what `visit` produced as
/// `[position][chunk]`, chunks in chunk order. `P − 1` ring steps in all.
pub fn ring_all_gather_fused<T>(
    x: &DTensor,
    mut visit: impl FnMut(usize, usize, &LocalTensor) -> Result<T>,
) -> Result<Vec<Vec<T>>> {
    expect_tokens_split("ring_all_gather_fused", x)?;
    let (mesh, p) = (x.mesh(), x.mesh().size());
    // Only the addressable ranks' rows; the chunk index needs the global rank.
    let ranks: Vec<usize> = x.shards().iter().map(LocalTensor::rank_index).collect();
    let mut produced: Vec<Vec<Option<T>>> = ranks
        .iter()
        .map(|_| (0..p).map(|_| None).collect())
        .collect();
    let mut held = x.shards().to_vec();
    for s in 0..p {
        let shift = if s + 1 < p {
            Some(RingShift::start(mesh, &held)?)
        } else {
            None
        };
        for (i, chunk) in held.iter().enumerate() {
            let c = (ranks[i] + p - s) % p;
            produced[i][c] = Some(visit(i, c, chunk)?);
        }
        if let Some(shift) = shift {
            held = shift.finish()?;
        }
    }
    Ok(produced
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|t| t.expect("the ring visits every chunk on every rank"))
                .collect()
        })
        .collect())
}

/// Ring reduce-scatter of per-chunk partial products: `partial(i, c)`
/// records the partial `[rows of chunk c, ..]` of the rank at position `i`
/// of `mesh.ranks()`. At step s global rank r computes the partial for
/// chunk `(r − 1 − s) mod P` while the running sum from step s − 1 travels
/// one hop, then adds it; after `P − 1` ring steps rank r holds the full sum
/// of chunk r. The result is `shape` (dim 0 the tokens), `Shard(0)`.
pub fn ring_reduce_scatter_fused(
    mesh: &Mesh,
    shape: &[usize],
    mut partial: impl FnMut(usize, usize) -> Result<LocalTensor>,
) -> Result<DTensor> {
    let p = mesh.size();
    let ranks: Vec<usize> = mesh.ranks().iter().map(|r| r.index()).collect();
    let mut acc = ranks
        .iter()
        .enumerate()
        .map(|(i, &r)| partial(i, (r + p - 1) % p))
        .collect::<Result<Vec<_>>>()?;
    for s in 1..p {
        let shift = RingShift::start(mesh, &acc)?;
        let parts = ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| partial(i, (r + 2 * p - 1 - s) % p))
            .collect::<Result<Vec<_>>>()?;
        let incoming = shift.finish()?;
        acc = parts
            .iter()
            .zip(&incoming)
            .map(|(a, b)| kernels::add(a, b))
            .collect::<Result<Vec<_>>>()?;
    }
    DTensor::from_shards(mesh, acc, shape, Placement::Shard(0))
}

/// Rows of token chunk `c` (of `p`) of a local tensor holding all `tokens`
/// rows (the tensor itself when that is all of it).
pub fn token_chunk(t: &LocalTensor, p: usize, c: usize) -> Result<LocalTensor> {
    let tokens = t.shape().first().copied().unwrap_or(0);
    let range = split_range(tokens, p, c);
    if range.len() == tokens {
        return Ok(t.clone());
    }
    kernels::narrow(t, 0, range.start, range.len())
}

/// Per addressable rank, its chunks (in chunk order) joined along rows: the gathered
/// tensor from what [`ring_all_gather_fused`] produced.
pub fn concat_token_chunks(chunks: &[Vec<LocalTensor>]) -> Result<Vec<LocalTensor>> {
    chunks
        .iter()
        .map(|row| match row.as_slice() {
            [one] => Ok(one.clone()),
            parts => kernels::concat(&parts.iter().collect::<Vec<_>>(), 0),
        })
        .collect()
}

/// A ring path's activation must be split along tokens.
pub(crate) fn expect_tokens_split(op: &'static str, x: &DTensor) -> Result<()> {
    if x.mesh().size() > 1 && x.placement() != Placement::Shard(0) {
        return Err(Error::invalid(
            op,
            format!(
                "with sequence_parallel the tensor must be placed Shard(0) (tokens split), got {:?}",
                x.placement()
            ),
        ));
    }
    Ok(())
}

/// `x` is split along tokens as the ring's chunks are: rank r holds token
/// chunk r of the plain uneven split (units of 1).
pub(super) fn expect_token_chunks(op: &'static str, x: &DTensor) -> Result<()> {
    expect_tokens_split(op, x)?;
    let (p, tokens) = (x.mesh().size(), x.shape().first().copied().unwrap_or(0));
    // Every global rank's rows from the placement (not the addressable
    // shards), so every process reaches the same verdict before the ring.
    let rows: Vec<usize> = (0..p)
        .map(|r| local_shape_in_units(x.shape(), x.placement(), p, r, x.shard_unit())[0])
        .collect();
    let want: Vec<usize> = (0..p).map(|r| split_range(tokens, p, r).len()).collect();
    if rows != want {
        return Err(Error::invalid(
            op,
            format!(
                "the tokens are split {rows:?} over the ranks (shard unit {}), but the ring's \
                 chunks follow the plain split {want:?}: redistribute to Shard(0) first",
                x.shard_unit()
            ),
        ));
    }
    Ok(())
}

/// The operands of a ring-fused linear product: `x` `[T, K]` and `w`
/// `[N, K]`, both f32 (the ring moves f32 chunks), on one mesh. Gives
/// `(T, K, N)`.
pub(super) fn ring_operands(
    op: &'static str,
    x: &DTensor,
    w: &DTensor,
) -> Result<(usize, usize, usize)> {
    if !x.mesh().same_as(w.mesh()) {
        return Err(Error::invalid(op, "the operands live on different meshes"));
    }
    let [t, k] = match *x.shape() {
        [t, k] => [t, k],
        ref s => return Err(Error::shape(op, "x as a 2-D tensor [T, K]", s)),
    };
    let n = match *w.shape() {
        [n, kw] if kw == k => n,
        ref s => return Err(Error::shape(op, format!("w [N, {k}] (x's K)"), s)),
    };
    for t in [x, w] {
        if t.dtype() != DType::F32 {
            return Err(Error::invalid(
                op,
                format!(
                    "the ring moves f32 chunks, got {:?} operands: cast to f32, or use the \
                     collective form (a Mapping and DTensor::linear)",
                    t.dtype()
                ),
            ));
        }
    }
    Ok((t, k, n))
}

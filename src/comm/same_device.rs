//! Shared-device transport ([`Transport::SharedDevice`](super::Transport::SharedDevice):
//! all ranks on one wgpu device): nothing touches the host. Gathers,
//! scatters and all-to-all are on-device copies ([`copy_block`]:
//! `copy_buffer_to_buffer` for contiguous blocks, a strided copy kernel
//! otherwise); reductions fold every participant's block into a
//! fresh output in participant order with [`fold_block`] (one pass per
//! [`FOLD_INPUTS`] participants, each input read once). A result that is the
//! same on every rank (all-gather, all-reduce, broadcast) is built once and
//! handed to every rank over the same buffer ([`LocalTensor::alias_on`]):
//! tensors are immutable, so P copies would only cost time and memory, and
//! every rank reads bit-identical bytes. Everything is recorded into the
//! device's pending encoder; nothing waits.

use super::plan::{AllToAll, Split, gathered_shape};
use crate::device::{LocalTensor, Rank};
use crate::element::ReduceOp;
use crate::error::Result;
use crate::kernels::copy_fold::{Block, FOLD_INPUTS, copy_block, fold_block};
use crate::shard::{outer_dim_inner, with_dim};

/// A block of `range` along `dim` of a tensor of `shape`, written to the whole
/// of a tensor holding just that slice.
fn slice_block(shape: &[usize], dim: usize, range: std::ops::Range<usize>) -> Block {
    let (outer, n, inner) = outer_dim_inner(shape, dim);
    Block {
        outer,
        len: range.len(),
        inner,
        src_dim: n,
        src_start: range.start,
        dst_dim: range.len(),
        dst_start: 0,
    }
}

/// The whole of a tensor of `shape` written at `offset` along `dim` of a
/// tensor whose `dim` has size `dst_dim`.
fn place_block(shape: &[usize], dim: usize, dst_dim: usize, offset: usize) -> Block {
    let (outer, n, inner) = outer_dim_inner(shape, dim);
    Block {
        outer,
        len: n,
        inner,
        src_dim: n,
        src_start: 0,
        dst_dim,
        dst_start: offset,
    }
}

/// `out[block] = shards[0][block] ∘ shards[1][block] ∘ ...` in participant
/// order, [`FOLD_INPUTS`] inputs per pass.
fn fold_all(shards: &[LocalTensor], out: &LocalTensor, block: Block, op: ReduceOp) -> Result<()> {
    for (i, group) in shards.chunks(FOLD_INPUTS).enumerate() {
        let group: Vec<&LocalTensor> = group.iter().collect();
        fold_block(&group, out, block, op, i > 0)?;
    }
    Ok(())
}

pub(super) fn all_reduce(
    shards: &[LocalTensor],
    ranks: &[Rank],
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    let acc = ranks[0].alloc("all_reduce", shards[0].shape(), shards[0].dtype())?;
    fold_all(shards, &acc, Block::whole(acc.len()), op)?;
    acc.with_aliases_on(&ranks[1..])
}

pub(super) fn all_gather(
    shards: &[LocalTensor],
    ranks: &[Rank],
    dim: usize,
) -> Result<Vec<LocalTensor>> {
    let shape = gathered_shape(shards, dim);
    let total = shape[dim];
    let first = ranks[0].alloc("all_gather", &shape, shards[0].dtype())?;
    let mut at = 0;
    for s in shards {
        copy_block(s, &first, place_block(s.shape(), dim, total, at))?;
        at += s.shape()[dim];
    }
    first.with_aliases_on(&ranks[1..])
}

pub(super) fn reduce_scatter(
    shards: &[LocalTensor],
    ranks: &[Rank],
    dim: usize,
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    let shape = shards[0].shape();
    let split = Split::new(shape, dim, ranks.len());
    let pieces = split.ranges.iter().zip(split.outputs(ranks));
    pieces
        .map(|(range, (r, piece))| {
            let out = r.alloc("reduce_scatter", piece, shards[0].dtype())?;
            fold_all(shards, &out, slice_block(shape, dim, range.clone()), op)?;
            Ok(out)
        })
        .collect()
}

pub(super) fn broadcast(
    src: &LocalTensor,
    ranks: &[Rank],
    root: usize,
) -> Result<Vec<LocalTensor>> {
    ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if i == root {
                Ok(src.clone())
            } else {
                src.alias_on(r)
            }
        })
        .collect()
}

pub(super) fn scatter(src: &LocalTensor, ranks: &[Rank], dim: usize) -> Result<Vec<LocalTensor>> {
    let shape = src.shape();
    let split = Split::new(shape, dim, ranks.len());
    let pieces = split.ranges.iter().zip(split.outputs(ranks));
    pieces
        .map(|(range, (r, piece))| {
            let out = r.alloc("scatter", piece, src.dtype())?;
            copy_block(src, &out, slice_block(shape, dim, range.clone()))?;
            Ok(out)
        })
        .collect()
}

pub(super) fn all_to_all(
    shards: &[LocalTensor],
    ranks: &[Rank],
    plan: &AllToAll,
) -> Result<Vec<LocalTensor>> {
    let (split, concat) = (plan.split_dim, plan.concat_dim);
    let dtype = shards[0].dtype();
    ranks
        .iter()
        .enumerate()
        .map(|(j, r)| {
            let shape = &plan.out_shapes[j];
            let out = r.alloc("all_to_all", shape, dtype)?;
            for (i, s) in shards.iter().enumerate() {
                let range = plan.pieces[i][j].clone();
                let offset = plan.offsets[i][j];
                if split == concat {
                    // One window along one dim: straight from shard to output.
                    let (outer, n, inner) = outer_dim_inner(s.shape(), split);
                    let block = Block {
                        outer,
                        len: range.len(),
                        inner,
                        src_dim: n,
                        src_start: range.start,
                        dst_dim: shape[concat],
                        dst_start: offset,
                    };
                    copy_block(s, &out, block)?;
                } else {
                    // Two windows along two dims: cut the piece out, then place it.
                    let piece_shape = with_dim(s.shape(), split, range.len());
                    let piece = r.alloc("all_to_all", &piece_shape, dtype)?;
                    copy_block(s, &piece, slice_block(s.shape(), split, range))?;
                    copy_block(
                        &piece,
                        &out,
                        place_block(&piece_shape, concat, shape[concat], offset),
                    )?;
                }
            }
            Ok(out)
        })
        .collect()
}

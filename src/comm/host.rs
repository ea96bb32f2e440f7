//! Host-staged transport (each rank its own wgpu device): download every
//! input at once with [`download_many`] (one wait per device), combine on the
//! host in fixed participant order, then upload each result with
//! `queue.write_buffer` (no wait: the upload lands before the rank's next
//! submit). Works on raw 32-bit words, so f32 and i32 share every path but the
//! arithmetic.

use std::borrow::Cow;

use super::layout::{concat_words, slice_words, with_dim};
use super::{AllToAll, ReduceOp, around};
use crate::device::{DType, LocalTensor, Rank, download_many};
use crate::error::Result;
use crate::shard::split_range;

/// Download tensors as words: borrowed when the byte buffer happens to be
/// 4-aligned (it usually is), copied otherwise.
fn words(bytes: &[u8]) -> Cow<'_, [u32]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(w) => Cow::Borrowed(w),
        Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(bytes)),
    }
}

fn download(tensors: &[&LocalTensor]) -> Result<Vec<Vec<u8>>> {
    download_many(tensors)
}

fn upload(rank: &Rank, shape: &[usize], dtype: DType, data: &[u32]) -> Result<LocalTensor> {
    match dtype {
        DType::F32 => rank.upload(shape, bytemuck::cast_slice(data)),
        DType::I32 => rank.upload_i32(shape, bytemuck::cast_slice(data)),
    }
}

/// `acc = op(acc, x)` element-wise on words holding `dtype` values.
fn combine(acc: &mut [u32], x: &[u32], dtype: DType, op: ReduceOp) {
    fn zip(acc: &mut [u32], x: &[u32], f: impl Fn(u32, u32) -> u32) {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = f(*a, *b);
        }
    }
    match (dtype, op) {
        (DType::F32, ReduceOp::Sum) => zip(acc, x, |a, b| {
            (f32::from_bits(a) + f32::from_bits(b)).to_bits()
        }),
        (DType::F32, ReduceOp::Max) => zip(acc, x, |a, b| {
            f32::from_bits(a).max(f32::from_bits(b)).to_bits()
        }),
        (DType::I32, ReduceOp::Sum) => zip(acc, x, |a, b| (a as i32).wrapping_add(b as i32) as u32),
        (DType::I32, ReduceOp::Max) => zip(acc, x, |a, b| (a as i32).max(b as i32) as u32),
    }
}

/// Download all shards and reduce them in participant order: acc = x0; acc = op(acc, x1); ...
fn reduce_all(shards: &[LocalTensor], op: ReduceOp) -> Result<Vec<u32>> {
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let data = download(&refs)?;
    let dtype = shards[0].dtype();
    let mut acc = words(&data[0]).into_owned();
    for d in &data[1..] {
        combine(&mut acc, &words(d), dtype, op);
    }
    Ok(acc)
}

pub(super) fn all_reduce(
    shards: &[LocalTensor],
    ranks: &[Rank],
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    let acc = reduce_all(shards, op)?;
    let (shape, dtype) = (shards[0].shape(), shards[0].dtype());
    ranks
        .iter()
        .map(|r| upload(r, shape, dtype, &acc))
        .collect()
}

pub(super) fn all_gather(
    shards: &[LocalTensor],
    ranks: &[Rank],
    dim: usize,
) -> Result<Vec<LocalTensor>> {
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let data = download(&refs)?;
    let words: Vec<Cow<'_, [u32]>> = data.iter().map(|d| words(d)).collect();
    let (outer, _, inner) = around(shards[0].shape(), dim);
    let parts: Vec<(&[u32], usize)> = words
        .iter()
        .zip(shards)
        .map(|(w, s)| (&w[..], s.shape()[dim]))
        .collect();
    let full = concat_words(&parts, outer, inner);
    let total = parts.iter().map(|p| p.1).sum();
    let shape = with_dim(shards[0].shape(), dim, total);
    let dtype = shards[0].dtype();
    ranks
        .iter()
        .map(|r| upload(r, &shape, dtype, &full))
        .collect()
}

pub(super) fn reduce_scatter(
    shards: &[LocalTensor],
    ranks: &[Rank],
    dim: usize,
    op: ReduceOp,
) -> Result<Vec<LocalTensor>> {
    let acc = reduce_all(shards, op)?;
    let (shape, dtype) = (shards[0].shape(), shards[0].dtype());
    let p = ranks.len();
    ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let range = split_range(shape[dim], p, i);
            let part = with_dim(shape, dim, range.len());
            upload(r, &part, dtype, &slice_words(&acc, shape, dim, range))
        })
        .collect()
}

pub(super) fn broadcast(
    src: &LocalTensor,
    ranks: &[Rank],
    root: usize,
) -> Result<Vec<LocalTensor>> {
    let data = download(&[src])?;
    let w = words(&data[0]);
    ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if i == root {
                Ok(src.clone())
            } else {
                upload(r, src.shape(), src.dtype(), &w)
            }
        })
        .collect()
}

pub(super) fn scatter(src: &LocalTensor, ranks: &[Rank], dim: usize) -> Result<Vec<LocalTensor>> {
    let data = download(&[src])?;
    let w = words(&data[0]);
    let shape = src.shape();
    let p = ranks.len();
    ranks
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let range = split_range(shape[dim], p, i);
            let part = with_dim(shape, dim, range.len());
            upload(r, &part, src.dtype(), &slice_words(&w, shape, dim, range))
        })
        .collect()
}

pub(super) fn all_to_all(
    shards: &[LocalTensor],
    ranks: &[Rank],
    plan: &AllToAll,
) -> Result<Vec<LocalTensor>> {
    let refs: Vec<&LocalTensor> = shards.iter().collect();
    let data = download(&refs)?;
    let words: Vec<Cow<'_, [u32]>> = data.iter().map(|d| words(d)).collect();
    let dtype = shards[0].dtype();
    let (split, concat) = (plan.split_dim, plan.concat_dim);
    ranks
        .iter()
        .enumerate()
        .map(|(j, r)| {
            let pieces: Vec<(Vec<u32>, usize)> = shards
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let range = plan.pieces[i][j].clone();
                    let shape = with_dim(s.shape(), split, range.len());
                    let w = slice_words(&words[i], s.shape(), split, range);
                    (w, shape[concat])
                })
                .collect();
            let shape = &plan.out_shapes[j];
            let (outer, _, inner) = around(shape, concat);
            let parts: Vec<(&[u32], usize)> = pieces.iter().map(|(w, n)| (&w[..], *n)).collect();
            upload(r, shape, dtype, &concat_words(&parts, outer, inner))
        })
        .collect()
}

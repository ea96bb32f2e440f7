//! Slicing tensors on one rank: `narrow` (take `len` entries of one
//! dimension starting at `start`) and `concat` (join tensors along a
//! dimension), both block copies (`copy_block`, `shaders/copy_fold.wgsl`).
//! They move 4-byte words, so they serve f32 and i32 as they are; f16
//! tensors are widened, sliced and rounded back (exact: every f16 value is
//! an f32 one). Contiguous cases (dim 0, or all outer sizes 1) are plain
//! buffer copies.

use super::cast::cast;
use super::copy_fold::{Block, copy_block};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::shard::{outer_dim_inner, with_dim};

/// Entries `start..start+len` of dimension `dim` of `x`, as a new tensor.
pub fn narrow(x: &LocalTensor, dim: usize, start: usize, len: usize) -> Result<LocalTensor> {
    const OP: &str = "narrow";
    if x.dtype() == DType::F16 {
        return cast(&narrow(&cast(x, DType::F32)?, dim, start, len)?, DType::F16);
    }
    if dim >= x.shape().len() {
        return Err(Error::OutOfRange {
            op: OP,
            what: "dim",
            value: dim as i64,
            bound: x.shape().len(),
        });
    }
    let (outer, d, inner) = outer_dim_inner(x.shape(), dim);
    if start + len > d {
        return Err(Error::invalid(
            OP,
            format!(
                "range {start}..{} is outside dimension {dim} of size {d}",
                start + len
            ),
        ));
    }
    let out = x
        .rank()
        .alloc(OP, &with_dim(x.shape(), dim, len), x.dtype())?;
    let block = Block {
        outer,
        len,
        inner,
        src_dim: d,
        src_start: start,
        dst_dim: len,
        dst_start: 0,
    };
    copy_block(x, &out, block)?;
    Ok(out)
}

/// Join `parts` (all on one rank, same dtype, equal shapes except along `dim`) along `dim`.
pub fn concat(parts: &[&LocalTensor], dim: usize) -> Result<LocalTensor> {
    const OP: &str = "concat";
    let first = parts
        .first()
        .ok_or_else(|| Error::invalid(OP, "needs at least one tensor"))?;
    let nd = first.shape().len();
    if dim >= nd {
        return Err(Error::OutOfRange {
            op: OP,
            what: "dim",
            value: dim as i64,
            bound: nd,
        });
    }
    let mut total = 0;
    for p in parts {
        first.same_rank(OP, p)?;
        p.expect_dtype(OP, first.dtype())?;
        let ok = p.shape().len() == nd
            && p.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(i, (a, b))| i == dim || a == b);
        if !ok {
            return Err(Error::shape(OP, first.shape(), p.shape()));
        }
        total += p.shape()[dim];
    }
    if first.dtype() == DType::F16 {
        let wide = parts
            .iter()
            .map(|p| cast(p, DType::F32))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&LocalTensor> = wide.iter().collect();
        return cast(&concat(&refs, dim)?, DType::F16);
    }
    let shape = with_dim(first.shape(), dim, total);
    let out = first.rank().alloc(OP, &shape, first.dtype())?;
    let (outer, _, inner) = outer_dim_inner(&shape, dim);
    let mut start = 0;
    for p in parts {
        let len = p.shape()[dim];
        let block = Block {
            outer,
            len,
            inner,
            src_dim: len,
            src_start: 0,
            dst_dim: total,
            dst_start: start,
        };
        copy_block(p, &out, block)?;
        start += len;
    }
    Ok(out)
}

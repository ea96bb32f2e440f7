//! Layout kernels (`shaders/layout.wgsl`): `narrow` (take `len` entries of one
//! dimension starting at `start`) and `concat` (join tensors along a
//! dimension). They move 4-byte words, so they serve every dtype.
//! Contiguous cases (dim 0, or all outer sizes 1) are plain buffer copies.

use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, copy_region};
use crate::error::{Error, Result};
use crate::shard::outer_dim_inner;

const SOURCE: &str = include_str!("../../shaders/layout.wgsl");
const BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    outer: u32,
    len: u32,
    inner: u32,
    src_dim: u32,
    dst_dim: u32,
    start: u32,
    _pad: [u32; 2],
}

fn spec(entry: &'static str) -> KernelSpec {
    KernelSpec {
        family: "layout",
        source: SOURCE,
        entry,
        bindings: BINDINGS,
        constants: Vec::new(),
    }
}

fn to_u32(op: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(op, format!("size {v} exceeds 2^32")))
}

/// Entries `start..start+len` of dimension `dim` of `x`, as a new tensor.
pub fn narrow(x: &LocalTensor, dim: usize, start: usize, len: usize) -> Result<LocalTensor> {
    const OP: &str = "narrow";
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
    let mut shape = x.shape().to_vec();
    shape[dim] = len;
    let out = x.rank().alloc(OP, &shape, x.dtype())?;
    if outer == 1 || len == d {
        // One contiguous run (or the whole tensor).
        let count = if len == d { x.len() } else { len * inner };
        copy_region(x, start * inner, &out, 0, count)?;
        return Ok(out);
    }
    let params = Params {
        outer: to_u32(OP, outer)?,
        len: to_u32(OP, len)?,
        inner: to_u32(OP, inner)?,
        src_dim: to_u32(OP, d)?,
        dst_dim: to_u32(OP, len)?,
        start: to_u32(OP, start)?,
        _pad: [0; 2],
    };
    Dispatch {
        spec: &spec("narrow"),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, &out],
        workgroups: (out.len() as u64).div_ceil(256),
    }
    .record(x.gpu())?;
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
    let mut shape = first.shape().to_vec();
    shape[dim] = total;
    let out = first.rank().alloc(OP, &shape, first.dtype())?;
    let (outer, _, inner) = outer_dim_inner(&shape, dim);
    let mut start = 0;
    for p in parts {
        let len = p.shape()[dim];
        if outer == 1 {
            copy_region(p, 0, &out, start * inner, p.len())?;
        } else if !p.is_empty() {
            let params = Params {
                outer: to_u32(OP, outer)?,
                len: to_u32(OP, len)?,
                inner: to_u32(OP, inner)?,
                src_dim: to_u32(OP, len)?,
                dst_dim: to_u32(OP, total)?,
                start: to_u32(OP, start)?,
                _pad: [0; 2],
            };
            Dispatch {
                spec: &spec("place"),
                params: bytemuck::bytes_of(&params),
                buffers: &[p, &out],
                workgroups: (p.len() as u64).div_ceil(256),
            }
            .record(first.gpu())?;
        }
        start += len;
    }
    Ok(out)
}

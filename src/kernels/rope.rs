//! Rotary position embedding (`shaders/rope.wgsl`) in Hugging Face's
//! `rotate_half` layout: each head of width `D` is split into halves
//! `x₁ = x[..D/2]`, `x₂ = x[D/2..]`, and token `r` (at row `r mod seq` of
//! the tables) becomes
//!
//! `y₁ = x₁ cos − x₂ sin`, `y₂ = x₂ cos + x₁ sin`
//!
//! with `cos`, `sin` `[seq, D/2]` computed on the host (the angles and any
//! attention scaling of the RoPE variant are the caller's). The backward
//! pass is the inverse rotation, the same kernel with `sin` negated
//! ([`rotary`] with `inverse`). A decoding step rotates its query and key
//! in one dispatch ([`rotary_pair`]).

use super::grid::{grid_groups, grid_source};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = grid_source!("rope.wgsl");
const BINDINGS: &[Access] = &[Access::Read, Access::Read, Access::Read, Access::ReadWrite];
const PAIR_BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::Read,
    Access::ReadWrite,
];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    heads: u32,
    half: u32,
    seq: u32,
    sign: f32,
    heads2: u32,
    _pad: [u32; 2],
}

/// Rotate every head of `x` `[rows, heads·head_dim]` (F32, one rank) by the
/// tables `cos`, `sin` `[seq, head_dim/2]`: row `r` takes table row `r mod
/// seq` (tokens batch-major, positions `0..seq` per sequence, or a decoding
/// step's positions). `inverse` rotates back (the VJP). `head_dim` must be
/// even and divide the columns; `rows` a multiple of `seq`.
pub fn rotary(
    x: &LocalTensor,
    cos: &LocalTensor,
    sin: &LocalTensor,
    head_dim: usize,
    inverse: bool,
) -> Result<LocalTensor> {
    const OP: &str = "rotary";
    let (rows, heads, seq) = check(OP, x, (cos, sin), head_dim)?;
    let out = x.rank().alloc(OP, x.shape(), DType::F32)?;
    let half = head_dim / 2;
    let n = rows * heads * half;
    if n == 0 {
        return Ok(out);
    }
    let params = Params {
        rows: rows as u32,
        heads: heads as u32,
        half: half as u32,
        seq: seq as u32,
        sign: if inverse { -1.0 } else { 1.0 },
        heads2: 0,
        _pad: [0; 2],
    };
    Dispatch {
        spec: &KernelSpec::new("rope", SOURCE, BINDINGS, "rotary"),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, cos, sin, &out],
        workgroups: grid_groups(x.device(), n),
    }
    .record(x.device())?;
    Ok(out)
}

/// [`rotary`] of `q` and `k` (a decoding step's query and key projections,
/// the same rows) in one dispatch: the same bits as two calls.
pub fn rotary_pair(
    q: &LocalTensor,
    k: &LocalTensor,
    cos: &LocalTensor,
    sin: &LocalTensor,
    head_dim: usize,
) -> Result<(LocalTensor, LocalTensor)> {
    const OP: &str = "rotary_pair";
    let (rows, heads, seq) = check(OP, q, (cos, sin), head_dim)?;
    let (rows2, heads2, _) = check(OP, k, (cos, sin), head_dim)?;
    if rows2 != rows {
        return Err(Error::shape(
            OP,
            format!("k with q's {rows} rows"),
            k.shape(),
        ));
    }
    q.same_rank(OP, k)?;
    let half = head_dim / 2;
    let n = rows * (heads + heads2) * half;
    if heads == 0 || heads2 == 0 || n == 0 {
        // Nothing to share a dispatch with.
        return Ok((
            rotary(q, cos, sin, head_dim, false)?,
            rotary(k, cos, sin, head_dim, false)?,
        ));
    }
    if n > u32::MAX as usize {
        return Err(Error::invalid(OP, "more than 2^32 elements"));
    }
    let (qo, ko) = (
        q.rank().alloc(OP, q.shape(), DType::F32)?,
        k.rank().alloc(OP, k.shape(), DType::F32)?,
    );
    let params = Params {
        rows: rows as u32,
        heads: heads as u32,
        half: half as u32,
        seq: seq as u32,
        sign: 1.0,
        heads2: heads2 as u32,
        _pad: [0; 2],
    };
    Dispatch {
        spec: &KernelSpec::new("rope", SOURCE, PAIR_BINDINGS, "rotary_pair"),
        params: bytemuck::bytes_of(&params),
        buffers: &[q, cos, sin, &qo, k, &ko],
        workgroups: grid_groups(q.device(), n),
    }
    .record(q.device())?;
    Ok((qo, ko))
}

/// `(rows, heads, seq)` of `x` rotated by `cos`, `sin`, or the error.
fn check(
    op: &'static str,
    x: &LocalTensor,
    (cos, sin): (&LocalTensor, &LocalTensor),
    head_dim: usize,
) -> Result<(usize, usize, usize)> {
    for t in [x, cos, sin] {
        t.expect_dtype(op, DType::F32)?;
        x.same_rank(op, t)?;
    }
    let [rows, cols] = *x.shape() else {
        return Err(Error::shape(op, "x as [rows, heads·head_dim]", x.shape()));
    };
    if head_dim == 0 || !head_dim.is_multiple_of(2) || !cols.is_multiple_of(head_dim) {
        return Err(Error::invalid(
            op,
            format!("head_dim {head_dim} must be even, ≥ 2, and divide the {cols} columns"),
        ));
    }
    let half = head_dim / 2;
    let [seq, h] = *cos.shape() else {
        return Err(Error::shape(op, format!("cos [seq, {half}]"), cos.shape()));
    };
    if h != half || sin.shape() != cos.shape() {
        return Err(Error::shape(
            op,
            format!("cos and sin [{seq}, {half}]"),
            sin.shape(),
        ));
    }
    if seq == 0 || !rows.is_multiple_of(seq) {
        return Err(Error::invalid(
            op,
            format!("{rows} rows are not whole sequences of the tables' {seq} positions"),
        ));
    }
    if x.len() > u32::MAX as usize {
        return Err(Error::invalid(op, "more than 2^32 elements"));
    }
    Ok((rows, cols / head_dim, seq))
}

//! Inverted dropout with a counter-based mask (`shaders/dropout.wgsl`):
//! `out = x·m/(1 − p)`, `m ∈ {0, 1}`; the same kernel applies the mask to a
//! gradient in backward.
//!
//! The mask bit of logical element `g` (its row-major index in the whole,
//! unsharded tensor) is drawn by Philox-4x32-10 (Random123's constants) from
//! the counter `(g, layer, step_lo, step_hi)` under the key
//! `(seed_lo, seed_hi)`: the element is kept when the first output word is at
//! least `⌊p·2³²⌋`. A shard computes `g` from its [`ShardWindow`], so every
//! sharding of one logical tensor gets the same mask bits, and the keep
//! probability is `1 − ⌊p·2³²⌋/2³²` (within `2⁻³²` of `1 − p`).

use super::grid::grid_groups;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::shard::outer_dim_inner;

pub(crate) const SOURCE: &str = concat!(
    include_str!("../../shaders/grid.wgsl"),
    include_str!("../../shaders/philox.wgsl"),
    include_str!("../../shaders/dropout.wgsl")
);
const BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];

/// The key of a mask: which draw of which layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PhiloxKey {
    /// The run's seed (the Philox key).
    pub seed: u64,
    /// The training step (counter words 2 and 3).
    pub step: u64,
    /// The layer's id (counter word 1).
    pub layer: u32,
}

/// Where a local tensor sits in its logical tensor: the slice
/// `[start, start + local len)` of dimension `dim`, whose logical size is
/// `total`; every other dimension is whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardWindow {
    /// The split dimension.
    pub dim: usize,
    /// The first logical index along `dim` this shard holds.
    pub start: usize,
    /// The logical size of `dim`.
    pub total: usize,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    len: u32,
    inner: u32,
    total: u32,
    start: u32,
    layer: u32,
    step_lo: u32,
    step_hi: u32,
    seed_lo: u32,
    seed_hi: u32,
    threshold: u32,
    scale: f32,
}

/// `⌊p·2³²⌋`, the drop threshold on a 32-bit draw, for `0 ≤ p < 1`.
pub fn drop_threshold(p: f32) -> u32 {
    ((p as f64) * 4_294_967_296.0).floor().min(u32::MAX as f64) as u32
}

/// `x·m/(1 − p)` for the mask of `key` over the logical tensor `x` belongs to
/// (`window`: where `x` sits in it; `None` when `x` is the whole tensor).
/// `p` must lie in `[0, 1)`; the logical tensor must have fewer than 2³²
/// elements.
pub fn dropout(
    x: &LocalTensor,
    p: f32,
    key: PhiloxKey,
    window: Option<ShardWindow>,
) -> Result<LocalTensor> {
    const OP: &str = "dropout";
    x.expect_dtype(OP, DType::F32)?;
    if !(0.0..1.0).contains(&p) {
        return Err(Error::invalid(OP, format!("p = {p} must lie in [0, 1)")));
    }
    let (dim, start, total) = match window {
        Some(w) => (w.dim, w.start, w.total),
        None => (0, 0, x.shape().first().copied().unwrap_or(1)),
    };
    let (len, inner) = if x.shape().is_empty() {
        (1, 1)
    } else {
        if dim >= x.shape().len() {
            return Err(Error::OutOfRange {
                op: OP,
                what: "window dim",
                value: dim as i64,
                bound: x.shape().len(),
            });
        }
        let (_, len, inner) = outer_dim_inner(x.shape(), dim);
        (len, inner)
    };
    if start.checked_add(len).is_none_or(|end| end > total) {
        return Err(Error::invalid(
            OP,
            format!("a window of {len} at {start} does not fit a dimension of {total}"),
        ));
    }
    let logical = (x.len() / len.max(1))
        .checked_mul(total)
        .filter(|&n| n <= u32::MAX as usize);
    if logical.is_none() {
        return Err(Error::invalid(
            OP,
            "the logical tensor has 2^32 elements or more",
        ));
    }
    let out = x.rank().alloc(OP, x.shape(), DType::F32)?;
    let params = Params {
        n: x.len() as u32,
        len: len.max(1) as u32,
        inner: inner.max(1) as u32,
        total: total as u32,
        start: start as u32,
        layer: key.layer,
        step_lo: key.step as u32,
        step_hi: (key.step >> 32) as u32,
        seed_lo: key.seed as u32,
        seed_hi: (key.seed >> 32) as u32,
        threshold: drop_threshold(p),
        scale: 1.0 / (1.0 - p),
    };
    Dispatch {
        spec: &KernelSpec::new("dropout", SOURCE, BINDINGS, "dropout"),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, &out],
        workgroups: grid_groups(x.device(), x.len()),
    }
    .record(x.device())?;
    Ok(out)
}

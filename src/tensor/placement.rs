//! [`Placement`]: how the shards of a [`DTensor`](super::DTensor) make up
//! its logical value, and the shape each rank holds under one.

use crate::element::ReduceOp;
use crate::shard::split_range_in_units;

/// How the shards of a [`DTensor`](super::DTensor) make up its logical value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Every rank holds the whole tensor.
    Replicate,
    /// Rank r holds the r-th slice along this dimension (first ranks take one more).
    Shard(usize),
    /// Every rank holds a full-shape tensor; the element-wise op over ranks is the value.
    Partial(ReduceOp),
}

/// The shape rank `r` of `p` holds for a tensor of `shape` placed `placement`.
pub fn local_shape(shape: &[usize], placement: Placement, p: usize, r: usize) -> Vec<usize> {
    local_shape_in_units(shape, placement, p, r, 1)
}

/// [`local_shape`] when a `Shard(d)` dim is split in whole units of `unit`.
pub fn local_shape_in_units(
    shape: &[usize],
    placement: Placement,
    p: usize,
    r: usize,
    unit: usize,
) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Placement::Shard(d) = placement {
        s[d] = split_range_in_units(shape[d], p, r, unit).len();
    }
    s
}

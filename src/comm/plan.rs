//! Where the pieces of a collective go, computed once and followed by both
//! transports: the gathered shape, the pieces of a split, the all-to-all plan.

use std::ops::Range;

use crate::device::{LocalTensor, Rank};
use crate::shard::{split_range, with_dim};

/// The shape of the shards joined along `dim`.
pub(super) fn gathered_shape(shards: &[LocalTensor], dim: usize) -> Vec<usize> {
    let total = shards.iter().map(|s| s.shape()[dim]).sum();
    with_dim(shards[0].shape(), dim, total)
}

/// A tensor of some shape split along a dimension over `p` participants (the
/// uneven-split rule): piece i's index range and shape.
pub(super) struct Split {
    pub(super) ranges: Vec<Range<usize>>,
    pub(super) shapes: Vec<Vec<usize>>,
}

impl Split {
    pub(super) fn new(shape: &[usize], dim: usize, p: usize) -> Split {
        let ranges: Vec<Range<usize>> = (0..p).map(|i| split_range(shape[dim], p, i)).collect();
        let shapes = ranges
            .iter()
            .map(|r| with_dim(shape, dim, r.len()))
            .collect();
        Split { ranges, shapes }
    }

    /// Piece i goes to `ranks[i]`: (rank, shape) per output.
    pub(super) fn outputs<'a>(&'a self, ranks: &'a [Rank]) -> Vec<(&'a Rank, &'a [usize])> {
        ranks
            .iter()
            .zip(&self.shapes)
            .map(|(r, s)| (r, &s[..]))
            .collect()
    }
}

/// Where each piece of an all-to-all goes: piece (i -> j) is `split` range
/// `pieces[i][j]` of shard i, placed at `offsets[i][j]` along `concat_dim` of
/// output j.
pub(crate) struct AllToAll {
    pub(super) split_dim: usize,
    pub(super) concat_dim: usize,
    pub(super) pieces: Vec<Vec<std::ops::Range<usize>>>,
    pub(super) offsets: Vec<Vec<usize>>,
    pub(super) out_shapes: Vec<Vec<usize>>,
}

impl AllToAll {
    pub(super) fn new(shards: &[LocalTensor], split_dim: usize, concat_dim: usize) -> AllToAll {
        let p = shards.len();
        let pieces: Vec<Vec<_>> = shards
            .iter()
            .map(|s| {
                (0..p)
                    .map(|j| split_range(s.shape()[split_dim], p, j))
                    .collect()
            })
            .collect();
        let mut offsets = vec![vec![0; p]; p];
        let mut out_shapes = Vec::with_capacity(p);
        for j in 0..p {
            let mut at = 0;
            for i in 0..p {
                offsets[i][j] = at;
                let piece = with_dim(shards[i].shape(), split_dim, pieces[i][j].len());
                at += piece[concat_dim];
            }
            let piece0 = with_dim(shards[0].shape(), split_dim, pieces[0][j].len());
            out_shapes.push(with_dim(&piece0, concat_dim, at));
        }
        AllToAll {
            split_dim,
            concat_dim,
            pieces,
            offsets,
            out_shapes,
        }
    }
}

//! Shape bookkeeping shared by both transports: what each rank's piece of a
//! collective looks like, and host-side slicing/concatenation of raw 32-bit
//! words (every dtype is 4 bytes wide, so moving words moves any dtype).

use std::ops::Range;

use crate::shard::outer_dim_inner;

/// `shape` with dimension `dim` replaced by `size`.
pub(crate) fn with_dim(shape: &[usize], dim: usize, size: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = size;
    s
}

/// Elements `range` along `dim` of a row-major tensor of `shape`.
pub(crate) fn slice_words(x: &[u32], shape: &[usize], dim: usize, range: Range<usize>) -> Vec<u32> {
    let (outer, n, inner) = outer_dim_inner(shape, dim);
    let run = range.len() * inner;
    let mut out = Vec::with_capacity(outer * run);
    for o in 0..outer {
        let start = (o * n + range.start) * inner;
        out.extend_from_slice(&x[start..start + run]);
    }
    out
}

/// Concatenate parts along a dimension: each part is `(words, size along
/// the dimension)`, all sharing `outer` and `inner`.
pub(crate) fn concat_words(parts: &[(&[u32], usize)], outer: usize, inner: usize) -> Vec<u32> {
    let total: usize = parts.iter().map(|p| p.1).sum();
    let mut out = Vec::with_capacity(outer * total * inner);
    for o in 0..outer {
        for (words, n) in parts {
            let run = n * inner;
            out.extend_from_slice(&words[o * run..(o + 1) * run]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_then_concat_round_trips() {
        let shape = [2, 5, 3];
        let x: Vec<u32> = (0..30).collect();
        let a = slice_words(&x, &shape, 1, 0..2);
        let b = slice_words(&x, &shape, 1, 2..5);
        assert_eq!(a[..6], [0, 1, 2, 3, 4, 5]);
        assert_eq!(concat_words(&[(&a, 2), (&b, 3)], 2, 3), x);
        assert!(slice_words(&x, &shape, 1, 3..3).is_empty());
    }
}

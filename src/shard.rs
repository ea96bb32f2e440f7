//! Pure index maths for splitting a dimension over ranks, and the host-side
//! slicing and joining of row-major data that follows it (no GPU involved).
//!
//! A dimension of size `n` over `p` ranks: rank `r` gets `n / p + (r < n % p)`
//! elements, starting after the ranks before it ("first ranks take one more").

use std::ops::Range;

/// Sizes of the `p` parts of `n`.
pub fn split_sizes(n: usize, p: usize) -> Vec<usize> {
    (0..p).map(|r| n / p + usize::from(r < n % p)).collect()
}

/// The range of `0..n` that rank `r` of `p` owns.
pub fn split_range(n: usize, p: usize, r: usize) -> Range<usize> {
    let base = n / p;
    let extra = n % p;
    let start = r * base + r.min(extra);
    let len = base + usize::from(r < extra);
    start..start + len
}

/// The range of `0..n` that rank `r` of `p` owns when `n` is split in whole
/// units of `unit` elements (attention heads of `head_dim` columns, say):
/// the first `(n / unit) % p` ranks take one more unit, and a rank may hold
/// none. `unit` 1 is [`split_range`]; `n` must be a multiple of `unit`.
pub fn split_range_in_units(n: usize, p: usize, r: usize, unit: usize) -> Range<usize> {
    let unit = unit.max(1);
    let units = split_range(n / unit, p, r);
    units.start * unit..units.end * unit
}

/// Row-major strides helper: (outer, dim, inner) sizes of `shape` around `dim`,
/// so a tensor is `outer × shape[dim] × inner` as three nested loops.
pub fn outer_dim_inner(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = shape[..dim].iter().product();
    let inner = shape[dim + 1..].iter().product();
    (outer, shape[dim], inner)
}

/// Resolve a possibly negative dimension (`-1` = last) against a rank.
pub fn normalize_dim(dim: isize, ndim: usize) -> Option<usize> {
    let d = if dim < 0 { dim + ndim as isize } else { dim };
    (0..ndim as isize).contains(&d).then_some(d as usize)
}

/// `shape` with dimension `dim` replaced by `size`.
pub fn with_dim(shape: &[usize], dim: usize, size: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = size;
    s
}

/// Entries `range` along `dim` of row-major host data of `shape` (how host
/// master weights are cut into shards, and how the host-staged transport
/// cuts a collective's pieces).
pub fn host_narrow<T: Copy>(
    data: &[T],
    shape: &[usize],
    dim: usize,
    range: Range<usize>,
) -> Vec<T> {
    let (outer, n, inner) = outer_dim_inner(shape, dim);
    let run = range.len() * inner;
    let mut out = Vec::with_capacity(outer * run);
    for o in 0..outer {
        let start = (o * n + range.start) * inner;
        out.extend_from_slice(&data[start..start + run]);
    }
    out
}

/// Join parts along a dimension: each part is `(data, size along the
/// dimension)`, all sharing `outer` and `inner` (the inverse of [`host_narrow`]).
pub fn host_concat<T: Copy>(parts: &[(&[T], usize)], outer: usize, inner: usize) -> Vec<T> {
    let total: usize = parts.iter().map(|p| p.1).sum();
    let mut out = Vec::with_capacity(outer * total * inner);
    for o in 0..outer {
        for (data, n) in parts {
            let run = n * inner;
            out.extend_from_slice(&data[o * run..(o + 1) * run]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_ranks_take_one_more() {
        assert_eq!(split_sizes(7, 3), vec![3, 2, 2]);
        assert_eq!(split_sizes(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(split_range(7, 3, 1), 3..5);
        assert_eq!(split_range(2, 4, 3), 2..2);
        // 3 heads of 4 columns on 4 ranks: whole heads, the last rank none.
        let heads: Vec<_> = (0..4).map(|r| split_range_in_units(12, 4, r, 4)).collect();
        assert_eq!(heads, vec![0..4, 4..8, 8..12, 12..12]);
        assert_eq!(split_range_in_units(7, 3, 1, 1), split_range(7, 3, 1));
        for n in 0..40 {
            for p in 1..9 {
                let total: usize = split_sizes(n, p).iter().sum();
                assert_eq!(total, n);
                assert_eq!(split_range(n, p, p - 1).end, n);
            }
        }
    }

    #[test]
    fn narrow_then_concat_round_trips() {
        let shape = [2, 5, 3];
        let x: Vec<u32> = (0..30).collect();
        let a = host_narrow(&x, &shape, 1, 0..2);
        let b = host_narrow(&x, &shape, 1, 2..5);
        assert_eq!(a[..6], [0, 1, 2, 3, 4, 5]);
        assert_eq!(host_concat(&[(&a, 2), (&b, 3)], 2, 3), x);
        assert!(host_narrow(&x, &shape, 1, 3..3).is_empty());
    }
}

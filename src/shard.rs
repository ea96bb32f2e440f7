//! Pure index maths for splitting a dimension over ranks (no GPU involved).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_ranks_take_one_more() {
        assert_eq!(split_sizes(7, 3), vec![3, 2, 2]);
        assert_eq!(split_sizes(2, 4), vec![1, 1, 0, 0]);
        assert_eq!(split_range(7, 3, 1), 3..5);
        assert_eq!(split_range(2, 4, 3), 2..2);
        for n in 0..40 {
            for p in 1..9 {
                let total: usize = split_sizes(n, p).iter().sum();
                assert_eq!(total, n);
                assert_eq!(split_range(n, p, p - 1).end, n);
            }
        }
    }
}

//! Products with an operand larger than the device's textures, run as parts
//! that fit, on the texture kernel: on CPU adapters the buffer kernel they
//! would otherwise take is an order of magnitude slower, and the tied head of
//! a 50k-token vocabulary (N or K = 50257) is such a product.
//!
//! M and N are split into column or row blocks of C (joined with `concat`),
//! K into partial products summed through `accumulate` in f32. Each part is
//! an ordinary GEMM call (`gemm_part` in `mod.rs`), so it may split again
//! along another dimension; the caller passes that function in, so this
//! file does not import the dispatch that calls it.

use super::options::{GemmOptions, GemmVariant};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::Result;
use crate::kernels::cast::cast;
use crate::kernels::slicing::{concat, narrow};

/// The GEMM on a given variant, which runs each part.
pub(super) type GemmWith =
    fn(&LocalTensor, &LocalTensor, GemmOptions<'_>, GemmVariant) -> Result<LocalTensor>;

/// Part lengths are multiples of this (whole texels, aligned texture rows).
const GRAIN: usize = 256;

/// `(start, len)` of the parts of `len` when it is over `max`: as few as
/// possible, of near-equal lengths in whole grains.
fn parts(len: usize, max: usize) -> Vec<(usize, usize)> {
    let cap = (max / GRAIN * GRAIN).max(GRAIN.min(max));
    let count = len.div_ceil(cap);
    let size = len
        .div_ceil(count)
        .next_multiple_of(GRAIN.min(cap))
        .min(cap);
    (0..len)
        .step_by(size)
        .map(|s| (s, size.min(len - s)))
        .collect()
}

/// `C = op(A)·op(B) …` as parts that fit the device's textures, or `None`
/// when every dimension fits already (the caller then takes the buffer
/// kernel). Each part runs through `gemm_with` (the GEMM on a given
/// variant), on `variant`.
pub(super) fn split_for_textures(
    a: &LocalTensor,
    b: &LocalTensor,
    opts: &GemmOptions<'_>,
    variant: GemmVariant,
    (m, n, k): (usize, usize, usize),
    gemm_with: GemmWith,
) -> Result<Option<LocalTensor>> {
    let max = a.device().limits().max_texture_dimension_2d as usize / 4 * 4;
    if max == 0 {
        return Ok(None);
    }
    let out_dtype = opts.out_dtype.unwrap_or(a.dtype());
    if n > max {
        // Column blocks of C: rows of B stored [N, K], columns of [K, N].
        let mut cols = Vec::new();
        for (s, len) in parts(n, max) {
            let b_part = narrow(b, if opts.trans_b { 0 } else { 1 }, s, len)?;
            let bias = opts.bias.map(|t| narrow(t, 0, s, len)).transpose()?;
            let acc = opts.accumulate.map(|t| narrow(t, 1, s, len)).transpose()?;
            let part = GemmOptions {
                bias: bias.as_ref(),
                accumulate: acc.as_ref(),
                ..*opts
            };
            cols.push(gemm_with(a, &b_part, part, variant)?);
        }
        return concat(&cols.iter().collect::<Vec<_>>(), 1).map(Some);
    }
    if m > max {
        // Row blocks of C: columns of A stored [K, M], rows of [M, K].
        let mut rows = Vec::new();
        for (s, len) in parts(m, max) {
            let a_part = narrow(a, if opts.trans_a { 1 } else { 0 }, s, len)?;
            let acc = opts.accumulate.map(|t| narrow(t, 0, s, len)).transpose()?;
            let part = GemmOptions {
                accumulate: acc.as_ref(),
                ..*opts
            };
            rows.push(gemm_with(&a_part, b, part, variant)?);
        }
        return concat(&rows.iter().collect::<Vec<_>>(), 0).map(Some);
    }
    if k > max {
        // Partial products over slices of K, summed in f32; the bias once.
        let mut sum: Option<LocalTensor> = None;
        for (i, (s, len)) in parts(k, max).into_iter().enumerate() {
            let a_part = narrow(a, if opts.trans_a { 0 } else { 1 }, s, len)?;
            let b_part = narrow(b, if opts.trans_b { 1 } else { 0 }, s, len)?;
            let part = GemmOptions {
                bias: if i == 0 { opts.bias } else { None },
                accumulate: if i == 0 {
                    opts.accumulate
                } else {
                    sum.as_ref()
                },
                out_dtype: Some(DType::F32),
                ..*opts
            };
            sum = Some(gemm_with(&a_part, &b_part, part, variant)?);
        }
        let sum = sum.expect("k > max > 0 gives at least one part");
        return Ok(Some(if out_dtype == DType::F32 {
            sum
        } else {
            cast(&sum, out_dtype)?
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::parts;

    #[test]
    fn parts_cover_the_length_in_whole_grains_within_the_limit() {
        for (len, max) in [
            (50257, 16384),
            (50257, 8192),
            (700, 256),
            (257, 256),
            (300, 100),
        ] {
            let p = parts(len, max);
            assert_eq!(p[0].0, 0);
            assert_eq!(p.iter().map(|x| x.1).sum::<usize>(), len, "{len} {max}");
            assert!(p.iter().all(|&(_, l)| l <= max && l > 0), "{p:?}");
            assert!(p.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0), "{p:?}");
        }
        assert_eq!(parts(50257, 16384).len(), 4);
    }
}

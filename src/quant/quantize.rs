//! f32 weights to ggml blocks on the host, bit for bit as the reference
//! tools make them: gguf-py's `quants.quantize` for Q8_0, Q4_0, Q4_1, Q5_0
//! and Q5_1 (itself a copy of ggml's `quantize_row_*_ref`), and ggml's
//! `quantize_row_q{4,5,6}_K_ref` for the K-quants (see `k_quants`), which
//! llama.cpp uses when no importance matrix is given. Rows are independent
//! and split over the host's cores.
//!
//! The only place the two references disagree is a block whose largest or
//! smallest value is a zero of both signs (+0 and -0): gguf-py's answer
//! then depends on numpy's SIMD reductions, and this follows ggml's
//! in-order scan. Non-finite weights are refused: both references give
//! meaningless blocks for them.

use half::f16;

use super::k_quants;
use super::parallel;
use super::types::QuantType;
use crate::error::{Error, Result};

/// Input weights a thread takes at a time.
const CHUNK_WEIGHTS: usize = 1 << 15;

/// Quantizes `x`, a whole number of `q` blocks (`q.block_len()` weights
/// each), into `x.len() / q.block_len() * q.block_bytes()` bytes.
pub fn quantize(q: QuantType, x: &[f32]) -> Result<Vec<u8>> {
    let bl = q.block_len();
    if !x.len().is_multiple_of(bl) {
        return Err(Error::invalid(
            "quantize",
            format!(
                "{} weights are not whole {q} blocks of {bl}; quantize_rows pads ragged rows",
                x.len()
            ),
        ));
    }
    quantize_rows(q, x, x.len() / bl, bl)
}

/// Quantizes `rows` rows of `k` weights (`x` row-major) into
/// `q.bytes_for(rows, k)` bytes: each row is `q.blocks_per_row(k)` blocks,
/// the last one's ragged tail padded with zeros.
pub fn quantize_rows(q: QuantType, x: &[f32], rows: usize, k: usize) -> Result<Vec<u8>> {
    if rows.checked_mul(k) != Some(x.len()) {
        return Err(Error::invalid(
            "quantize_rows",
            format!("{rows} rows of {k} weights do not fit {} values", x.len()),
        ));
    }
    let row_bytes = q.blocks_per_row(k) * q.block_bytes();
    // Rows far shorter than a block take a whole block each.
    let Some(bytes) = rows.checked_mul(row_bytes) else {
        return Err(Error::invalid(
            "quantize_rows",
            format!("{rows} rows of {row_bytes} bytes overflow usize"),
        ));
    };
    let mut out = vec![0u8; bytes];
    if x.is_empty() {
        return Ok(out);
    }
    parallel::chunks(
        x,
        k,
        &mut out,
        row_bytes,
        CHUNK_WEIGHTS,
        |first_row, x, out| {
            if let Some(i) = x.iter().position(|v| !v.is_finite()) {
                return Err(Error::invalid(
                    "quantize",
                    format!(
                        "{q}: weight {} is {}; ggml's quantizers are undefined for NaN and infinity",
                        first_row * k + i,
                        x[i]
                    ),
                ));
            }
            for (x, out) in x.chunks_exact(k).zip(out.chunks_exact_mut(row_bytes)) {
                row(q, x, out);
            }
            Ok(())
        },
    )?;
    Ok(out)
}

/// One row: its whole blocks, then the tail padded with zeros.
fn row(q: QuantType, x: &[f32], out: &mut [u8]) {
    let (bl, bb) = (q.block_len(), q.block_bytes());
    let full = x.len() / bl;
    let (x_full, x_tail) = x.split_at(full * bl);
    let (out_full, out_tail) = out.split_at_mut(full * bb);
    whole_blocks(q, x_full, out_full);
    if !x_tail.is_empty() {
        let mut tail = [0.0f32; 256];
        tail[..x_tail.len()].copy_from_slice(x_tail);
        whole_blocks(q, &tail[..bl], out_tail);
    }
}

/// Quantizes whole blocks; the caller has matched the lengths.
fn whole_blocks(q: QuantType, x: &[f32], y: &mut [u8]) {
    match q {
        QuantType::Q8_0 => each(x, y, q8_0),
        QuantType::Q4_0 => each::<32, 18>(x, y, |x, y| signed_max(x, y, 8.0, 15)),
        QuantType::Q4_1 => each::<32, 20>(x, y, |x, y| min_max(x, y, 15)),
        QuantType::Q5_0 => each::<32, 22>(x, y, |x, y| signed_max(x, y, 16.0, 31)),
        QuantType::Q5_1 => each::<32, 24>(x, y, |x, y| min_max(x, y, 31)),
        QuantType::Q4K => each(x, y, k_quants::q4_k),
        QuantType::Q5K => each(x, y, k_quants::q5_k),
        QuantType::Q6K => each(x, y, k_quants::q6_k),
    }
}

/// `f` over the blocks as fixed-size arrays (no bounds checks inside).
fn each<const L: usize, const B: usize>(
    x: &[f32],
    y: &mut [u8],
    f: impl Fn(&[f32; L], &mut [u8; B]),
) {
    for (x, y) in x.as_chunks::<L>().0.iter().zip(y.as_chunks_mut::<B>().0) {
        f(x, y);
    }
}

/// C's `(int)f` as x86-64 does it (`cvttss2si`, which numpy's casts use
/// too): truncation, and `i32::MIN` for NaN and out-of-range values. The
/// references reach those only through an infinite `1/d` (a subnormal
/// scale); the byte kept is then 0 in both.
fn trunc_i32(f: f32) -> i32 {
    if (-2147483648.0..2147483648.0).contains(&f) {
        f as i32
    } else {
        i32::MIN
    }
}

/// gguf-py's `trunc(v).astype(uint8).clip(0, max)`.
fn level(v: f32, max: u8) -> u8 {
    (trunc_i32(v) as u8).min(max)
}

fn put_f16(y: &mut [u8], at: usize, v: f32) {
    y[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Q8_0: `d = max|x| / 127`, `q = round(x / d)` half away from zero.
fn q8_0(x: &[f32; 32], y: &mut [u8; 34]) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(y, 0, d);
    for (y, &v) in y[2..].iter_mut().zip(x) {
        *y = trunc_i32((v * id).round()) as u8;
    }
}

/// Q4_0 (`half` = 8, `max` = 15) and Q5_0 (16, 31): `d = m / -half` for
/// the value `m` of largest magnitude (its sign kept, the first one on a
/// tie), levels `trunc(x / d + half + 0.5)`. For a block of zeros `m` is
/// +0, so `d` is -0 (ggml's `max = 0.0f` start, which gguf-py matches).
fn signed_max<const B: usize>(x: &[f32; 32], y: &mut [u8; B], half: f32, max: u8) {
    let (mut amax, mut m) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            m = v;
        }
    }
    let d = m / -half;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(y, 0, d);
    let q: [u8; 32] = std::array::from_fn(|j| level(x[j] * id + (half + 0.5), max));
    pack(y, 2, &q, max);
}

/// Q4_1 (`max` = 15) and Q5_1 (31): `d = (hi - lo) / max` and minimum
/// `lo`, levels `trunc((x - lo) / d + 0.5)`.
fn min_max<const B: usize>(x: &[f32; 32], y: &mut [u8; B], max: u8) {
    let (mut lo, mut hi) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    let d = (hi - lo) / max as f32;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(y, 0, d);
    put_f16(y, 2, lo);
    let q: [u8; 32] = std::array::from_fn(|j| level((x[j] - lo) * id + 0.5, max));
    pack(y, 4, &q, max);
}

/// Levels into a block from byte `at`: for 5-bit levels (`max` = 31) first
/// the u32 of fifth bits (bit j of level j), then nibbles: level j low and
/// level j + 16 high in byte j.
fn pack(y: &mut [u8], mut at: usize, q: &[u8; 32], max: u8) {
    if max == 31 {
        let qh = (0..32).fold(0u32, |h, j| h | (((q[j] >> 4) as u32) << j));
        y[at..at + 4].copy_from_slice(&qh.to_le_bytes());
        at += 4;
    }
    for j in 0..16 {
        y[at + j] = (q[j] & 0xF) | (q[j + 16] << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As x86-64's `cvttss2si`, which the references' casts compile to.
    #[test]
    fn trunc_i32_is_cvttss2si() {
        assert_eq!(trunc_i32(16.99), 16);
        assert_eq!(trunc_i32(-0.99), 0);
        assert_eq!(trunc_i32(-2147483648.0), i32::MIN);
        assert_eq!(trunc_i32(2147483520.0), 2147483520);
        for v in [
            2147483648.0,
            -2147483904.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ] {
            assert_eq!(trunc_i32(v), i32::MIN, "{v}");
        }
        // The byte kept for those is 0, as numpy's and C's casts give.
        assert_eq!(level(f32::NAN, 15), 0);
        assert_eq!(level(f32::INFINITY, 31), 0);
        assert_eq!(level(300.0, 15), 15);
    }
}

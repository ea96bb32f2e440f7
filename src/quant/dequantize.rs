//! Quantized blocks back to f32 on the host, bit for bit as gguf-py's
//! `quants.dequantize` and ggml's `dequantize_row_*` compute them: f32
//! products and sums in their operand order (`d * q - m`, never a fused
//! multiply-add, which Rust does not introduce on its own). Also GGUF's
//! f16 and bf16 tensors to f32.

use half::{bf16, f16};

use super::parallel;
use super::types::QuantType;
use crate::error::{Error, Result};

/// Input bytes a thread takes at a time: dequantizing is cheap, so only
/// tensors of many such chunks are worth splitting.
const CHUNK_BYTES: usize = 1 << 18;

/// Dequantizes whole `q` blocks into `out`, which must hold exactly
/// `blocks.len() / q.block_bytes() * q.block_len()` values.
pub fn dequantize(q: QuantType, blocks: &[u8], out: &mut [f32]) -> Result<()> {
    let (bb, bl) = (q.block_bytes(), q.block_len());
    if !blocks.len().is_multiple_of(bb) {
        return Err(Error::invalid(
            "dequantize",
            format!(
                "{} bytes are not whole {q} blocks of {bb} bytes",
                blocks.len()
            ),
        ));
    }
    let n = blocks.len() / bb;
    if out.len() != n * bl {
        return Err(Error::invalid(
            "dequantize",
            format!(
                "{n} {q} blocks hold {} weights, but out has room for {}",
                n * bl,
                out.len()
            ),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    parallel::chunks(blocks, bb, out, bl, CHUNK_BYTES, |_, b, y| {
        whole_blocks(q, b, y);
        Ok(())
    })
}

/// Dequantizes `rows` rows of `k` weights, each stored as
/// `q.blocks_per_row(k)` blocks (`q.bytes_for(rows, k)` bytes in all); the
/// padding of a row's partly used last block is dropped.
pub fn dequantize_rows(q: QuantType, blocks: &[u8], rows: usize, k: usize) -> Result<Vec<f32>> {
    let row_bytes = q.blocks_per_row(k) * q.block_bytes();
    let n = rows.checked_mul(k);
    if n.is_none() || rows.checked_mul(row_bytes) != Some(blocks.len()) {
        return Err(Error::invalid(
            "dequantize_rows",
            format!(
                "{rows} rows of {k} {q} weights are {rows} x {row_bytes} bytes, not {}",
                blocks.len()
            ),
        ));
    }
    let mut out = vec![0.0; n.unwrap_or(0)];
    if out.is_empty() {
        return Ok(out);
    }
    let bl = q.block_len();
    parallel::chunks(blocks, row_bytes, &mut out, k, CHUNK_BYTES, |_, b, y| {
        let full = k / bl;
        for (b, y) in b.chunks_exact(row_bytes).zip(y.chunks_exact_mut(k)) {
            let (b_full, b_tail) = b.split_at(full * q.block_bytes());
            let (y_full, y_tail) = y.split_at_mut(full * bl);
            whole_blocks(q, b_full, y_full);
            if !y_tail.is_empty() {
                let mut tail = [0.0f32; 256];
                whole_blocks(q, b_tail, &mut tail[..bl]);
                y_tail.copy_from_slice(&tail[..y_tail.len()]);
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// GGUF F16 data (little-endian IEEE half floats) to f32, exactly; `out`
/// holds one value per two bytes.
pub fn f16_to_f32(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    halves("f16_to_f32", bytes, out, |b| f16::from_le_bytes(b).to_f32())
}

/// GGUF BF16 data (the top halves of little-endian f32s) to f32, exactly;
/// `out` holds one value per two bytes.
pub fn bf16_to_f32(bytes: &[u8], out: &mut [f32]) -> Result<()> {
    halves("bf16_to_f32", bytes, out, |b| {
        bf16::from_le_bytes(b).to_f32()
    })
}

fn halves(op: &'static str, bytes: &[u8], out: &mut [f32], f: fn([u8; 2]) -> f32) -> Result<()> {
    let (pairs, rest) = bytes.as_chunks::<2>();
    if !rest.is_empty() || pairs.len() != out.len() {
        return Err(Error::invalid(
            op,
            format!(
                "{} bytes are not the 2 bytes each of {} values",
                bytes.len(),
                out.len()
            ),
        ));
    }
    for (p, y) in pairs.iter().zip(out) {
        *y = f(*p);
    }
    Ok(())
}

/// Dequantizes whole blocks; the caller has matched the lengths.
fn whole_blocks(q: QuantType, b: &[u8], y: &mut [f32]) {
    match q {
        QuantType::Q8_0 => each(b, y, q8_0),
        QuantType::Q4_0 => each(b, y, q4_0),
        QuantType::Q4_1 => each(b, y, q4_1),
        QuantType::Q5_0 => each(b, y, q5_0),
        QuantType::Q5_1 => each(b, y, q5_1),
        QuantType::Q4K => each(b, y, q4_k),
        QuantType::Q5K => each(b, y, q5_k),
        QuantType::Q6K => each(b, y, q6_k),
    }
}

/// `f` over the blocks as fixed-size arrays (no bounds checks inside).
fn each<const B: usize, const L: usize>(b: &[u8], y: &mut [f32], f: fn(&[u8; B], &mut [f32; L])) {
    for (b, y) in b.as_chunks::<B>().0.iter().zip(y.as_chunks_mut::<L>().0) {
        f(b, y);
    }
}

/// The f16 at byte `at`.
fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = half_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[2..]) {
        *y = q as i8 as f32 * d;
    }
}

fn q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = half_at(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        y[j] = ((q & 0xF) as i32 - 8) as f32 * d;
        y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

fn q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    for j in 0..16 {
        let q = b[4 + j];
        y[j] = (q & 0xF) as f32 * d + m;
        y[j + 16] = (q >> 4) as f32 * d + m;
    }
}

/// Q5_0 and Q5_1's five-bit values: nibbles at `qs`, fifth bits in the u32
/// at `qh`.
fn five_bits(b: &[u8], qh: usize, qs: usize) -> [u8; 32] {
    let h = u32::from_le_bytes([b[qh], b[qh + 1], b[qh + 2], b[qh + 3]]);
    std::array::from_fn(|j| {
        let nibble = if j < 16 {
            b[qs + j] & 0xF
        } else {
            b[qs + j - 16] >> 4
        };
        nibble | (((h >> j) & 1) << 4) as u8
    })
}

fn q5_0(b: &[u8; 22], y: &mut [f32; 32]) {
    let d = half_at(b, 0);
    for (y, q) in y.iter_mut().zip(five_bits(b, 2, 6)) {
        *y = (q as i32 - 16) as f32 * d;
    }
}

fn q5_1(b: &[u8; 24], y: &mut [f32; 32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    for (y, q) in y.iter_mut().zip(five_bits(b, 4, 8)) {
        *y = q as f32 * d + m;
    }
}

/// Sub-block `j`'s 6-bit scale and minimum in the 12 packed scale bytes of
/// Q4_K and Q5_K (`get_scale_min_k4`).
pub(super) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Q4_K and Q5_K: 64 outputs at a time from 32 bytes of nibbles (low for
/// the first 32, high for the next) plus `high(l, shift)`'s fifth bit.
fn k_quant_4_5(b: &[u8], qs: usize, y: &mut [f32; 256], high: impl Fn(usize, usize) -> u8) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let scales = &b[4..16];
    for c in 0..4 {
        let (sa, ma) = scale_min_k4(2 * c, scales);
        let (sb, mb) = scale_min_k4(2 * c + 1, scales);
        let (d1, m1) = (d * sa as f32, dmin * ma as f32);
        let (d2, m2) = (d * sb as f32, dmin * mb as f32);
        for l in 0..32 {
            let q = b[qs + 32 * c + l];
            y[64 * c + l] = d1 * ((q & 0xF) + high(l, 2 * c)) as f32 - m1;
            y[64 * c + 32 + l] = d2 * ((q >> 4) + high(l, 2 * c + 1)) as f32 - m2;
        }
    }
}

fn q4_k(b: &[u8; 144], y: &mut [f32; 256]) {
    k_quant_4_5(b, 16, y, |_, _| 0);
}

fn q5_k(b: &[u8; 176], y: &mut [f32; 256]) {
    k_quant_4_5(b, 48, y, |l, shift| ((b[16 + l] >> shift) & 1) << 4);
}

fn q6_k(b: &[u8; 210], y: &mut [f32; 256]) {
    let d = half_at(b, 208);
    for h in 0..2 {
        let (ql, qh) = (&b[64 * h..64 * h + 64], &b[128 + 32 * h..160 + 32 * h]);
        let sc = |i: usize| d * (b[192 + 8 * h + i] as i8) as f32;
        for l in 0..32 {
            let q = [
                (ql[l] & 0xF) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (g, q) in q.into_iter().enumerate() {
                y[128 * h + 32 * g + l] = sc(l / 16 + 2 * g) * (q as i32 - 32) as f32;
            }
        }
    }
}

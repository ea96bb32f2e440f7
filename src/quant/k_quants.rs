//! The K-quant quantizers, ported from ggml's `quantize_row_q4_K_ref`,
//! `_q5_K_ref` and `_q6_K_ref` (`ggml-quants.c`) with the same f32
//! operations in the same order: every sum accumulates in index order and
//! no multiply-add is fused, or the searches pick other scales. (C
//! compilers fuse them by default where the target has FMA: ggml-quants.c
//! built with gcc 12 `-march=native` on x86-64 gives other bytes in 5% of
//! Q4_K, 29% of Q5_K and 0.5% of Q6_K blocks of N(0, 0.02²) weights, and
//! an ARM64 build of llama.cpp may likewise differ from its x86 one.)
//!
//! The searches run on a block's sub-blocks side by side: `t[i][s]` is
//! weight `i` of sub-block `s`, and each step does one sub-block's
//! operations for all of them, as vector lanes, with the reference's
//! branches as per-lane choices. The sums of one sub-block keep their
//! order, so the bytes are the reference's, several times faster than one
//! sub-block after another (whose sums wait on each addition).

use half::f16;

use super::dequantize::scale_min_k4;

/// ggml's `nearest_int`: rounds half to even through the f32 adder for
/// |f| < 2^22 (the callers' range); wraps harmlessly outside it.
#[inline(always)]
fn nearest_int(f: f32) -> i32 {
    let v = f + 12582912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// ggml's `GROUP_MAX_EPS`: a Q6_K group below it is all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// `S` sub-blocks of `N` weights side by side: `t[i][s] = x[N * s + i]`.
fn lanes<const N: usize, const S: usize, T: Copy + Default>(x: &[T]) -> [[T; S]; N] {
    let mut t = [[T::default(); S]; N];
    for (i, row) in t.iter_mut().enumerate() {
        for (s, v) in row.iter_mut().enumerate() {
            *v = x[N * s + i];
        }
    }
    t
}

/// Back from side by side: `x[N * s + i] = t[i][s]`.
fn unlanes<const N: usize, const S: usize, T: Copy>(t: &[[T; S]; N], x: &mut [T]) {
    for (i, row) in t.iter().enumerate() {
        for (s, &v) in row.iter().enumerate() {
            x[N * s + i] = v;
        }
    }
}

/// `make_qkx2_quants` (with `use_mad = false`, `rdelta = 0.1`) for the 8
/// sub-blocks of 32 of a block: each one's weighted least-squares scale and
/// minimum for levels `0..=nmax`, searched over `nstep + 1` trial scales
/// from `nmax + rmin`. Leaves the levels in `l`; returns each sub-block's
/// `(scale, -min)`.
fn make_qkx2_quants(
    nmax: i32,
    x: &[[f32; 8]; 32],
    w: &[[f32; 8]; 32],
    l: &mut [[u8; 8]; 32],
    rmin: f32,
    nstep: i32,
) -> ([f32; 8], [f32; 8]) {
    let (mut min, mut max, mut sum_w) = (x[0], x[0], w[0]);
    let mut sum_x: [f32; 8] = std::array::from_fn(|s| w[0][s] * x[0][s]);
    for i in 1..32 {
        for s in 0..8 {
            if x[i][s] < min[s] {
                min[s] = x[i][s];
            }
            if x[i][s] > max[s] {
                max[s] = x[i][s];
            }
            sum_w[s] += w[i][s];
            sum_x[s] += w[i][s] * x[i][s];
        }
    }
    for m in &mut min {
        if *m > 0.0 {
            *m = 0.0;
        }
    }
    // Where max == min the reference stops here; such lanes run on with
    // infinities (harmless) and get the early answer at the end.
    let (min0, flat): ([f32; 8], [bool; 8]) = (min, std::array::from_fn(|s| max[s] == min[s]));
    let iscale: [f32; 8] = std::array::from_fn(|s| nmax as f32 / (max[s] - min[s]));
    let mut scale: [f32; 8] = std::array::from_fn(|s| 1.0 / iscale[s]);
    let mut best_error = [0.0f32; 8];
    for i in 0..32 {
        for s in 0..8 {
            let li = nearest_int(iscale[s] * (x[i][s] - min[s])).clamp(0, nmax);
            l[i][s] = li as u8;
            let diff = scale[s] * li as f32 + min[s] - x[i][s];
            best_error[s] += w[i][s] * (diff * diff);
        }
    }
    let mut aux = [[0u8; 8]; 32];
    for is in 0..=nstep {
        // `min` is the best fit's so far, as in the reference.
        let iscale: [f32; 8] =
            std::array::from_fn(|s| (rmin + 0.1 * is as f32 + nmax as f32) / (max[s] - min[s]));
        let (mut sum_l, mut sum_l2, mut sum_xl) = ([0.0f32; 8], [0.0f32; 8], [0.0f32; 8]);
        for i in 0..32 {
            for s in 0..8 {
                let li = nearest_int(iscale[s] * (x[i][s] - min[s])).clamp(0, nmax);
                aux[i][s] = li as u8;
                let lf = li as f32;
                sum_l[s] += w[i][s] * lf;
                sum_l2[s] += w[i][s] * lf * lf;
                sum_xl[s] += w[i][s] * lf * x[i][s];
            }
        }
        let d: [f32; 8] = std::array::from_fn(|s| sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s]);
        let mut this_scale: [f32; 8] =
            std::array::from_fn(|s| (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / d[s]);
        let mut this_min: [f32; 8] =
            std::array::from_fn(|s| (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / d[s]);
        for s in 0..8 {
            if this_min[s] > 0.0 {
                this_min[s] = 0.0;
                this_scale[s] = sum_xl[s] / sum_l2[s];
            }
        }
        // The reference computes the error only where d > 0; elsewhere it
        // is computed and not used.
        let mut cur_error = [0.0f32; 8];
        for i in 0..32 {
            for s in 0..8 {
                let diff = this_scale[s] * aux[i][s] as f32 + this_min[s] - x[i][s];
                cur_error[s] += w[i][s] * (diff * diff);
            }
        }
        let take: [bool; 8] = std::array::from_fn(|s| d[s] > 0.0 && cur_error[s] < best_error[s]);
        for s in 0..8 {
            if take[s] {
                best_error[s] = cur_error[s];
                scale[s] = this_scale[s];
                min[s] = this_min[s];
            }
        }
        for (l, aux) in l.iter_mut().zip(&aux) {
            for s in 0..8 {
                if take[s] {
                    l[s] = aux[s];
                }
            }
        }
    }
    for s in 0..8 {
        if flat[s] {
            (scale[s], min[s]) = (0.0, min0[s]);
            l.iter_mut().for_each(|l| l[s] = 0);
        }
    }
    (scale, min.map(|m| -m))
}

/// Q4_K and Q5_K's common part for levels `0..=nmax`: each sub-block's
/// scale and minimum fitted, quantized to 6 bits against the super-block's
/// f16 scale `d` and minimum `dmin`, and every weight's level recomputed
/// from those (kept from the fit where a sub-block's scale is 0). Returns
/// the 16-byte head `d | dmin | scales` and the levels.
fn scale_min_fit(x: &[f32; 256], nmax: i32, rmin: f32, nstep: i32) -> ([u8; 16], [u8; 256]) {
    let xt: [[f32; 8]; 32] = lanes(x);
    let mut sum_x2 = [0.0f32; 8];
    for row in &xt {
        for s in 0..8 {
            sum_x2[s] += row[s] * row[s];
        }
    }
    let av_x = sum_x2.map(|v| (v / 32.0).sqrt());
    let w = xt.map(|row| std::array::from_fn(|s| av_x[s] + row[s].abs()));
    let mut lt = [[0u8; 8]; 32];
    let (scales, mins) = make_qkx2_quants(nmax, &xt, &w, &mut lt, rmin, nstep);
    let mut levels = [0u8; 256];
    unlanes(&lt, &mut levels);

    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut head = [0u8; 16];
    let sc = &mut head[4..16];
    for j in 0..8 {
        // `as u8` is C's conversion to uint8_t (modulo 256), then capped.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    head[0..2].copy_from_slice(&d.to_le_bytes());
    head[2..4].copy_from_slice(&dmin.to_le_bytes());
    let subs = x.as_chunks::<32>().0;
    for (j, l) in levels.as_chunks_mut::<32>().0.iter_mut().enumerate() {
        let (s, m) = scale_min_k4(j, &head[4..16]);
        let dj = d.to_f32() * s as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for (l, &v) in l.iter_mut().zip(&subs[j]) {
            *l = nearest_int((v + dm) / dj).clamp(0, nmax) as u8;
        }
    }
    (head, levels)
}

/// `quantize_row_q4_K_ref` for one block of 256.
pub(super) fn q4_k(x: &[f32; 256], y: &mut [u8; 144]) {
    let (head, l) = scale_min_fit(x, 15, -1.0, 20);
    y[..16].copy_from_slice(&head);
    for c in 0..4 {
        for i in 0..32 {
            y[16 + 32 * c + i] = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
        }
    }
}

/// `quantize_row_q5_K_ref` for one block of 256.
pub(super) fn q5_k(x: &[f32; 256], y: &mut [u8; 176]) {
    let (head, l) = scale_min_fit(x, 31, -0.5, 15);
    y[..16].copy_from_slice(&head);
    y[16..48].fill(0);
    for c in 0..4 {
        for i in 0..32 {
            let (l1, l2) = (l[64 * c + i], l[64 * c + 32 + i]);
            y[16 + i] |= ((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1));
            y[48 + 32 * c + i] = (l1 & 0xF) | ((l2 & 0xF) << 4);
        }
    }
}

/// `make_qx_quants(16, 32, x, L, rmse_type = 1, NULL)` for the 16 groups
/// of 16 of a block: each one's symmetric scale for levels -32..=31
/// weighted by x², searched over 18 trial scales around `-32 / max`.
/// Leaves `level + 32` in `l`; returns the scales.
fn make_qx_quants(x: &[[f32; 16]; 16], l: &mut [[u8; 16]; 16]) -> [f32; 16] {
    let (mut amax, mut max) = ([0.0f32; 16], [0.0f32; 16]);
    for row in x {
        for g in 0..16 {
            if row[g].abs() > amax[g] {
                amax[g] = row[g].abs();
                max[g] = row[g];
            }
        }
    }
    // Sums of w·x·l and w·l·l for w = x², writing `level + 32` to `l`.
    let fit = |iscale: [f32; 16], l: &mut [[u8; 16]; 16]| {
        let (mut sumlx, mut suml2) = ([0.0f32; 16], [0.0f32; 16]);
        for (row, l) in x.iter().zip(l) {
            for g in 0..16 {
                let li = nearest_int(iscale[g] * row[g]).clamp(-32, 31);
                l[g] = (li + 32) as u8;
                let (w, lf) = (row[g] * row[g], li as f32);
                sumlx[g] += w * row[g] * lf;
                suml2[g] += w * lf * lf;
            }
        }
        (sumlx, suml2)
    };
    let (sumlx, suml2) = fit(max.map(|m| -32.0 / m), l);
    let mut scale: [f32; 16] = std::array::from_fn(|g| {
        if suml2[g] != 0.0 {
            sumlx[g] / suml2[g]
        } else {
            0.0
        }
    });
    let mut best: [f32; 16] = std::array::from_fn(|g| scale[g] * sumlx[g]);
    let mut aux = [[0u8; 16]; 16];
    for is in (-9..=9).filter(|&is| is != 0) {
        let (sumlx, suml2) = fit(max.map(|m| -(32.0 + 0.1 * is as f32) / m), &mut aux);
        let take: [bool; 16] =
            std::array::from_fn(|g| suml2[g] > 0.0 && sumlx[g] * sumlx[g] > best[g] * suml2[g]);
        for g in 0..16 {
            if take[g] {
                scale[g] = sumlx[g] / suml2[g];
                best[g] = scale[g] * sumlx[g];
            }
        }
        for (l, aux) in l.iter_mut().zip(&aux) {
            for g in 0..16 {
                if take[g] {
                    l[g] = aux[g];
                }
            }
        }
    }
    // Groups below GROUP_MAX_EPS stop at once in the reference: all zero.
    for g in 0..16 {
        if amax[g] < GROUP_MAX_EPS {
            scale[g] = 0.0;
            l.iter_mut().for_each(|l| l[g] = 0);
        }
    }
    scale
}

/// `quantize_row_q6_K_ref` for one block of 256.
pub(super) fn q6_k(x: &[f32; 256], y: &mut [u8; 210]) {
    let mut lt = [[0u8; 16]; 16];
    let scales = make_qx_quants(&lanes(x), &mut lt);
    let mut l = [0u8; 256];
    unlanes(&lt, &mut l);
    let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
    for &s in &scales {
        if s.abs() > max_abs_scale {
            max_abs_scale = s.abs();
            max_scale = s;
        }
    }
    if max_abs_scale < GROUP_MAX_EPS {
        *y = [0; 210];
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = f16::from_f32(1.0 / iscale);
    for ib in 0..16 {
        // `as i8` is C's conversion to int8_t (modulo 256).
        y[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
    }
    y[208..210].copy_from_slice(&d.to_le_bytes());
    let subs = x.as_chunks::<16>().0;
    for (j, l) in l.as_chunks_mut::<16>().0.iter_mut().enumerate() {
        let dj = d.to_f32() * (y[192 + j] as i8) as f32;
        if dj == 0.0 {
            continue;
        }
        for (l, &v) in l.iter_mut().zip(&subs[j]) {
            *l = (nearest_int(v / dj).clamp(-32, 31) + 32) as u8;
        }
    }
    for h in 0..2 {
        let (j, ql, qh) = (128 * h, 64 * h, 128 + 32 * h);
        for i in 0..32 {
            let q = [l[j + i], l[j + i + 32], l[j + i + 64], l[j + i + 96]];
            y[ql + i] = (q[0] & 0xF) | ((q[2] & 0xF) << 4);
            y[ql + i + 32] = (q[1] & 0xF) | ((q[3] & 0xF) << 4);
            y[qh + i] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        for f in [
            0.0f32, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, 2.4999998, 31.5, -32.5, 4194303.0,
        ] {
            assert_eq!(nearest_int(f), f.round_ties_even() as i32, "{f}");
        }
        for i in -70_000..70_000 {
            let f = i as f32 * 0.37;
            assert_eq!(nearest_int(f), f.round_ties_even() as i32, "{f}");
        }
        // Outside its range (inf, NaN) it returns something, not a panic.
        let _ = (
            nearest_int(f32::INFINITY),
            nearest_int(f32::NAN),
            nearest_int(-1e30),
        );
    }

    #[test]
    fn lanes_round_trip() {
        let x: [f32; 256] = std::array::from_fn(|i| i as f32);
        let t: [[f32; 8]; 32] = lanes(&x);
        assert_eq!((t[3][2], t[31][7]), (67.0, 255.0));
        let mut back = [0.0; 256];
        unlanes(&t, &mut back);
        assert_eq!(back, x);
    }
}

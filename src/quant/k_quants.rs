//! The K-quant quantizers, ported from ggml's `quantize_row_q4_K_ref`,
//! `_q5_K_ref` and `_q6_K_ref` (`ggml-quants.c`) with the same f32
//! operations in the same order: every sum accumulates in index order and
//! no multiply-add is fused, or the searches pick other scales. (A
//! llama.cpp built with `-march=native` lets the C compiler fuse them, so
//! its bytes can differ from these and from its own reference in a few
//! blocks.)

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

/// `make_qkx2_quants` (with `use_mad = false`, `rdelta = 0.1`): the
/// weighted least-squares scale and minimum of one sub-block of 32 for
/// levels `0..=nmax`, searched over `nstep + 1` trial scales from
/// `nmax + rmin`. Leaves the levels in `l`; returns `(scale, -min)`.
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32; 32],
    w: &[f32; 32],
    l: &mut [u8; 32],
    rmin: f32,
    nstep: i32,
) -> (f32, f32) {
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..32 {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        *l = [0; 32];
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..32 {
        let li = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = li as u8;
        let diff = scale * li as f32 + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    let mut aux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + 0.1 * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..32 {
            let li = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = li as u8;
            let lf = li as f32;
            sum_l += w[i] * lf;
            sum_l2 += w[i] * lf * lf;
            sum_xl += w[i] * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..32 {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if cur_error < best_error {
                *l = aux;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Q4_K and Q5_K's common part for levels `0..=nmax`: each sub-block's
/// scale and minimum fitted, quantized to 6 bits against the super-block's
/// f16 scale `d` and minimum `dmin`, and every weight's level recomputed
/// from those (kept from the fit where a sub-block's scale is 0). Returns
/// the 16-byte head `d | dmin | scales` and the levels.
fn scale_min_fit(x: &[f32; 256], nmax: i32, rmin: f32, nstep: i32) -> ([u8; 16], [u8; 256]) {
    let mut levels = [0u8; 256];
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    let subs = x.as_chunks::<32>().0;
    let l_subs = levels.as_chunks_mut::<32>().0;
    for j in 0..8 {
        let xs = &subs[j];
        let sum_x2 = xs.iter().fold(0.0f32, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let w: [f32; 32] = std::array::from_fn(|l| av_x + xs[l].abs());
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xs, &w, &mut l_subs[j], rmin, nstep);
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
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &head[4..16]);
        let dj = d.to_f32() * s as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for (l, &v) in l_subs[j].iter_mut().zip(&subs[j]) {
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

/// `make_qx_quants(16, 32, x, L, rmse_type = 1, NULL)`: the symmetric
/// scale of a group of 16 for levels -32..=31 weighted by x², searched
/// over 18 trial scales around `-32 / max`. Leaves `level + 32` in `l`.
fn make_qx_quants(x: &[f32; 16], l: &mut [u8; 16]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        *l = [0; 16];
        return 0.0;
    }
    // Returns sum(w x l), sum(w l l) for w = x², writing `level + 32`.
    let fit = |iscale: f32, l: &mut [u8; 16]| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for i in 0..16 {
            let li = nearest_int(iscale * x[i]).clamp(-32, 31);
            l[i] = (li + 32) as u8;
            let (w, lf) = (x[i] * x[i], li as f32);
            sumlx += w * x[i] * lf;
            suml2 += w * lf * lf;
        }
        (sumlx, suml2)
    };
    let (sumlx, suml2) = fit(-32.0 / max, l);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    let mut aux = [0u8; 16];
    for is in (-9..=9).filter(|&is| is != 0) {
        let (sumlx, suml2) = fit(-(32.0 + 0.1 * is as f32) / max, &mut aux);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            *l = aux;
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `quantize_row_q6_K_ref` for one block of 256.
pub(super) fn q6_k(x: &[f32; 256], y: &mut [u8; 210]) {
    let mut l = [0u8; 256];
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
    let subs = x.as_chunks::<16>().0;
    for (ib, l) in l.as_chunks_mut::<16>().0.iter_mut().enumerate() {
        let s = make_qx_quants(&subs[ib], l);
        scales[ib] = s;
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

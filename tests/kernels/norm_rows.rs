//! The few-row norm forward (`shaders/norm_rows.wgsl`, one dispatch for up
//! to `FUSED_ROWS_MAX` rows): the serial reduction (CPU adapters') gives
//! the same bits as the two-kernel path on the same rows (LayerNorm with
//! and without β, RMSNorm; ragged widths), and both it and the tree
//! reduction (hardware GPUs', forced here) match f64.

use crate::util::transformer::layer_norm;
use crate::util::{Rng, assert_close, mesh};
use wgpu_tp::kernels::{self, NormKind, RowsReduce, norm::FUSED_ROWS_MAX};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn few_row_norm_equals_the_two_kernel_path_bit_for_bit() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("norm_rows");
    let many = FUSED_ROWS_MAX + 1;
    for h in [1, 7, 13, 64, 65, 768] {
        let x: Vec<f32> = rng.vec(many * h).iter().map(|v| v * 3.0 + 0.5).collect();
        let (g, b) = (rng.vec(h), rng.vec(h));
        let (gt, bt) = (r.upload(&[h], &g).unwrap(), r.upload(&[h], &b).unwrap());
        for (kind, beta) in [
            (NormKind::LayerNorm, Some(&bt)),
            (NormKind::LayerNorm, None),
            (NormKind::RmsNorm, None),
        ] {
            // More rows than the fused kernel takes: the two-kernel path.
            let xt = r.upload(&[many, h], &x).unwrap();
            let (y, s) = kernels::norm_forward(&xt, &gt, beta, kind, 1e-5).unwrap();
            let (y, s) = (y.to_vec().unwrap(), s.to_vec().unwrap());
            for rows in 1..=FUSED_ROWS_MAX {
                let what = format!("{kind:?} beta {} H {h} rows {rows}", beta.is_some());
                let xt = r.upload(&[rows, h], &x[..rows * h]).unwrap();
                let (yf, sf) =
                    kernels::norm_forward_with(&xt, &gt, beta, kind, 1e-5, RowsReduce::Serial)
                        .unwrap();
                assert_eq!(
                    bits(&yf.to_vec().unwrap()),
                    bits(&y[..rows * h]),
                    "{what}: y"
                );
                assert_eq!(
                    bits(&sf.to_vec().unwrap()),
                    bits(&s[..rows * 2]),
                    "{what}: stats"
                );
            }
            if kind == NormKind::LayerNorm && h > 1 {
                let f = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<_>>();
                let zeros = vec![0.0; h];
                let bb = if beta.is_some() { f(&b) } else { zeros };
                let (want, _, _) = layer_norm(&f(&x), &f(&g), &bb, h, 1e-5);
                assert_close(&format!("LayerNorm H {h} vs f64"), &y, &want, 1e-5);
            }
        }
    }
}

/// `(y, stats)` of LayerNorm (with `b`, else no β) or RMSNorm in f64.
fn norm_f64(
    x: &[f32],
    g: &[f32],
    b: Option<&[f32]>,
    h: usize,
    layer: bool,
) -> (Vec<f64>, Vec<f64>) {
    let (mut y, mut stats) = (vec![0.0; x.len()], vec![]);
    for (r, row) in x.chunks(h).enumerate() {
        let row: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let mean = if layer {
            row.iter().sum::<f64>() / h as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / h as f64;
        let rstd = 1.0 / (var + 1e-5).sqrt();
        for j in 0..h {
            let beta = b.map_or(0.0, |b| b[j] as f64);
            y[r * h + j] = (row[j] - mean) * rstd * g[j] as f64 + beta;
        }
        stats.extend([mean, rstd]);
    }
    (y, stats)
}

/// The tree reduction (forced; the GPUs' choice) against f64: every row
/// count, widths under, at and past its 256 invocations, ragged; LayerNorm
/// with and without β, RMSNorm; y and the (mean, rstd) backward reuses,
/// into poisoned outputs. Not the serial bits, so no bit comparison.
#[test]
fn few_row_tree_norm_matches_f64() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("norm_rows_tree");
    for h in [1, 7, 13, 17, 255, 256, 257, 769, 1031, 3000] {
        for rows in 1..=FUSED_ROWS_MAX {
            let x: Vec<f32> = rng.vec(rows * h).iter().map(|v| v * 3.0 + 0.5).collect();
            let (g, b) = (rng.vec(h), rng.vec(h));
            let (gt, bt) = (r.upload(&[h], &g).unwrap(), r.upload(&[h], &b).unwrap());
            let xt = r.upload(&[rows, h], &x).unwrap();
            for (kind, beta) in [
                (NormKind::LayerNorm, Some(&bt)),
                (NormKind::LayerNorm, None),
                (NormKind::RmsNorm, None),
            ] {
                let what = format!("tree {kind:?} beta {} H {h} rows {rows}", beta.is_some());
                let (y, s) =
                    kernels::norm_forward_with(&xt, &gt, beta, kind, 1e-5, RowsReduce::Tree)
                        .unwrap();
                let layer = kind == NormKind::LayerNorm;
                let (want_y, want_s) = norm_f64(&x, &g, beta.map(|_| &b[..]), h, layer);
                assert_close(&format!("{what}: y"), &y.to_vec().unwrap(), &want_y, 1e-5);
                assert_close(
                    &format!("{what}: stats"),
                    &s.to_vec().unwrap(),
                    &want_s,
                    1e-5,
                );
            }
        }
    }
}

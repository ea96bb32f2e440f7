//! The few-row norm forward (`shaders/norm_rows.wgsl`, one dispatch for up
//! to `FUSED_ROWS_MAX` rows): the same bits as the two-kernel path on the
//! same rows (LayerNorm with and without β, RMSNorm; ragged widths), and
//! against f64.

use crate::util::transformer::layer_norm;
use crate::util::{Rng, assert_close, mesh};
use wgpu_tp::kernels::{self, NormKind, norm::FUSED_ROWS_MAX};

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
                let (yf, sf) = kernels::norm_forward(&xt, &gt, beta, kind, 1e-5).unwrap();
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

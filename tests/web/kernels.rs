//! Kernels in the browser against f64 references, ragged sizes, outputs
//! poisoned first, under both limit sets: GEMM (every transpose, bias,
//! accumulate; bf16 weights), GELU, LayerNorm, causal attention,
//! cross-entropy, the vocab top-k and the AdamW step.

use wasm_bindgen_test::wasm_bindgen_test;
use wgpu_tp::kernels::{
    self, Activation, AttentionShape, CrossEntropyOptions, GemmOptions, NormKind,
};

use crate::{Rng, TOL, limit_sets, log, mesh, rel_err};

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[wasm_bindgen_test]
async fn gemm_every_layout_matches_f64() {
    let mut rng = Rng::fresh("gemm");
    for (label, limits) in limit_sets() {
        let m = mesh(1, limits).await;
        let r = &m.ranks()[0];
        for &(mm, k, n) in &[(7, 13, 17), (1, 64, 65), (33, 5, 3), (64, 48, 40)] {
            for (ta, tb) in [(false, false), (true, false), (false, true)] {
                let (a, b, bias, acc) =
                    (rng.vec(mm * k), rng.vec(k * n), rng.vec(n), rng.vec(mm * n));
                let a_shape = if ta { [k, mm] } else { [mm, k] };
                let b_shape = if tb { [n, k] } else { [k, n] };
                let ga = r.upload(&a_shape, &a).unwrap();
                let gb = r.upload(&b_shape, &b).unwrap();
                let (gbias, gacc) = (
                    r.upload(&[n], &bias).unwrap(),
                    r.upload(&[mm, n], &acc).unwrap(),
                );
                let opts = GemmOptions::new()
                    .trans_a(ta)
                    .trans_b(tb)
                    .bias(&gbias)
                    .accumulate(&gacc);
                let c = kernels::gemm(&ga, &gb, opts).unwrap();
                let got = c.to_vec_async().await.unwrap();
                let want: Vec<f64> = (0..mm * n)
                    .map(|idx| {
                        let (i, j) = (idx / n, idx % n);
                        let dot: f64 = (0..k)
                            .map(|p| {
                                let av = if ta { a[p * mm + i] } else { a[i * k + p] };
                                let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                                av as f64 * bv as f64
                            })
                            .sum();
                        dot + bias[j] as f64 + acc[idx] as f64
                    })
                    .collect();
                let e = rel_err(&got, &want);
                assert!(
                    e <= TOL,
                    "{label}: gemm {mm}x{k}x{n} ta {ta} tb {tb}: rel {e:.2e}"
                );
            }
        }
    }
}

/// Weights kept in bf16 (no `shader-f16` needed): the small-M kernel reads
/// them as stored, larger products widen them, both against f64 on the
/// widened weights; the embedding lookup returns the widened rows.
#[wasm_bindgen_test]
async fn gemm_and_lookup_read_bf16_weights() {
    use wgpu_tp::half::bf16;
    let mut rng = Rng::fresh("bf16");
    for (label, limits) in limit_sets() {
        let m = mesh(1, limits).await;
        let r = &m.ranks()[0];
        for &(mm, k, n) in &[(1, 24, 17), (3, 13, 7), (9, 16, 5)] {
            for tb in [false, true] {
                let a = rng.vec(mm * k);
                let b: Vec<bf16> = rng.vec(k * n).iter().map(|&v| bf16::from_f32(v)).collect();
                let wide: Vec<f32> = b.iter().map(|v| v.to_f32()).collect();
                let ga = r.upload(&[mm, k], &a).unwrap();
                let gb = r
                    .upload_bf16(&if tb { [n, k] } else { [k, n] }, &b)
                    .unwrap();
                let opts = GemmOptions::new().trans_b(tb);
                let got = kernels::gemm(&ga, &gb, opts)
                    .unwrap()
                    .to_vec_async()
                    .await
                    .unwrap();
                let want: Vec<f64> = (0..mm * n)
                    .map(|idx| {
                        let (i, j) = (idx / n, idx % n);
                        (0..k)
                            .map(|p| {
                                let bv = if tb { wide[j * k + p] } else { wide[p * n + j] };
                                a[i * k + p] as f64 * bv as f64
                            })
                            .sum()
                    })
                    .collect();
                let e = rel_err(&got, &want);
                assert!(
                    e <= TOL,
                    "{label}: bf16 gemm {mm}x{k}x{n} tb {tb}: rel {e:.2e}"
                );
            }
        }
        let (rows, dim) = (13, 7);
        let table: Vec<bf16> = rng
            .vec(rows * dim)
            .iter()
            .map(|&v| bf16::from_f32(v))
            .collect();
        let gt = r.upload_bf16(&[rows, dim], &table).unwrap();
        let ids = r.upload_i32(&[3], &[12, 0, 5]).unwrap();
        let got = kernels::embedding_lookup(&gt, &ids, 0)
            .unwrap()
            .to_vec_async()
            .await
            .unwrap();
        let want: Vec<f32> = [12, 0, 5]
            .iter()
            .flat_map(|&i| table[i * dim..(i + 1) * dim].iter().map(|v| v.to_f32()))
            .collect();
        assert_eq!(got, want, "{label}: bf16 lookup");
    }
}

#[wasm_bindgen_test]
async fn gelu_layer_norm_match_f64() {
    let mut rng = Rng::fresh("gelu_norm");
    for (label, limits) in limit_sets() {
        let m = mesh(1, limits).await;
        let r = &m.ranks()[0];
        let (rows, h) = (13, 37);
        let x = rng.vec(rows * h);
        let gx = r.upload(&[rows, h], &x).unwrap();
        let y = kernels::activation(&gx, Activation::Gelu).unwrap();
        let want: Vec<f64> = x
            .iter()
            .map(|&v| {
                let v = v as f64;
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
            })
            .collect();
        let e = rel_err(&y.to_vec_async().await.unwrap(), &want);
        assert!(e <= TOL, "{label}: gelu rel {e:.2e}");

        let (gamma, beta) = (rng.vec(h), rng.vec(h));
        let (gg, gb) = (
            r.upload(&[h], &gamma).unwrap(),
            r.upload(&[h], &beta).unwrap(),
        );
        let (y, _) = kernels::norm_forward(&gx, &gg, Some(&gb), NormKind::LayerNorm, 1e-5).unwrap();
        let mut want = Vec::with_capacity(rows * h);
        for row in x.chunks(h) {
            let row = f64s(row);
            let mean = row.iter().sum::<f64>() / h as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
            let rstd = 1.0 / (var + 1e-5).sqrt();
            for (j, v) in row.iter().enumerate() {
                want.push((v - mean) * rstd * gamma[j] as f64 + beta[j] as f64);
            }
        }
        let e = rel_err(&y.to_vec_async().await.unwrap(), &want);
        assert!(e <= TOL, "{label}: layer norm rel {e:.2e}");
    }
}

#[wasm_bindgen_test]
async fn causal_attention_matches_f64() {
    let mut rng = Rng::fresh("attention");
    for (label, limits) in limit_sets() {
        let m = mesh(1, limits).await;
        let s = AttentionShape::new(2, 13, 3, 8);
        let hd = s.heads * s.head_dim;
        let qkv = rng.vec(s.batch * s.seq * 3 * hd);
        let g = m.ranks()[0]
            .upload(&[s.batch * s.seq, 3 * hd], &qkv)
            .unwrap();
        let out = kernels::attention_forward(&g, s).unwrap().out;
        let at = |blk: usize, b: usize, h: usize, t: usize, e: usize| {
            qkv[(b * s.seq + t) * 3 * hd + blk * hd + h * s.head_dim + e] as f64
        };
        let mut want = vec![0.0; s.batch * s.seq * hd];
        let scale = 1.0 / (s.head_dim as f64).sqrt();
        for b in 0..s.batch {
            for h in 0..s.heads {
                for i in 0..s.seq {
                    let scores: Vec<f64> = (0..=i)
                        .map(|j| {
                            (0..s.head_dim)
                                .map(|e| at(0, b, h, i, e) * at(1, b, h, j, e))
                                .sum::<f64>()
                                * scale
                        })
                        .collect();
                    let mx = scores.iter().copied().fold(f64::MIN, f64::max);
                    let sum: f64 = scores.iter().map(|v| (v - mx).exp()).sum();
                    for e in 0..s.head_dim {
                        want[(b * s.seq + i) * hd + h * s.head_dim + e] = (0..=i)
                            .map(|j| (scores[j] - mx).exp() / sum * at(2, b, h, j, e))
                            .sum();
                    }
                }
            }
        }
        let e = rel_err(&out.to_vec_async().await.unwrap(), &want);
        assert!(e <= TOL, "{label}: attention rel {e:.2e}");
    }
}

#[wasm_bindgen_test]
async fn cross_entropy_and_top_k_match_f64() {
    let mut rng = Rng::fresh("cross_entropy");
    for (label, limits) in limit_sets() {
        let m = mesh(1, limits).await;
        let r = &m.ranks()[0];
        let (rows, v) = (7, 65);
        let z: Vec<f32> = rng.vec(rows * v).iter().map(|x| 4.0 * x).collect();
        let targets: Vec<i32> = (0..rows)
            .map(|_| (rng.next_u64() % v as u64) as i32)
            .collect();
        let (gz, gt) = (
            r.upload(&[rows, v], &z).unwrap(),
            r.upload_i32(&[rows], &targets).unwrap(),
        );
        let ce = kernels::cross_entropy(&gz, &gt, &CrossEntropyOptions::default()).unwrap();
        let want: Vec<f64> = z
            .chunks(v)
            .zip(&targets)
            .map(|(row, &t)| {
                let row = f64s(row);
                let mx = row.iter().copied().fold(f64::MIN, f64::max);
                let lse = mx + row.iter().map(|x| (x - mx).exp()).sum::<f64>().ln();
                lse - row[t as usize]
            })
            .collect();
        let e = rel_err(&ce.loss.to_vec_async().await.unwrap(), &want);
        assert!(e <= TOL, "{label}: cross-entropy rel {e:.2e}");

        // The device's top 5 of row 3 are the host's (ties by the lower id).
        let k = 5;
        let top = kernels::top_k(&gz, 3, k, 0).unwrap();
        let got = top.to_vec_i32_async().await.unwrap();
        let mut order: Vec<usize> = (0..v).collect();
        let row = &z[3 * v..4 * v];
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let ids: Vec<usize> = got.chunks(2).map(|c| c[1] as usize).collect();
        assert_eq!(ids, order[..k], "{label}: top-k ids");
        log!("{label}: cross-entropy rel {e:.2e}, top-{k} {ids:?}");
    }
}

#[wasm_bindgen_test]
async fn adamw_step_matches_f64() {
    let mut rng = Rng::fresh("adamw");
    let m = mesh(1, None).await;
    let r = &m.ranks()[0];
    let n = 1037;
    let (w, g, m0) = (rng.vec(n), rng.vec(n), rng.vec(n));
    let v0: Vec<f32> = rng.vec(n).iter().map(|x| x.abs()).collect();
    let s = kernels::optim::AdamWStep {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
        step: 3,
    };
    let (gw, gg, gm, gv) = (
        r.upload(&[n], &w).unwrap(),
        r.upload(&[n], &g).unwrap(),
        r.upload(&[n], &m0).unwrap(),
        r.upload(&[n], &v0).unwrap(),
    );
    kernels::optim::adamw_step(&gw, &gg, &gm, &gv, s).unwrap();
    let (b1, b2, lr) = (s.beta1 as f64, s.beta2 as f64, s.lr as f64);
    let want: Vec<f64> = (0..n)
        .map(|i| {
            let gi = g[i] as f64;
            let mi = b1 * m0[i] as f64 + (1.0 - b1) * gi;
            let vi = b2 * v0[i] as f64 + (1.0 - b2) * gi * gi;
            let mh = mi / (1.0 - b1.powi(3));
            let vh = vi / (1.0 - b2.powi(3));
            w[i] as f64 * (1.0 - lr * s.weight_decay as f64) - lr * mh / (vh.sqrt() + s.eps as f64)
        })
        .collect();
    let e = rel_err(&gw.to_vec_async().await.unwrap(), &want);
    assert!(e <= TOL, "adamw rel {e:.2e}");
}

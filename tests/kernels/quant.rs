//! The quantized-weight kernels (`kernels::quant`): every ggml format the
//! crate keeps on the device, in products for every number of rows (the
//! forward's `a·wᵀ` with its epilogue, the backward's `dy·w`) and the
//! embedding lookup, against f64 on the weights the host dequantizes
//! (`quant::dequantize_rows`, itself checked bit for bit against gguf's
//! Python), 1e-5 norm-wise; ragged N, M and K (a last block partly used).
//! Outputs are poisoned before each kernel runs (the test meshes poison).

use crate::util::{Rng, assert_close, mesh, reference};
use wgpu_tp::kernels::{self, Activation, GemmOptions};
use wgpu_tp::quant::{QuantType, dequantize_rows, quantize_rows};
use wgpu_tp::{DType, Rank};

/// A random `[n, k]` weight quantized to `q`: (the device tensor, the
/// host's dequantized f32 values).
fn weight(
    r: &Rank,
    rng: &mut Rng,
    q: QuantType,
    n: usize,
    k: usize,
) -> (wgpu_tp::LocalTensor, Vec<f32>) {
    let w: Vec<f32> = rng.vec(n * k).iter().map(|v| v * 0.5).collect();
    let blocks = quantize_rows(q, &w, n, k).unwrap();
    let t = r.upload_quant(&[n, k], q, &blocks).unwrap();
    assert_eq!(t.dtype(), DType::Quant(q));
    (t, dequantize_rows(q, &blocks, n, k).unwrap())
}

/// K values per format: whole blocks, and a ragged tail.
fn ks(q: QuantType) -> [usize; 3] {
    let bl = q.block_len();
    [bl, 2 * bl + 13, 3 * bl]
}

#[test]
fn quantized_products_match_f64_on_the_dequantized_weights() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("quant_products");
    for q in QuantType::ALL {
        for (n, k) in [(7, ks(q)[0]), (13, ks(q)[1]), (17, ks(q)[2])] {
            let (w, wf) = weight(r, &mut rng, q, n, k);
            for rows in [1, 3, 8, 13] {
                let a = rng.vec(rows * k);
                let at = r.upload(&[rows, k], &a).unwrap();
                let c = kernels::gemm(&at, &w, GemmOptions::new().trans_b(true)).unwrap();
                let want = reference::gemm(&a, &wf, rows, n, k, false, true);
                assert_close(
                    &format!("{q} a·wᵀ m {rows} n {n} k {k}"),
                    &c.to_vec().unwrap(),
                    &want,
                    1e-5,
                );
                // dx = dy·w
                let dy = rng.vec(rows * n);
                let dyt = r.upload(&[rows, n], &dy).unwrap();
                let dx = kernels::gemm(&dyt, &w, GemmOptions::new()).unwrap();
                let want = reference::gemm(&dy, &wf, rows, k, n, false, false);
                assert_close(
                    &format!("{q} dy·w m {rows} n {n} k {k}"),
                    &dx.to_vec().unwrap(),
                    &want,
                    1e-5,
                );
            }
        }
    }
}

/// Bias, accumulate, an activation and a multiply in the forward's store,
/// as the small-M kernel applies them.
#[test]
fn quantized_products_apply_the_epilogue() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("quant_epilogue");
    let (n, k) = (13, 96);
    for q in [QuantType::Q8_0, QuantType::Q4_1] {
        let (w, wf) = weight(r, &mut rng, q, n, k);
        for rows in [1, 5, 11] {
            let a = rng.vec(rows * k);
            let (bias, acc) = (rng.vec(n), rng.vec(rows * n));
            let at = r.upload(&[rows, k], &a).unwrap();
            let bt = r.upload(&[n], &bias).unwrap();
            let ct = r.upload(&[rows, n], &acc).unwrap();
            let prod = reference::gemm(&a, &wf, rows, n, k, false, true);
            let opts = GemmOptions::new().trans_b(true).bias(&bt).accumulate(&ct);
            let got = kernels::gemm(&at, &w, opts).unwrap().to_vec().unwrap();
            let want: Vec<f64> = (0..rows * n)
                .map(|i| prod[i] + bias[i % n] as f64 + acc[i] as f64)
                .collect();
            assert_close(&format!("{q} bias + acc m {rows}"), &got, &want, 1e-5);
            let opts = GemmOptions::new()
                .trans_b(true)
                .bias(&bt)
                .activation(Activation::Silu)
                .multiply(&ct);
            let got = kernels::gemm(&at, &w, opts).unwrap().to_vec().unwrap();
            let want: Vec<f64> = (0..rows * n)
                .map(|i| {
                    let x = prod[i] + bias[i % n] as f64;
                    x / (1.0 + (-x).exp()) * acc[i] as f64
                })
                .collect();
            assert_close(&format!("{q} silu ⊙ up m {rows}"), &got, &want, 1e-5);
        }
    }
}

/// The lookup gives each owned id's dequantized row and zeros elsewhere.
#[test]
fn quantized_embedding_lookup_dequantizes_rows() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("quant_lookup");
    for q in QuantType::ALL {
        let (rows, dim) = (11, ks(q)[1]);
        let (table, wf) = weight(r, &mut rng, q, rows, dim);
        let start = 5i64;
        let ids = [5, 15, 9, -1, 4, 16, 7, 5];
        let ids_t = r.upload_i32(&[ids.len()], &ids).unwrap();
        let got = kernels::embedding_lookup(&table, &ids_t, start)
            .unwrap()
            .to_vec()
            .unwrap();
        for (t, &id) in ids.iter().enumerate() {
            let row = id as i64 - start;
            for c in 0..dim {
                let want = if (0..rows as i64).contains(&row) {
                    wf[row as usize * dim + c]
                } else {
                    0.0
                };
                let g = got[t * dim + c];
                assert!(
                    (g - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "{q} id {id} col {c}: {g} vs {want}"
                );
            }
        }
    }
}

/// A quantized weight reads back as its blocks (GGUF order) and as the
/// host's dequantized values; products refuse f16 outputs and a transposed
/// A is packed first.
#[test]
fn quantized_tensors_read_back_and_refuse_what_they_cannot_do() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("quant_readback");
    let (n, k) = (9, 64);
    let w: Vec<f32> = rng.vec(n * k);
    let blocks = quantize_rows(QuantType::Q5_1, &w, n, k).unwrap();
    let t = r.upload_quant(&[n, k], QuantType::Q5_1, &blocks).unwrap();
    assert_eq!(t.to_quant_blocks().unwrap(), blocks);
    assert_eq!(
        t.to_vec().unwrap(),
        dequantize_rows(QuantType::Q5_1, &blocks, n, k).unwrap()
    );
    assert!(
        r.upload_quant(&[n, k], QuantType::Q5_1, &blocks[1..])
            .is_err()
    );
    assert!(r.upload_quant(&[n * k], QuantType::Q5_1, &blocks).is_err());
    let a = rng.vec(3 * k);
    let at = r.upload(&[3, k], &a).unwrap();
    let f16 = GemmOptions::new().trans_b(true).out_dtype(DType::F16);
    assert!(kernels::gemm(&at, &t, f16).is_err());
    // A stored [K, M] and used transposed.
    let a_t: Vec<f32> = (0..3 * k).map(|i| a[(i % 3) * k + i / 3]).collect();
    let att = r.upload(&[k, 3], &a_t).unwrap();
    let got = kernels::gemm(&att, &t, GemmOptions::new().trans_a(true).trans_b(true)).unwrap();
    let wf = dequantize_rows(QuantType::Q5_1, &blocks, n, k).unwrap();
    let want = reference::gemm(&a, &wf, 3, n, k, false, true);
    assert_close("trans_a", &got.to_vec().unwrap(), &want, 1e-5);
}

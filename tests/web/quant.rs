//! Quantized weights in the browser: a GPT quantized after building
//! (`store_weights_as_async`; the blocking `store_weights_as` says what to
//! await) runs on P = 4 ranks sharing the page's device as on one, under
//! both limit sets: Q8_0, Q4_0 and Q4_K (K = 64 is two 32-weight blocks,
//! so two of the four ranks hold none of a row-parallel weight; 16-wide
//! heads are half a block, so the attention output's input is re-split;
//! the MLP's K = 256 is one Q4_K block). The logits stay near the f32
//! model's and cached generation equals recomputation. The products alone
//! match f64 on the dequantized weights at P = 1, 2 and 4 in every
//! placement.

use wasm_bindgen_test::wasm_bindgen_test;
use wgpu_tp::models::{CausalLm, Gpt2Config};
use wgpu_tp::nn::{Params, Sampling};
use wgpu_tp::quant::QuantType;
use wgpu_tp::{DType, Error, Mesh, no_grad};

use crate::{Rng, TOL, limit_sets, log, mesh, rel_err};

fn config() -> Gpt2Config {
    let mut cfg = Gpt2Config::new(40, 16, 64, 4, 2);
    cfg.n_inner = Some(256);
    cfg
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

async fn logits(model: &CausalLm, ids: &[i32]) -> Vec<f32> {
    let l = no_grad(|| model.logits(ids, 8)).unwrap();
    l.to_host_async().await.unwrap()
}

async fn quantized(m: &Mesh, seed: u64, q: QuantType) -> CausalLm {
    let mut model = CausalLm::new(m, config(), seed).unwrap();
    model.store_weights_as_async(DType::Quant(q)).await.unwrap();
    model
}

#[wasm_bindgen_test]
async fn quantized_gpt_on_4_ranks_equals_1_rank_and_generates() {
    let mut rng = Rng::fresh("quant");
    for (label, limits) in limit_sets() {
        let seed = rng.next_u64();
        let ids: Vec<i32> = (0..16).map(|_| (rng.next_u64() % 40) as i32).collect();
        let m1 = mesh(1, limits.clone()).await;
        let m4 = mesh(4, limits.clone()).await;
        let f32_logits = logits(&CausalLm::new(&m1, config(), seed).unwrap(), &ids).await;
        // Quantizing reads the f32 values back: a page must await it.
        let mut blocking = CausalLm::new(&m1, config(), seed).unwrap();
        let err = blocking
            .store_weights_as(DType::Quant(QuantType::Q8_0))
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::WouldBlock {
                    op: "Parameter::store_as"
                }
            ),
            "{err}"
        );
        // About half a 8-bit or 4-bit step of a normal weight (MATH.md).
        for (q, near) in [
            (QuantType::Q8_0, 0.02),
            (QuantType::Q4_0, 0.25),
            (QuantType::Q4K, 0.25),
        ] {
            let one = quantized(&m1, seed, q).await;
            let want = logits(&one, &ids).await;
            let e = rel_err(&want, &f64s(&f32_logits));
            assert!(e < near, "{label} {q}: logits {e:.2e} from f32's");
            let four = quantized(&m4, seed, q).await;
            for (name, p) in four.named_parameters() {
                if let &[_, k] = p.shape() {
                    let want = DType::Quant(q.for_row(k).unwrap());
                    assert_eq!(p.value.dtype(), want, "{label} {q}: {name}");
                }
            }
            let got = logits(&four, &ids).await;
            let e4 = rel_err(&got, &f64s(&want));
            assert!(e4 <= TOL, "{label} {q}: P = 4 logits {e4:.2e} from P = 1's");
            let prompt = [3, 1, 4];
            let cached = four
                .generate_async(&prompt, 5, Sampling::Greedy)
                .await
                .unwrap();
            let full = four
                .generate_uncached_async(&prompt, 5, Sampling::Greedy)
                .await
                .unwrap();
            assert_eq!(cached, full, "{label} {q}: cached generation");
            assert_eq!(cached.len(), 5);
            log!(
                "{label} {q}: logits {e:.2e} from f32's, P = 4 {e4:.2e} from P = 1; greedy {cached:?}"
            );
        }
    }
}

/// `x [t, k] · wᵀ` for `w [n, k]`, in f64.
fn gemm_t(x: &[f32], w: &[f32], t: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0.0; t * n];
    for i in 0..t {
        for j in 0..n {
            y[i * n + j] = (0..k)
                .map(|l| x[i * k + l] as f64 * w[j * k + l] as f64)
                .sum();
        }
    }
    y
}

/// The products on their own, every row checked: `N` rows whose blocks'
/// last scales sit in the buffer's last vec4, which WebGPU's robust access
/// hides unless the buffer is whole vec4s (`quant::layout::regions`);
/// native drivers read past it, so only this test sees that.
#[wasm_bindgen_test]
async fn quantized_products_shard_like_f32_ones() {
    use wgpu_tp::quant::{dequantize_rows, quantize_rows};
    use wgpu_tp::{DTensor, Placement};
    let mut rng = Rng::fresh("quant_dtensor");
    for (label, limits) in limit_sets() {
        // K of 2 and 5 blocks: at P = 4 ranks hold none or two.
        for (q, n, blocks) in [
            (QuantType::Q8_0, 13, 2),
            (QuantType::Q8_0, 13, 5),
            (QuantType::Q4K, 17, 1),
        ] {
            let k = blocks * q.block_len();
            let w = rng.vec(n * k);
            let wb = quantize_rows(q, &w, n, k).unwrap();
            let wf = dequantize_rows(q, &wb, n, k).unwrap();
            let bl = q.block_len();
            let mut worst = 0.0f64;
            for p in [1, 2, 4] {
                let m = mesh(p, limits.clone()).await;
                // One row (a decoding step's small-M path) and several.
                for t in [1, 7] {
                    let x = rng.vec(t * k);
                    let want = gemm_t(&x, &wf, t, n, k);
                    for (xp, wp, unit) in [
                        (Placement::Replicate, Placement::Shard(0), 1),
                        (Placement::Replicate, Placement::Replicate, 1),
                        (Placement::Shard(1), Placement::Shard(1), bl),
                    ] {
                        let what = format!("{label} {q} K={k} P={p} t={t} {wp:?}");
                        let wd = DTensor::from_quant_blocks(&m, &[n, k], q, &wb, wp, unit).unwrap();
                        let xd = DTensor::from_host(&m, &[t, k], &x, Placement::Replicate).unwrap();
                        let xd = xd.redistribute_in_units(xp, unit).unwrap();
                        let y = xd.matmul(&wd, true).unwrap();
                        let y = y.redistribute(Placement::Replicate).unwrap();
                        let got = y.to_host_async().await.unwrap();
                        let e = rel_err(&got, &want);
                        assert!(e <= TOL, "{what}: {e:.2e}");
                        worst = worst.max(e);
                    }
                }
            }
            log!("{label} {q} [{n}, {k}]: P = 1, 2, 4, every placement, worst {worst:.2e}");
        }
    }
}

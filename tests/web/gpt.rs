//! The GPT in the browser: one training step on P = 4 ranks sharing the
//! page's device equals P = 1 (loss, every gradient, every parameter after
//! an SGD step), plain, and sequence-parallel with dropout, under both limit sets;
//! cached generation equals recomputation; f16 is reported skipped where
//! the adapter has no `shader-f16`.

use wasm_bindgen_test::wasm_bindgen_test;
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{Params, Sampling, Sgd};
use wgpu_tp::{DTensor, Error, Placement};

use crate::{Rng, TOL, limit_sets, log, mesh, rel_err};

fn config() -> Gpt2Config {
    // 3 heads: P = 4 splits them unevenly and one rank holds none.
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    cfg
}

/// With dropout on activations and attention probabilities: the masks
/// follow global positions, so they are the same at every P.
fn with_dropout(mut cfg: Gpt2Config) -> Gpt2Config {
    (cfg.embd_pdrop, cfg.resid_pdrop, cfg.attn_pdrop) = (0.1, 0.1, 0.1);
    cfg
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Loss, gradients and parameters after one optimiser step, by parameter
/// order. SGD, whose update is linear in the gradient: AdamW's g/√v turns a
/// rounding-level gradient into a ±lr step, so its parameters differ by
/// more than the gradients do (tests/nn/blocked.rs).
async fn step(
    model: &mut CausalLm,
    ids: &[i32],
    targets: &[i32],
    seq: usize,
) -> (f32, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let loss = model.loss(ids, targets, seq).unwrap();
    let value = loss.to_host_async().await.unwrap()[0];
    loss.backward().unwrap();
    let mut grads = Vec::new();
    for (name, p) in model.named_parameters() {
        let g = p.master_grad_async().await.unwrap();
        grads.push(g.unwrap_or_else(|| panic!("{name} has no gradient")));
    }
    Sgd::new(0.5).step(model).unwrap();
    model.zero_grad();
    let mut params = Vec::new();
    for (_, p) in model.named_parameters() {
        params.push(p.master_async().await.unwrap());
    }
    (value, grads, params)
}

#[wasm_bindgen_test]
async fn gpt_step_on_4_ranks_equals_1_rank() {
    let mut rng = Rng::fresh("gpt");
    for (label, limits) in limit_sets() {
        for sp in [false, true] {
            // The sequence-parallel run also has dropout.
            let cfg = if sp { with_dropout(config()) } else { config() };
            let opts = LoadOptions::default().sequence_parallel(sp);
            let seq = 8;
            let ids: Vec<i32> = (0..2 * seq).map(|_| (rng.next_u64() % 11) as i32).collect();
            let targets: Vec<i32> = (0..2 * seq).map(|_| (rng.next_u64() % 11) as i32).collect();
            let seed = rng.next_u64();
            let m1 = mesh(1, limits.clone()).await;
            let mut model = CausalLm::new_with(&m1, cfg.clone(), seed, opts).unwrap();
            let (l1, g1, p1) = step(&mut model, &ids, &targets, seq).await;
            let m4 = mesh(4, limits.clone()).await;
            m4.reset_comm_stats();
            let mut model = CausalLm::new_with(&m4, cfg, seed, opts).unwrap();
            let (l4, g4, p4) = step(&mut model, &ids, &targets, seq).await;
            let e = rel_err(&[l4], &[l1 as f64]);
            assert!(e <= TOL, "{label} sp {sp}: loss {l4} vs {l1}");
            let mut worst = e;
            for (i, (g4, g1)) in g4.iter().zip(&g1).enumerate() {
                let e = rel_err(g4, &f64s(g1));
                assert!(e <= TOL, "{label} sp {sp}: gradient {i} rel {e:.2e}");
                worst = worst.max(e);
            }
            for (i, (p4, p1)) in p4.iter().zip(&p1).enumerate() {
                let e = rel_err(p4, &f64s(p1));
                assert!(
                    e <= TOL,
                    "{label} sp {sp}: parameter {i} after SGD rel {e:.2e}"
                );
            }
            let bytes: u64 = m4.comm_stats().values().map(|c| c.bytes).sum();
            assert!(bytes > 0, "{label}: a P = 4 step communicates");
            log!(
                "{label} sp {sp}: P=4 vs P=1 loss {l4:.6}/{l1:.6}, worst loss/gradient rel {worst:.2e}, {} gradients, {bytes} bytes communicated",
                g4.len()
            );
        }
    }
}

#[wasm_bindgen_test]
async fn cached_generation_equals_recomputation() {
    let mut rng = Rng::fresh("generate");
    for (label, limits) in limit_sets() {
        for p in [1, 4] {
            let m = mesh(p, limits.clone()).await;
            let model = CausalLm::new(&m, config(), rng.next_u64()).unwrap();
            let prompt = [3, 1, 4];
            for sampling in [
                Sampling::Greedy,
                Sampling::TopK {
                    k: 4,
                    temperature: 0.9,
                    seed: rng.next_u64(),
                },
            ] {
                let cached = model.generate_async(&prompt, 5, sampling).await.unwrap();
                let full = model
                    .generate_uncached_async(&prompt, 5, sampling)
                    .await
                    .unwrap();
                assert_eq!(cached, full, "{label} P={p} {sampling:?}");
                assert_eq!(cached.len(), 5);
            }
            // A blocking call says what to await instead.
            let err = model.generate(&prompt, 1, Sampling::Greedy).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::WouldBlock {
                        op: "Decoder::generate"
                    }
                ),
                "{err}"
            );
        }
        log!("{label}: cached generation equals recomputation at P = 1 and 4");
    }
}

#[wasm_bindgen_test]
async fn f16_runs_or_is_reported_skipped() {
    let m = mesh(2, None).await;
    let d = &m.devices()[0];
    let data = [0.5f32, -1.25, 3.0, 0.1];
    let made = DTensor::from_host_f16(&m, &[2, 2], &data, Placement::Shard(0));
    if d.features().contains(wgpu::Features::SHADER_F16) {
        let got = made.unwrap().to_host_async().await.unwrap();
        let want: Vec<f64> = data
            .iter()
            .map(|&v| half::f16::from_f32(v).to_f32() as f64)
            .collect();
        assert_eq!(rel_err(&got, &want), 0.0);
        log!("f16: ran on {}", d.adapter_info().name);
    } else {
        assert!(
            matches!(
                made,
                Err(Error::Unsupported {
                    feature: "SHADER_F16",
                    ..
                })
            ),
            "f16 without the feature must be Unsupported"
        );
        log!(
            "f16: SKIPPED, adapter {:?} has no shader-f16 (SwiftShader does not offer it); an f16 tensor is Error::Unsupported here, as the test checks",
            d.adapter_info().name
        );
    }
}

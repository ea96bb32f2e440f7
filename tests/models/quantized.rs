//! Models quantized as they are built (`LoadOptions::weights(DType::Quant)`)
//! or afterwards (`Params::store_weights_as_async`, what the browser demo
//! awaits), on a GPT-2 whose splits reach every case of docs/MATH.md's
//! quantized tensor parallelism at P = 4: K = 64 is two 32-weight blocks
//! (two ranks hold none), the 16-wide heads are half a block (the attention
//! output's input is re-split), and the MLP's K = 256 is one Q4_K block.
//! Every weight matrix takes the type llama.cpp would give its row; P = 3
//! and 4 equal P = 1; both ways of quantizing give the same bits; the
//! logits stay near the f32 model's; cached generation equals
//! recomputation.

use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{Params, Sampling};
use wgpu_tp::quant::QuantType;
use wgpu_tp::{DType, no_grad};

use crate::util::{assert_close, mesh, shared_mesh};

fn config() -> Gpt2Config {
    let mut cfg = Gpt2Config::new(40, 16, 64, 4, 2);
    cfg.n_inner = Some(256);
    cfg
}

const SEED: u64 = 7;

fn ids() -> Vec<i32> {
    (0..16).map(|i| (i * 11 + 5) % 40).collect()
}

fn logits(model: &CausalLm) -> Vec<f32> {
    no_grad(|| model.logits(&ids(), 8))
        .unwrap()
        .to_host()
        .unwrap()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// ‖a − b‖ / ‖b‖.
fn rel(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den).sqrt()
}

#[test]
fn quantized_gpt_is_the_same_at_every_p_and_near_f32() {
    let f32_logits = logits(&CausalLm::new(&mesh(1), config(), SEED).unwrap());
    // Q4_K: rows of K = 64 fall back to Q5_0, the MLP's K = 256 stays Q4_K.
    // A weight's rounding error is about its block's largest |w| over 2·127
    // (8 bits) or 2·7 (4 bits), /√3: some 0.6 % and 10 % of a normal
    // weight's size, and the logits' relative error is of that order.
    for (q, near) in [
        (QuantType::Q8_0, 0.02),
        (QuantType::Q4_0, 0.25),
        (QuantType::Q4K, 0.25),
    ] {
        let opts = LoadOptions::default().weights(DType::Quant(q));
        let one = CausalLm::new_with(&mesh(1), config(), SEED, opts).unwrap();
        let want = logits(&one);
        let e = rel(&want, &f32_logits);
        assert!(e < near, "{q}: logits {e:.2e} from f32's");
        for (name, p) in one.named_parameters() {
            let want = match p.shape() {
                &[_, k] => DType::Quant(q.for_row(k).unwrap()),
                _ => DType::F32,
            };
            assert_eq!(p.value.dtype(), want, "{q}: {name} {:?}", p.shape());
        }
        for p in [3, 4] {
            let m = shared_mesh(p);
            let built = CausalLm::new_with(&m, config(), SEED, opts).unwrap();
            assert_close(
                &format!("{q} P={p} logits"),
                &logits(&built),
                &f64s(&want),
                1e-5,
            );
            // Quantized after building, awaited: the same blocks.
            let mut after = CausalLm::new(&m, config(), SEED).unwrap();
            pollster::block_on(after.store_weights_as_async(DType::Quant(q))).unwrap();
            assert_eq!(
                logits(&after)
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                logits(&built)
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                "{q} P={p}: store_weights_as_async against LoadOptions::weights"
            );
            let prompt = [3, 1, 4];
            let cached = built.generate(&prompt, 6, Sampling::Greedy).unwrap();
            let full = built
                .generate_uncached(&prompt, 6, Sampling::Greedy)
                .unwrap();
            assert_eq!(cached, full, "{q} P={p}: cached generation");
            assert_eq!(cached.len(), 6);
        }
        eprintln!("{q}: logits {e:.2e} from f32's; P = 3, 4 equal P = 1");
    }
}

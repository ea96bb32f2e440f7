//! Parameters' gradients: backward calls accumulate into them until
//! `zero_grad` (model- and layer-level) clears them.

use super::TOL;
use crate::util::{Rng, assert_close, master_grads, mesh, token_batch};
use wgpu_tp::nn::{MlpLanguageModel, MlpLmConfig, Module};

#[test]
fn gradients_accumulate_until_zero_grad_p3() {
    let mut rng = Rng::fresh("grad_accum");
    let cfg = MlpLmConfig {
        vocab: 26,
        hidden: 12,
        ffn: 20,
    };
    let (b1, b2) = (token_batch(&mut rng, 26, 9), token_batch(&mut rng, 26, 9));
    let m = mesh(3);
    // Separately: g1, then (after zero_grad) g2.
    let mut model = MlpLanguageModel::new(&m, cfg, 11).unwrap();
    model.forward(&b1.0, &b1.1).unwrap();
    model.backward().unwrap();
    let g1 = master_grads(&model);
    model.zero_grad();
    assert!(
        model
            .named_parameters()
            .iter()
            .all(|(_, p)| p.grad.is_none() && p.master_grad().unwrap().is_none()),
        "zero_grad leaves no gradient"
    );
    model.forward(&b2.0, &b2.1).unwrap();
    model.backward().unwrap();
    let g2 = master_grads(&model);
    // Accumulated: two backward calls without zero_grad.
    let mut acc = MlpLanguageModel::new(&m, cfg, 11).unwrap();
    for b in [&b1, &b2] {
        acc.forward(&b.0, &b.1).unwrap();
        acc.backward().unwrap();
    }
    for (((n, a), (_, x)), (_, y)) in master_grads(&acc).iter().zip(&g1).zip(&g2) {
        let want: Vec<f64> = x
            .iter()
            .zip(y)
            .map(|(x, y)| *x as f64 + *y as f64)
            .collect();
        assert_close(&format!("accumulated {n}"), a, &want, TOL);
    }
    // Layer-level zero_grad too.
    acc.fc1.zero_grad();
    assert!(acc.fc1.weight.grad.is_none() && acc.fc1.bias.as_ref().unwrap().grad.is_none());
    assert!(acc.fc2.weight.grad.is_some());
}

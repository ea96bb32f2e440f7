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

/// A master of the wrong length on a strided parameter (the fused `c_attn`)
/// is an error naming the lengths, not a panic in the reorder, and the value
/// stays as it was; so for an unstrided one.
#[test]
fn load_master_of_the_wrong_length_is_an_error_p1_2_3_4_8() {
    use wgpu_tp::Placement;
    use wgpu_tp::nn::Parameter;
    let mut rng = Rng::fresh("load_master_len");
    // [3·6, 5]: stride 3 (q, k, v) of 6 rows each, in units of 2 (head_dim).
    let shape = [18, 5];
    let w = rng.vec(18 * 5);
    for p in [1, 2, 3, 4, 8] {
        let m = mesh(p);
        for (stride, unit) in [(3, 2), (1, 1)] {
            let mut param =
                Parameter::from_master_in_units(&m, &shape, &w, Placement::Shard(0), stride, unit)
                    .unwrap();
            for bad in [w.len() - 1, w.len() + 1, 0] {
                let err = param.load_master(&vec![1.0; bad]).unwrap_err();
                assert!(
                    err.to_string()
                        .contains(&format!("has {bad} values, expected 90")),
                    "P = {p}, stride {stride}: {err}"
                );
                assert_eq!(param.master().unwrap(), w, "P = {p}: value unchanged");
            }
        }
    }
}

//! Parameters' gradients: backward calls accumulate into them until
//! `zero_grad` (model- and layer-level) clears them.

use super::TOL;
use crate::util::{Rng, assert_close, master_grads, mesh, token_batch};
use wgpu_tp::nn::{MlpLanguageModel, MlpLmConfig, Params};

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
    model.loss(&b1.0, &b1.1).unwrap().backward().unwrap();
    let g1 = master_grads(&model);
    model.zero_grad();
    assert!(
        model
            .named_parameters()
            .iter()
            .all(|(_, p)| p.grad().is_none() && p.master_grad().unwrap().is_none()),
        "zero_grad leaves no gradient"
    );
    model.loss(&b2.0, &b2.1).unwrap().backward().unwrap();
    let g2 = master_grads(&model);
    // Accumulated: two backward calls without zero_grad.
    let mut acc = MlpLanguageModel::new(&m, cfg, 11).unwrap();
    for b in [&b1, &b2] {
        acc.loss(&b.0, &b.1).unwrap().backward().unwrap();
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
    assert!(acc.fc1.weight.grad().is_none() && acc.fc1.bias.as_ref().unwrap().grad().is_none());
    assert!(acc.fc2.weight.grad().is_some());
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

/// `load_master` writes the value's own buffers (views taken before the load
/// see the new values: no second copy of the model), gives the right shards
/// at P = 1..4 on both transports and with row-blocked shards (a tiny binding
/// limit), for strided, plain and replicated parameters, and drops the GEMM
/// packs kept from the old value.
#[test]
fn load_master_writes_in_place_p1_2_3_4() {
    use crate::util::{limited_mesh, meshes, reference};
    use wgpu_tp::Placement;
    use wgpu_tp::kernels::{self, GemmOptions};
    use wgpu_tp::nn::Parameter;
    let mut rng = Rng::fresh("load_master_in_place");
    // (shape, placement, stride, unit); the last is past 48 KiB per shard.
    let cases = [
        (vec![18, 5], Placement::Shard(0), 3, 2),
        (vec![7, 13], Placement::Shard(1), 1, 1),
        (vec![13], Placement::Replicate, 1, 1),
        (vec![1500, 40], Placement::Shard(0), 3, 2),
    ];
    for p in 1..=4 {
        let mut all = meshes(p).to_vec();
        all.push(("blocked", limited_mesh(p, 48 * 1024, p > 1)));
        for (name, m) in all {
            for (shape, placement, stride, unit) in &cases {
                let what = format!("P = {p} {name} {shape:?} {placement:?}");
                let n: usize = shape.iter().product();
                let (w0, w1) = (rng.vec(n), rng.vec(n));
                let mut param =
                    Parameter::from_master_in_units(&m, shape, &w0, *placement, *stride, *unit)
                        .unwrap();
                let old = param.value.shards().to_vec();
                // Keep a pack of rank 0's shard (a 2-D weight, rows past M = 16).
                let s0 = &old[0];
                let x = rng.vec(16 * s0.shape().last().unwrap());
                let packed = s0.shape().len() == 2 && !s0.is_blocked() && s0.shape()[0] > 0;
                let gemm = || {
                    let r = s0.rank();
                    let xt = r.upload(&[16, s0.shape()[1]], &x).unwrap();
                    let opts = GemmOptions::new().trans_b(true);
                    kernels::gemm(&xt, s0, opts.weight(true))
                        .unwrap()
                        .to_vec()
                        .unwrap()
                };
                // Packs are kept from the second use.
                let before = packed.then(|| (gemm(), gemm()).1);
                if packed {
                    assert!(s0.derived_count() > 0, "{what}: nothing kept");
                }
                let version = s0.version();
                param.load_master(&w1).unwrap();
                assert_eq!(param.master().unwrap(), w1, "{what}: loaded values");
                for (o, s) in old.iter().zip(param.value.shards()) {
                    assert_eq!(o.to_vec().unwrap(), s.to_vec().unwrap(), "{what}: in place");
                }
                assert!(s0.version() > version, "{what}: version not bumped");
                assert_eq!(s0.derived_count(), 0, "{what}: stale packs kept");
                if let Some(before) = before {
                    let (rows, k) = (s0.shape()[0], s0.shape()[1]);
                    let want = reference::gemm(&x, &s0.to_vec().unwrap(), 16, rows, k, false, true);
                    let got = gemm();
                    assert_ne!(got, before, "{what}: product uses the old pack");
                    assert_close(&format!("{what}: product after the load"), &got, &want, TOL);
                }
            }
        }
    }
}

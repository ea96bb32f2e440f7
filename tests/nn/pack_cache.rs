//! Layers keep their weights' GEMM packs (`kernels::gemm_weight`) between
//! calls; an optimiser step writes the weights in place, and the next
//! forward must use the new weights, at P = 1, 2, 3, 4, 8 (ragged shards).

use super::TOL;
use crate::util::reference::linear;
use crate::util::{Rng, WORLD_SIZES, assert_close, mesh};
use wgpu_tp::nn::{
    AdamW, ColumnParallelConfig, ColumnParallelLinear, Params, RowParallelConfig, RowParallelLinear,
};
use wgpu_tp::{DTensor, Placement};

#[test]
fn forward_after_an_optimiser_step_uses_the_new_weights_p1_2_3_4_8() {
    let mut rng = Rng::fresh("pack_cache_layers");
    // 16 tokens: past the small-M kernel, so the weights are packed / copied.
    let (t, inp, hidden) = (16, 13, 20);
    let w1 = rng.vec(hidden * inp);
    let w2 = rng.vec(inp * hidden);
    let x = rng.vec(t * inp);
    let dy = rng.vec(t * inp);
    for &p in WORLD_SIZES {
        let m = mesh(p);
        let cfg1 = ColumnParallelConfig::new(inp, hidden);
        let mut fc1 =
            ColumnParallelLinear::from_master(&m, cfg1, &w1, Some(&vec![0.0; hidden])).unwrap();
        let cfg2 = RowParallelConfig::new(hidden, inp);
        let mut fc2 = RowParallelLinear::from_master(&m, cfg2, &w2, Some(&vec![0.0; inp])).unwrap();
        let xd = DTensor::from_host(&m, &[t, inp], &x, Placement::Replicate).unwrap();
        let dyd = DTensor::from_host(&m, &[t, inp], &dy, Placement::Replicate).unwrap();
        let (mut opt1, mut opt2) = (AdamW::new(0.05), AdamW::new(0.05));
        // Two forwards per step: packs are kept from their second use.
        for step in 0..4 {
            let out = fc2.forward(&fc1.forward(&xd).unwrap()).unwrap();
            let y = out.to_host().unwrap();
            // The reference from the weights as they are now.
            let (v1, v2) = (fc1.master_weight().unwrap(), fc2.master_weight().unwrap());
            let (b1, b2) = (
                fc1.master_bias().unwrap().unwrap(),
                fc2.master_bias().unwrap().unwrap(),
            );
            let h: Vec<f64> = linear(&x, &v1, Some(&b1), t, inp, hidden);
            let want = linear(&h, &v2, Some(&b2), t, hidden, inp);
            assert_close(&format!("P={p} step {}.{step}", step / 2), &y, &want, TOL);
            if step % 2 == 0 {
                continue;
            }
            out.backward_with(&dyd).unwrap();
            opt1.step(&mut fc1).unwrap();
            opt2.step(&mut fc2).unwrap();
            fc1.zero_grad();
            fc2.zero_grad();
        }
    }
}

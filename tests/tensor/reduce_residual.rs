//! A shared device's row-parallel all-reduce with the residual added in its
//! fold (`copy_fold::fold_flat4_add`): `RowParallelLinear::forward_residual`
//! without a bias, unrecorded, gives the two steps' bits (the all-reduce,
//! then `add`) and f64's numbers at P = 2, 3, 4, 8, with no element-wise
//! kernel after (two fold passes at P = 8). Where it does not apply (a
//! length off a multiple of 4, a host-staged mesh, anything recorded) the
//! two steps run, with the same bits.

use crate::util::{Rng, assert_close, count_lock, counting_meshes, kernel_calls, reference};
use wgpu_tp::nn::{InitRng, RowParallelConfig, RowParallelLinear};
use wgpu_tp::{DTensor, Placement, no_grad};

#[test]
fn the_all_reduce_adds_the_residual_in_its_fold_p2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("reduce_add_residual");
    let k = 13;
    for p in [2, 3, 4, 8] {
        for (transport, m) in counting_meshes(p) {
            // (rows, columns, recorded): 20, 68 and 96 elements fold as vec4s.
            for (t, n, recorded) in [
                (1, 20, false),
                (4, 17, false),
                (3, 17, false),
                (8, 12, true),
            ] {
                let what = format!("{transport} P={p} {t}x{n} recorded {recorded}");
                let mut cfg = RowParallelConfig::new(k, n);
                cfg.bias = false;
                let layer = RowParallelLinear::new(&m, cfg, &mut InitRng::new(11)).unwrap();
                let (x, res) = (rng.vec(t * k), rng.vec(t * n));
                let xd = DTensor::from_host(&m, &[t, k], &x, Placement::Shard(1)).unwrap();
                let rd = DTensor::from_host(&m, &[t, n], &res, Placement::Replicate).unwrap();
                m.start_trace().unwrap();
                // The layer's weight is tracked unless gradients are off.
                let y = match recorded {
                    true => layer.forward_residual(&xd, &rd),
                    false => no_grad(|| layer.forward_residual(&xd, &rd)),
                };
                let y = y.unwrap();
                let trace = m.stop_trace().unwrap();
                let two = no_grad(|| rd.add(&layer.forward(&xd)?)).unwrap();
                let got = y.to_host().unwrap();
                assert!(got == two.to_host().unwrap(), "{what}: the two steps' bits");
                assert_eq!(y.placement(), Placement::Replicate, "{what}");
                let one_pass = transport == "shared-device" && (t * n) % 4 == 0 && !recorded;
                let fused = kernel_calls(&trace, "copy_fold::fold_flat4_add");
                let adds = kernel_calls(&trace, "elementwise::axpby");
                assert_eq!(
                    (fused, adds == 0),
                    (u64::from(one_pass), one_pass),
                    "{what}"
                );
                if one_pass {
                    // Eight partial sums: four folded first, the rest with the residual.
                    let first = kernel_calls(&trace, "copy_fold::fold_flat4");
                    assert_eq!(first, u64::from(p > 4), "{what}");
                }
                let w = layer.weight.value.to_host().unwrap();
                let want: Vec<f64> = (reference::linear(&x, &w, None, t, k, n).iter())
                    .zip(&res)
                    .map(|(y, &r)| y + r as f64)
                    .collect();
                assert_close(&what, &got, &want, 1e-5);
            }
        }
    }
}

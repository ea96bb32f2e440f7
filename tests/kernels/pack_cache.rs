//! The GEMM's kept packs of a weight (`GemmOptions::weight`): kept from
//! their second use, reused while
//! the weight is unchanged, dropped when a kernel writes it in place (the
//! optimiser's step), and the product after the write uses the new values,
//! for B stored `[N, K]` (`x·Wᵀ`) and `[K, N]` (`dy·W`), ragged and not.

use crate::util::{Rng, assert_close_cancelling, mesh, reference};
use wgpu_tp::kernels::optim::{SgdStep, sgd_step};
use wgpu_tp::kernels::{self, GemmOptions, GemmVariant};
use wgpu_tp::{DType, LocalTensor};

fn check(what: &str, x: &[f32], w: &LocalTensor, (m, n, k): (usize, usize, usize), tb: bool) {
    let r = w.rank();
    let xt = r.upload(&[m, k], x).unwrap();
    let opts = GemmOptions::new().trans_b(tb);
    // The texture kernel packs B on every adapter (Auto only on CPU ones).
    let got = kernels::gemm(&xt, w, opts.variant(GemmVariant::Texture).weight(true))
        .unwrap()
        .to_vec()
        .unwrap();
    let wv = w.to_vec().unwrap();
    let want = reference::gemm(x, &wv, m, n, k, false, tb);
    let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<_>>();
    let scale = reference::gemm(&abs(x), &abs(&wv), m, n, k, false, tb);
    assert_close_cancelling(what, &got, &want, &scale, 1e-5);
}

#[test]
fn kept_packs_follow_in_place_writes() {
    let mesh = mesh(1);
    let r = &mesh.ranks()[0];
    let mut rng = Rng::fresh("pack_cache");
    // M past the small-M kernel, so B is packed or copied into a texture.
    for (m, n, k) in [(16, 24, 32), (13, 17, 7)] {
        for tb in [true, false] {
            let what = format!("m={m} n={n} k={k} tb={tb}");
            let w = r
                .upload(&if tb { [n, k] } else { [k, n] }, &rng.vec(n * k))
                .unwrap();
            let x = rng.vec(m * k);
            // Kept from the second use on: a training step uses each once.
            check(&format!("{what}: first"), &x, &w, (m, n, k), tb);
            assert_eq!(w.derived_count(), 0, "{what}: kept at the first use");
            check(&format!("{what}: second"), &x, &w, (m, n, k), tb);
            let kept = w.derived_count();
            assert!(kept > 0, "{what}: nothing kept");
            check(&format!("{what}: kept"), &x, &w, (m, n, k), tb);
            assert_eq!(w.derived_count(), kept, "{what}: the third call reuses");
            // An SGD step writes w in place: version bumped, packs dropped.
            let version = w.version();
            let grad = r.upload(w.shape(), &rng.vec(n * k)).unwrap();
            let spare = r.zeros(&[4], DType::F32).unwrap();
            let step = SgdStep {
                lr: 0.5,
                momentum: 0.0,
                weight_decay: 0.0,
                first_step: true,
            };
            sgd_step(&w, &grad, None, [&spare, &spare.clone()], step).unwrap();
            assert!(w.version() > version, "{what}: version not bumped");
            assert_eq!(w.derived_count(), 0, "{what}: stale packs kept");
            // The next product uses the new weights (a stale pack would not).
            check(&format!("{what}: after the step"), &x, &w, (m, n, k), tb);
        }
    }
}

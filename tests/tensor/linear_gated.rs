//! `DTensor::linear_gated`: a gated MLP's `act(x·gateᵀ) ⊙ x·upᵀ` in one
//! small-M pass over both weights where nothing records it. Its bits are
//! the two calls' it stands for (`linear` of up, then the gate's
//! `linear_activation_mul`), and the f64 product; the dispatches are
//! counted; biases, the tape and rows past 8 take the two calls.

use crate::util::reference::{gelu, gemm};
use crate::util::{Rng, assert_close_cancelling, mesh_env, meshes, round_bf16, traced_gemv_calls};
use wgpu_tp::kernels::Activation;
use wgpu_tp::{DTensor, DType, DeviceLayout, MatmulOptions, Mesh, MeshBuilder, Placement};

/// `act(x)` in f64, as the kernels compute it.
fn act64(act: Activation, x: f64) -> f64 {
    match act {
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Gelu => gelu(x),
        _ => x.max(0.0),
    }
}

/// Each shard's bits.
fn bits(y: &DTensor) -> Vec<Vec<u32>> {
    let one = |s: &wgpu_tp::LocalTensor| s.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
    y.shards().iter().map(one).collect()
}

/// `[n, k]` weights (as `wd`) from host `w`, placed `wp`.
fn weight(m: &Mesh, (n, k): (usize, usize), w: &[f32], (wd, wp): (DType, Placement)) -> DTensor {
    let t = DTensor::from_host(m, &[n, k], w, wp).unwrap();
    t.cast(wd).unwrap()
}

/// The two calls `linear_gated` stands for.
fn two_calls(x: &DTensor, g: &DTensor, u: &DTensor, act: Activation) -> DTensor {
    let up = x.linear(u, None, MatmulOptions::default()).unwrap();
    x.linear_activation_mul(g, None, act, &up, MatmulOptions::default())
        .unwrap()
}

#[test]
fn linear_gated_gives_the_two_calls_bits_and_the_f64_product_p1_2_3_4_8() {
    let mut rng = Rng::fresh("linear_gated");
    for p in [1, 2, 3, 4, 8] {
        for (name, m) in meshes(p) {
            for wd in [DType::F32, DType::BF16] {
                // Ragged columns; K of whole vec8s, then neither vec4s nor
                // vec8s; 8 and 5 rows, then 9 (past the small-M kernel);
                // replicated weights; rows split over the ranks, raggedly.
                let (rep, sh0, col) = (
                    Placement::Replicate,
                    Placement::Shard(0),
                    Placement::Shard(0),
                );
                for (t, n, k, act, xp, wp) in [
                    (1, 3 * p + 2, 24, Activation::Silu, rep, col),
                    (8, 2 * p + 1, 16, Activation::Gelu, rep, col),
                    (5, p + 3, 24, Activation::Silu, rep, col),
                    (1, p + 3, 22, Activation::Silu, rep, col),
                    (9, 2 * p, 8, Activation::Silu, rep, col),
                    (1, 2 * p + 1, 16, Activation::Silu, rep, rep),
                    (3 * p + 1, 7, 16, Activation::Silu, sh0, rep),
                ] {
                    let what = format!("P={p} {name} {wd} t={t} n={n} k={k} {act:?} {xp:?} {wp:?}");
                    let round = |v: Vec<f32>| if wd == DType::BF16 { round_bf16(&v) } else { v };
                    let (gs, us) = (round(rng.vec(n * k)), round(rng.vec(n * k)));
                    let xs = rng.vec(t * k);
                    let x = DTensor::from_host(&m, &[t, k], &xs, xp).unwrap();
                    let (g, u) = (
                        weight(&m, (n, k), &gs, (wd, wp)),
                        weight(&m, (n, k), &us, (wd, wp)),
                    );
                    let y = x.linear_gated((&g, None), (&u, None), act).unwrap();
                    let y2 = two_calls(&x, &g, &u, act);
                    m.synchronize().unwrap();
                    assert_eq!(y.shape(), [t, n], "{what}");
                    assert_eq!(y.placement(), y2.placement(), "{what}");
                    assert_eq!(y.shard_unit(), y2.shard_unit(), "{what}");
                    assert_eq!(bits(&y), bits(&y2), "{what}: against the two calls");
                    let got = y.redistribute(Placement::Replicate).unwrap();
                    let got = got.to_host().unwrap();
                    let (gx, ux) = (
                        gemm(&xs, &gs, t, n, k, false, true),
                        gemm(&xs, &us, t, n, k, false, true),
                    );
                    let want: Vec<f64> = gx
                        .iter()
                        .zip(&ux)
                        .map(|(a, b)| act64(act, *a) * b)
                        .collect();
                    let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
                    let (ga, ua) = (
                        gemm(&abs(&xs), &abs(&gs), t, n, k, false, true),
                        gemm(&abs(&xs), &abs(&us), t, n, k, false, true),
                    );
                    let scale: Vec<f64> = (0..t * n)
                        .map(|i| act64(act, gx[i]).abs() * ua[i] + ux[i].abs() * ga[i])
                        .collect();
                    assert_close_cancelling(&what, &got, &want, &scale, 1e-5);
                }
            }
        }
    }
}

#[test]
fn linear_gated_takes_one_dispatch_for_four_ranks_and_two_calls_otherwise() {
    mesh_env();
    let mut rng = Rng::fresh("linear_gated_dispatches");
    let (t, k, act) = (1, 32, Activation::Silu);
    // Private meshes: a trace counts every kernel on the device.
    let cases: [(usize, DeviceLayout, u64); 5] = [
        (1, DeviceLayout::Simulated, 1),
        (2, DeviceLayout::SharedDevice, 1),
        (4, DeviceLayout::SharedDevice, 1),
        (5, DeviceLayout::SharedDevice, 2),
        (3, DeviceLayout::Simulated, 3),
    ];
    for (p, layout, want_paired) in cases {
        let m = MeshBuilder::new().ranks(p).layout(layout).build().unwrap();
        m.set_poison(true);
        let what = format!("P={p} {layout:?}");
        let n = 4 * p + 3;
        let (g, u) = (rng.vec(n * k), rng.vec(n * k));
        let col = (DType::F32, Placement::Shard(0));
        let (g, u) = (weight(&m, (n, k), &g, col), weight(&m, (n, k), &u, col));
        let xs = rng.vec(t * k);
        let x = DTensor::from_host(&m, &[t, k], &xs, Placement::Replicate).unwrap();
        // Not under WebGPU's limits (8 storage buffers a stage), nor on a GPU.
        let dev = m.ranks()[0].device();
        let paired = !dev.is_gpu() && dev.limits().max_storage_buffers_per_shader_stage >= 20;
        // The two calls: grouped over the ranks of a shared device.
        let shared = p > 1 && layout == DeviceLayout::SharedDevice;
        let grouped = !dev.is_gpu() && dev.limits().max_storage_buffers_per_shader_stage >= 16;
        let two = if grouped && shared {
            (2 * p.div_ceil(4) as u64, 0)
        } else {
            (0, 2 * p as u64)
        };
        let want = if paired { (want_paired, 0) } else { two };
        let (calls, y) =
            traced_gemv_calls(&m, || x.linear_gated((&g, None), (&u, None), act).unwrap());
        assert_eq!(calls, want, "{what}");
        let y2 = two_calls(&x, &g, &u, act);
        assert_eq!(bits(&y), bits(&y2), "{what}");
        // Up of another width: an error, and nothing recorded.
        let bad = weight(&m, (n + p, k), &rng.vec((n + p) * k), col);
        let (calls, err) = traced_gemv_calls(&m, || x.linear_gated((&g, None), (&bad, None), act));
        assert!(err.is_err(), "{what}: up of another width is an error");
        assert_eq!(calls, (0, 0), "{what}: recorded before the error");
        // Partial sums (x and the weights split along K): an error, and
        // nothing recorded; an activation of them is not one of their sum.
        let kp = 4 * p;
        let xk = DTensor::from_host(&m, &[t, kp], &rng.vec(t * kp), Placement::Shard(1)).unwrap();
        let split = (DType::F32, Placement::Shard(1));
        let (gk, uk) = (
            weight(&m, (n, kp), &rng.vec(n * kp), split),
            weight(&m, (n, kp), &rng.vec(n * kp), split),
        );
        let (calls, err) = traced_gemv_calls(&m, || xk.linear_gated((&gk, None), (&uk, None), act));
        assert!(err.is_err(), "{what}: partial sums are an error");
        assert_eq!(calls, (0, 0), "{what}: recorded before the partial error");
        // A bias on either: the two calls (a gate with a bias and a
        // multiplier takes one product a rank).
        let b = DTensor::from_host(&m, &[n], &rng.vec(n), Placement::Shard(0)).unwrap();
        for (bg, bu) in [(Some(&b), None), (None, Some(&b))] {
            let (calls, y) =
                traced_gemv_calls(&m, || x.linear_gated((&g, bg), (&u, bu), act).unwrap());
            let (up_calls, up) =
                traced_gemv_calls(&m, || x.linear(&u, bu, MatmulOptions::default()).unwrap());
            let (gate_calls, y2) = traced_gemv_calls(&m, || {
                x.linear_activation_mul(&g, bg, act, &up, MatmulOptions::default())
                    .unwrap()
            });
            let sum = (up_calls.0 + gate_calls.0, up_calls.1 + gate_calls.1);
            let which = if bg.is_some() { "gate" } else { "up" };
            assert_eq!(calls, sum, "{what}: a bias on {which}");
            assert_eq!(bits(&y), bits(&y2), "{what}: a bias on {which}");
        }
        // On the tape: the two calls, and their gradient of x.
        let dy = rng.vec(t * n);
        let dy = DTensor::from_host(&m, &[t, n], &dy, Placement::Shard(1)).unwrap();
        let grads = [true, false].map(|together| {
            let xr = DTensor::from_host(&m, &[t, k], &xs, Placement::Replicate).unwrap();
            let xr = xr.requires_grad();
            let (calls, y) = traced_gemv_calls(&m, || {
                if together {
                    xr.linear_gated((&g, None), (&u, None), act).unwrap()
                } else {
                    two_calls(&xr, &g, &u, act)
                }
            });
            assert_eq!(calls, two, "{what}: recorded");
            y.backward_with(&dy).unwrap();
            let gx = xr.grad().expect("x's gradient");
            gx.redistribute(Placement::Replicate)
                .unwrap()
                .to_host()
                .unwrap()
        });
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&grads[0]), bits(&grads[1]), "{what}: x's gradient");
    }
}

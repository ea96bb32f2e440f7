//! `DTensor::linears`: several column-parallel layers of one input
//! (attention's q, k and v) in shared small-M dispatches where nothing
//! records them. Each result is the bits `DTensor::linear` gives alone and
//! the f64 product; the dispatches are counted; recording, mixed biases and
//! ranks without rows fall back to one product a layer.

use crate::util::reference::gemm;
use crate::util::{Rng, assert_close_cancelling, mesh_env, meshes, traced_gemv_calls};
use wgpu_tp::{DTensor, DType, DeviceLayout, MatmulOptions, Mesh, MeshBuilder, Placement};

/// One layer's host weight `[n, k]` and bias `[n]`.
struct Layer {
    n: usize,
    w: Vec<f32>,
    b: Option<Vec<f32>>,
}

/// `v` rounded to bf16 (round to nearest even), as the cast stores it.
fn bf16(v: Vec<f32>) -> Vec<f32> {
    v.iter()
        .map(|x| half::bf16::from_f32(*x).to_f32())
        .collect()
}

/// Layers of `ns` rows over `k` columns, weights rounded to `wd`'s values,
/// biases where `bias[i]`.
fn layers(rng: &mut Rng, k: usize, ns: &[usize], bias: &[bool], wd: DType) -> Vec<Layer> {
    ns.iter()
        .zip(bias)
        .map(|(&n, &with)| {
            let w = rng.vec(n * k);
            Layer {
                n,
                w: if wd == DType::BF16 { bf16(w) } else { w },
                b: with.then(|| rng.vec(n)),
            }
        })
        .collect()
}

/// The layers' weights (as `wd`) and biases on `m`, placed `wp` (column
/// parallel: `Shard(0)`).
fn placed(
    m: &Mesh,
    k: usize,
    layers: &[Layer],
    (wd, wp): (DType, Placement),
) -> Vec<(DTensor, Option<DTensor>)> {
    layers
        .iter()
        .map(|l| {
            let w = DTensor::from_host(m, &[l.n, k], &l.w, wp).unwrap();
            let b = (l.b.as_ref()).map(|b| DTensor::from_host(m, &[l.n], b, wp).unwrap());
            (w.cast(wd).unwrap(), b)
        })
        .collect()
}

/// Each shard's bits.
fn bits(y: &DTensor) -> Vec<Vec<u32>> {
    let one = |s: &wgpu_tp::LocalTensor| s.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
    y.shards().iter().map(one).collect()
}

/// `linears` and one `linear` a layer, on `m`.
fn both(m: &Mesh, x: &DTensor, ops: &[(DTensor, Option<DTensor>)]) -> [Vec<DTensor>; 2] {
    let refs: Vec<(&DTensor, Option<&DTensor>)> =
        ops.iter().map(|(w, b)| (w, b.as_ref())).collect();
    let together = x.linears(&refs).unwrap();
    let alone = refs
        .iter()
        .map(|&(w, b)| x.linear(w, b, MatmulOptions::default()).unwrap())
        .collect();
    m.synchronize().unwrap();
    [together, alone]
}

#[test]
fn linears_give_each_layers_bits_and_the_f64_product_p1_2_3_4_8() {
    let mut rng = Rng::fresh("linears");
    for p in [1, 2, 3, 4, 8] {
        // Ragged rows; the last case leaves a rank with none (one by one).
        let mut cases = vec![
            (vec![3 * p + 1, p + 2, 2 * p + 3], vec![false; 3]),
            (vec![2 * p + 5, p, p + 1], vec![true; 3]),
            (vec![p + 3, 2 * p, p + 2], vec![true, false, true]),
            // k and v of one shape: pairs where the ranks share a device
            // (P ≥ 3), after q, then alone.
            (vec![3 * p + 1, p + 2, p + 2], vec![false; 3]),
            (vec![3 * p + 1, p + 2, p + 2], vec![false; 3]),
            (vec![2 * p + 3, 2 * p + 3], vec![false; 2]),
        ];
        if p > 1 {
            cases.push((vec![2 * p, p - 1, p], vec![false; 3]));
        }
        for (name, m) in meshes(p) {
            for wd in [DType::F32, DType::BF16] {
                for (i, (t, (ns, bias))) in
                    [1, 8, 1, 8, 1, 3, 1].into_iter().zip(&cases).enumerate()
                {
                    // K of whole vec8s; once, one of neither vec4s nor vec8s
                    // (one by one). The second case's weights replicated.
                    let (wp, yp) = match i {
                        1 => (Placement::Replicate, Placement::Replicate),
                        _ => (Placement::Shard(0), Placement::Shard(1)),
                    };
                    for k in [24, 22].into_iter().take(if i == 0 { 2 } else { 1 }) {
                        let what = format!("P={p} {name} {wd} t={t} k={k} ns={ns:?} {bias:?}");
                        let ls = layers(&mut rng, k, ns, bias, wd);
                        let xs = rng.vec(t * k);
                        let x = DTensor::from_host(&m, &[t, k], &xs, Placement::Replicate).unwrap();
                        let ops = placed(&m, k, &ls, (wd, wp));
                        let [together, alone] = both(&m, &x, &ops);
                        for ((y, y1), l) in together.iter().zip(&alone).zip(&ls) {
                            assert_eq!(y.shape(), [t, l.n], "{what}");
                            assert_eq!(y.placement(), yp, "{what}");
                            assert_eq!(y.shard_unit(), y1.shard_unit(), "{what}");
                            assert_eq!(bits(y), bits(y1), "{what}: linears against linear");
                            let got = y.redistribute(Placement::Replicate).unwrap();
                            let got = got.to_host().unwrap();
                            let mut want = gemm(&xs, &l.w, t, l.n, k, false, true);
                            if let Some(b) = &l.b {
                                for (i, v) in want.iter_mut().enumerate() {
                                    *v += b[i % l.n] as f64;
                                }
                            }
                            let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
                            let scale = gemm(&abs(&xs), &abs(&l.w), t, l.n, k, false, true);
                            assert_close_cancelling(&what, &got, &want, &scale, 1e-5);
                        }
                    }
                }
            }
        }
    }
}

/// Grouped and one-product small-M dispatches of `linears` on `m`.
fn dispatches(m: &Mesh, x: &DTensor, ops: &[(DTensor, Option<DTensor>)]) -> (u64, u64) {
    let refs: Vec<(&DTensor, Option<&DTensor>)> =
        ops.iter().map(|(w, b)| (w, b.as_ref())).collect();
    let (calls, ys) = traced_gemv_calls(m, || x.linears(&refs).unwrap());
    assert_eq!(ys.len(), ops.len());
    calls
}

#[test]
fn linears_share_dispatches_over_layers_and_ranks_and_not_on_the_tape() {
    mesh_env();
    let mut rng = Rng::fresh("linears_dispatches");
    let (t, k) = (1, 32);
    // Private meshes: a trace counts every kernel on the device.
    // k and v of one shape: at 3 and 4 shared ranks, q grouped and k, v in
    // one paired dispatch.
    let cases: [(usize, DeviceLayout, u64); 6] = [
        (1, DeviceLayout::Simulated, 1),
        (2, DeviceLayout::SharedDevice, 2),
        (3, DeviceLayout::SharedDevice, 2),
        (4, DeviceLayout::SharedDevice, 2),
        (5, DeviceLayout::SharedDevice, 4),
        (3, DeviceLayout::Simulated, 3),
    ];
    for (p, layout, want_grouped) in cases {
        let m = MeshBuilder::new().ranks(p).layout(layout).build().unwrap();
        m.set_poison(true);
        let what = format!("P={p} {layout:?}");
        let ls = layers(&mut rng, k, &[9 * p, 3 * p, 3 * p], &[false; 3], DType::F32);
        let ops = placed(&m, k, &ls, (DType::F32, Placement::Shard(0)));
        let xs = rng.vec(t * k);
        let x = DTensor::from_host(&m, &[t, k], &xs, Placement::Replicate).unwrap();
        // Not under WebGPU's limits (8 storage buffers a stage), nor on a
        // GPU (its products alone take the split-K entry).
        let dev = m.ranks()[0].device();
        let buffers = dev.limits().max_storage_buffers_per_shader_stage;
        let grouped = !dev.is_gpu() && buffers >= 16;
        // Pairs bind 20 (not on GL llvmpipe): q, k and v grouped.
        let on_one = p == 1 || layout == DeviceLayout::SharedDevice;
        let want = if grouped && buffers < 20 {
            (if on_one { (3 * p).div_ceil(4) } else { p } as u64, 0)
        } else if grouped {
            (want_grouped, 0)
        } else {
            (0, 3 * p as u64)
        };
        assert_eq!(dispatches(&m, &x, &ops), want, "{what}");
        // One product a layer: grouped over the ranks of a shared device.
        let shared = grouped && p > 1 && layout == DeviceLayout::SharedDevice;
        let one_by_one = if shared {
            (3 * p.div_ceil(4) as u64, 0)
        } else {
            (0, 3 * p as u64)
        };
        // A layer of another K: an error, and nothing recorded.
        let bad = DTensor::from_host(&m, &[p, k + 4], &rng.vec(p * (k + 4)), Placement::Shard(0));
        let bad = bad.unwrap();
        for x in [x.clone(), x.requires_grad()] {
            m.synchronize().unwrap();
            m.start_trace().unwrap();
            let err = x.linears(&[(&ops[0].0, None), (&bad, None)]);
            m.synchronize().unwrap();
            let kernels = m.stop_trace().unwrap().top_kernels(usize::MAX);
            assert!(err.is_err(), "{what}: a layer of another K is an error");
            assert!(
                kernels.is_empty(),
                "{what}: recorded before the error: {kernels:?}"
            );
        }
        // Mixed biases: one product a layer.
        let mixed = layers(
            &mut rng,
            k,
            &[2 * p, p, p],
            &[true, false, true],
            DType::F32,
        );
        let mixed = placed(&m, k, &mixed, (DType::F32, Placement::Shard(0)));
        assert_eq!(dispatches(&m, &x, &mixed), one_by_one, "{what} mixed");
        // On the tape: one recorded product a layer, and x's gradient is
        // the one `linear` gives.
        let xr = x.requires_grad();
        assert_eq!(dispatches(&m, &xr, &ops), one_by_one, "{what} recorded");
        let (w, b) = (&ops[0].0, ops[0].1.as_ref());
        let n = ls[0].n;
        let dy = rng.vec(t * n);
        let dy = DTensor::from_host(&m, &[t, n], &dy, Placement::Shard(1)).unwrap();
        let grads = [true, false].map(|together| {
            let xr = DTensor::from_host(&m, &[t, k], &xs, Placement::Replicate).unwrap();
            let xr = xr.requires_grad();
            let y = if together {
                xr.linears(&[(w, b), (&ops[1].0, None)]).unwrap().remove(0)
            } else {
                xr.linear(w, b, MatmulOptions::default()).unwrap()
            };
            y.backward_with(&dy).unwrap();
            let g = xr.grad().expect("x's gradient");
            g.redistribute(Placement::Replicate)
                .unwrap()
                .to_host()
                .unwrap()
        });
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&grads[0]), bits(&grads[1]), "{what}: x's gradient");
    }
}

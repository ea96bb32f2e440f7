//! A row-parallel layer's bias and the block's residual in one kernel:
//! `kernels::add_row_add`, `DTensor::add_row_add` and
//! `RowParallelLinear::forward_residual` against f64 and bit for bit against
//! the two steps they replace (`add_row`, then `add`), forward and backward,
//! at P = 1, 2, 3, 4, 8 on both transports with ragged sizes; the layer's
//! fallbacks (no bias, sequence parallelism, f16 where the adapter has it) give the two steps' bits;
//! bad operands are errors. Decoding on one rank (nothing recorded, up to 8
//! rows) adds the bias and the residual in the product's store: the two
//! steps' bits, f32 or bf16 weights, and no element-wise kernel after.

use super::fd::{Input, add_row, check_vjp};
use crate::util::{Rng, WORLD_SIZES, assert_close, count_lock, counting_meshes, mesh, meshes};
use wgpu_tp::nn::{InitRng, Params, RowParallelConfig, RowParallelLinear};
use wgpu_tp::{DTensor, DType, Error, Placement, ReduceOp, kernels};

/// (T, N): ragged, N off a multiple of 4 and below P = 4, 8.
const SIZES: &[(usize, usize)] = &[(7, 17), (13, 3), (2, 12)];
const TOL: f64 = 1e-5;

#[test]
fn the_kernel_equals_add_row_then_add_bit_for_bit() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("add_row_add kernel");
    for &(rows, cols) in &[(1usize, 1usize), (5, 3), (3, 4), (7, 13), (17, 7), (4, 17)] {
        let (a, b, c) = (rng.vec(rows * cols), rng.vec(cols), rng.vec(rows * cols));
        let ta = r.upload(&[rows, cols], &a).unwrap();
        let tb = r.upload(&[cols], &b).unwrap();
        let tc = r.upload(&[rows, cols], &c).unwrap();
        let got = kernels::add_row_add(&ta, &tb, &tc)
            .unwrap()
            .to_vec()
            .unwrap();
        let two = kernels::add(&tc, &kernels::add_row(&ta, &tb).unwrap()).unwrap();
        assert_eq!(
            got,
            two.to_vec().unwrap(),
            "{rows}x{cols}: the two steps' bits"
        );
        let want: Vec<f64> = (0..rows * cols)
            .map(|i| a[i] as f64 + b[i % cols] as f64 + c[i] as f64)
            .collect();
        assert_close(&format!("add_row_add {rows}x{cols}"), &got, &want, 1e-6);
    }
    let short = r.upload(&[2, 3], &[0.0; 6]).unwrap();
    let (a, b) = (
        r.upload(&[3, 3], &[0.0; 9]).unwrap(),
        r.upload(&[3], &[0.0; 3]).unwrap(),
    );
    assert!(matches!(
        kernels::add_row_add(&a, &b, &short),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn the_op_matches_f64_and_the_two_steps_on_every_placement_p1_2_3_4_8() {
    let mut rng = Rng::fresh("add_row_add");
    let (rep, s0, s1) = (
        Placement::Replicate,
        Placement::Shard(0),
        Placement::Shard(1),
    );
    for &(t, n) in SIZES {
        let (y, b, res) = (rng.vec(t * n), rng.vec(n), rng.vec(t * n));
        let want: Vec<f64> = add_row(&to64(&y), &to64(&b))
            .iter()
            .zip(&res)
            .map(|(v, r)| v + *r as f64)
            .collect();
        for &p in WORLD_SIZES {
            for (transport, m) in meshes(p) {
                for (yp, bp) in [(s1, s0), (rep, rep), (s0, rep)] {
                    let what = format!("{transport} P={p} {t}x{n} y {yp:?} bias {bp:?}");
                    let yd = DTensor::from_host(&m, &[t, n], &y, yp).unwrap();
                    let bd = DTensor::from_host(&m, &[n], &b, bp).unwrap();
                    let rd = DTensor::from_host(&m, &[t, n], &res, yp).unwrap();
                    let z = yd.add_row_add(&bd, &rd).unwrap();
                    assert_eq!((z.placement(), z.shape()), (yp, &[t, n][..]), "{what}");
                    let got = z.to_host().unwrap();
                    assert_close(&what, &got, &want, TOL);
                    let two = rd.add(&yd.add_row(&bd).unwrap()).unwrap();
                    assert_eq!(got, two.to_host().unwrap(), "{what}: the two steps' bits");
                }
            }
        }
    }
}

#[test]
fn the_vjp_matches_finite_differences_p1_2_3_4() {
    let mut rng = Rng::fresh("grad add_row_add");
    let rules = [
        (Placement::Shard(1), Placement::Shard(0)),
        (Placement::Replicate, Placement::Replicate),
        (Placement::Shard(0), Placement::Replicate),
    ];
    for &(t, n) in &SIZES[..2] {
        for p in [1, 2, 3, 4] {
            let m = mesh(p);
            for (yp, bp) in rules {
                let inputs = [
                    Input::new(&mut rng, &[t, n], yp),
                    Input::new(&mut rng, &[n], bp),
                    Input::new(&mut rng, &[t, n], yp),
                ];
                check_vjp(
                    &format!("add_row_add P={p} {t}x{n} y {yp:?} b {bp:?}"),
                    &m,
                    &mut rng,
                    &inputs,
                    &|v| v[0].add_row_add(&v[1], &v[2]),
                    &|v| {
                        let yb = add_row(&v[0], &v[1]);
                        yb.iter().zip(&v[2]).map(|(a, r)| a + r).collect()
                    },
                );
            }
        }
    }
}

#[test]
fn bad_operands_are_errors() {
    let m = mesh(2);
    let (t, n) = (4, 5);
    let rep = Placement::Replicate;
    let y = |pl| DTensor::from_host(&m, &[t, n], &vec![1.0; t * n], pl).unwrap();
    let b = DTensor::from_host(&m, &[n], &vec![0.5; n], rep).unwrap();
    let sum = Placement::Partial(ReduceOp::Sum);
    let e = y(sum).add_row_add(&b, &y(sum)).unwrap_err().to_string();
    assert!(e.contains("Partial(Sum)"), "{e}");
    let e = y(rep)
        .add_row_add(&b, &y(Placement::Shard(0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("placed alike"), "{e}");
    let short = DTensor::from_host(&m, &[t - 1, n], &vec![0.0; (t - 1) * n], rep).unwrap();
    assert!(matches!(
        y(rep).add_row_add(&b, &short),
        Err(Error::ShapeMismatch { .. })
    ));
    if m.ranks()[0].device().has_f16() {
        let half = y(rep).cast(DType::F16).unwrap();
        let e = half.add_row_add(&b.cast(DType::F16).unwrap(), &half);
        assert!(matches!(e, Err(Error::DTypeMismatch { .. })), "{e:?}");
    }
    let z = y(rep).add_row_add(&b, &y(rep)).unwrap().to_host().unwrap();
    assert_eq!(z, vec![2.5; t * n], "still usable");
}

/// The layer: `forward_residual` gives `residual + forward(x)`'s bits, and
/// the same gradients, with and without the fused kernel.
#[test]
fn forward_residual_gives_the_two_steps_bits_and_gradients_p1_2_3_4_8() {
    let mut rng = Rng::fresh("forward_residual");
    let (t, k, n) = (7, 13, 17);
    let (x, res, dy) = (rng.vec(t * k), rng.vec(t * n), rng.vec(t * n));
    // Biases start at zero: a random one shows where it is added.
    let bias_values = rng.vec(n);
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            let f16 = m.ranks()[0].device().has_f16();
            let cases = [
                (true, DType::F32, false),
                (false, DType::F32, false),
                (true, DType::F32, true),
                (true, DType::F16, false),
            ];
            for (bias, dtype, sp) in cases {
                if dtype == DType::F16 && !f16 {
                    continue;
                }
                let what = format!("{transport} P={p} bias {bias} {dtype:?} sp {sp}");
                let mut cfg = RowParallelConfig::new(k, n);
                (cfg.bias, cfg.sequence_parallel, cfg.input_is_parallel) = (bias, sp, sp);
                let mut layer = RowParallelLinear::new(&m, cfg, &mut InitRng::new(5)).unwrap();
                if let Some(b) = layer.bias.as_mut() {
                    b.load_master(&bias_values).unwrap();
                }
                let (xp, yp) = match sp {
                    true => (Placement::Shard(1), Placement::Shard(0)),
                    false => (Placement::Replicate, Placement::Replicate),
                };
                let host = |v: &[f32], shape: &[usize], pl| {
                    let d = DTensor::from_host(&m, shape, v, pl).unwrap();
                    d.cast(dtype).unwrap()
                };
                let (xd, rd, dyd) = (
                    host(&x, &[t, k], xp),
                    host(&res, &[t, n], yp),
                    host(&dy, &[t, n], yp),
                );
                let mut run = |fused: bool| {
                    layer.zero_grad();
                    let (xg, rg) = (xd.detach().requires_grad(), rd.detach().requires_grad());
                    let y = match fused {
                        true => layer.forward_residual(&xg, &rg).unwrap(),
                        false => rg.add(&layer.forward(&xg).unwrap()).unwrap(),
                    };
                    y.backward_with(&dyd).unwrap();
                    let grads: Vec<Vec<f32>> = layer
                        .named_parameters()
                        .iter()
                        .map(|(_, p)| p.master_grad().unwrap().unwrap())
                        .collect();
                    let host = |d: &DTensor| d.cast(DType::F32).unwrap().to_host().unwrap();
                    let dx = host(&xg.grad().unwrap());
                    let dr = host(&rg.grad().unwrap());
                    (host(&y), dx, dr, grads)
                };
                let (fused, two) = (run(true), run(false));
                assert!(fused.0 == two.0, "{what}: forward bits");
                assert!(
                    fused.1 == two.1 && fused.2 == two.2,
                    "{what}: dx, dresidual bits"
                );
                assert!(fused.3 == two.3, "{what}: weight and bias gradient bits");
                if dtype == DType::F32 {
                    let want: Vec<f64> = dy.iter().map(|&v| v as f64).collect();
                    assert_close(&format!("{what} dresidual"), &fused.2, &want, TOL);
                }
            }
        }
    }
}

fn to64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

#[test]
fn decoding_on_one_rank_adds_in_the_products_store_with_the_two_steps_bits() {
    // The trace counts this test's kernels only on meshes no other test uses.
    let _counting = count_lock();
    let mut rng = Rng::fresh("forward_residual one rank");
    let (k, n) = (13, 17);
    for &p in &[1, 2] {
        for (transport, m) in counting_meshes(p) {
            for (t, bias, bf16) in [
                (1, true, false),
                (3, false, true),
                (8, true, true),
                (13, true, false),
            ] {
                let what = format!("{transport} P={p} T={t} bias {bias} bf16 {bf16}");
                let mut cfg = RowParallelConfig::new(k, n);
                cfg.bias = bias;
                let mut layer = RowParallelLinear::new(&m, cfg, &mut InitRng::new(7)).unwrap();
                if let Some(b) = layer.bias.as_mut() {
                    // Biases start at zero: a random one shows where it is added.
                    b.load_master(&rng.vec(n)).unwrap();
                }
                if bf16 {
                    layer.weight.store_as(DType::BF16).unwrap();
                }
                let (x, res) = (rng.vec(t * k), rng.vec(t * n));
                let xd = DTensor::from_host(&m, &[t, k], &x, Placement::Shard(1)).unwrap();
                let rd = DTensor::from_host(&m, &[t, n], &res, Placement::Replicate).unwrap();
                m.start_trace().unwrap();
                let fused = wgpu_tp::no_grad(|| layer.forward_residual(&xd, &rd)).unwrap();
                let trace = m.stop_trace().unwrap();
                let two = wgpu_tp::no_grad(|| rd.add(&layer.forward(&xd)?)).unwrap();
                let got = fused.to_host().unwrap();
                assert!(got == two.to_host().unwrap(), "{what}: the two steps' bits");
                // On one rank, up to 8 rows: nothing after the product.
                let after: u64 = (trace.top_kernels(usize::MAX).iter())
                    .filter(|k| k.name.starts_with("elementwise::"))
                    .map(|k| k.calls)
                    .sum();
                assert_eq!(
                    after == 0,
                    p == 1 && t <= 8,
                    "{what}: {after} element-wise kernels"
                );
                // Against f64 on the weights as kept.
                let w = layer
                    .weight
                    .value
                    .cast(DType::F32)
                    .unwrap()
                    .to_host()
                    .unwrap();
                let b = match bias {
                    true => layer.bias.as_ref().unwrap().value.to_host().unwrap(),
                    false => vec![0.0; n],
                };
                let want: Vec<f64> = (0..t * n)
                    .map(|e| {
                        let (i, j) = (e / n, e % n);
                        let dot: f64 = (0..k)
                            .map(|c| x[i * k + c] as f64 * w[j * k + c] as f64)
                            .sum();
                        dot + b[j] as f64 + res[e] as f64
                    })
                    .collect();
                assert_close(&what, &got, &want, TOL);
            }
        }
    }
}

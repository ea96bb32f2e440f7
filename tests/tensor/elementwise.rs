//! Element-wise operations on `DTensor` (`add`, `scale`, activations and
//! their backward, SiLU included) against f64 on every placement and world
//! size, with ragged shapes (some ranks hold nothing at P = 8); they
//! communicate nothing, keep the placement, and refuse operands whose
//! placements make the shard-by-shard result wrong.

use crate::util::{Rng, WORLD_SIZES, assert_close, count_lock, counting_mesh, mesh, shared_mesh};
use wgpu_tp::kernels::Activation;
use wgpu_tp::{DTensor, Mesh, Placement, ReduceOp};

const SUM: Placement = Placement::Partial(ReduceOp::Sum);
const MAX: Placement = Placement::Partial(ReduceOp::Max);
/// Ragged `[rows, cols]`: 7 and 13 split unevenly; 3 rows leave ranks empty.
const SHAPES: &[[usize; 2]] = &[[7, 13], [3, 17]];

/// A `Partial(op)` tensor whose rank r holds `parts[r]`.
fn partial(m: &Mesh, shape: &[usize], parts: &[Vec<f32>], op: ReduceOp) -> DTensor {
    let shards = m
        .ranks()
        .iter()
        .zip(parts)
        .map(|(r, d)| r.upload(shape, d).unwrap())
        .collect();
    DTensor::from_shards(m, shards, shape, Placement::Partial(op)).unwrap()
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn silu_grad(x: f64) -> f64 {
    let s = 1.0 / (1.0 + (-x).exp());
    s * (1.0 + x * (1.0 - s))
}

fn gelu(x: f64) -> f64 {
    let u = (2.0f64 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
    0.5 * x * (1.0 + u.tanh())
}

fn gelu_grad(x: f64) -> f64 {
    let c = (2.0f64 / std::f64::consts::PI).sqrt();
    let t = (c * (x + 0.044715 * x.powi(3))).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
}

fn act64(act: Activation, x: f64) -> (f64, f64) {
    match act {
        Activation::Gelu => (gelu(x), gelu_grad(x)),
        Activation::Relu => (x.max(0.0), if x > 0.0 { 1.0 } else { 0.0 }),
        Activation::Silu => (silu(x), silu_grad(x)),
    }
}

#[test]
fn add_and_scale_match_f64_on_every_placement_and_communicate_nothing_p1_2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("dtensor_add_scale");
    for &shape in SHAPES {
        let n = shape[0] * shape[1];
        let (a, b) = (rng.vec(n), rng.vec(n));
        for &p in WORLD_SIZES {
            let m = counting_mesh(p);
            m.reset_comm_stats();
            for placement in [
                Placement::Replicate,
                Placement::Shard(0),
                Placement::Shard(1),
            ] {
                let what = format!("P={p} {placement:?} {shape:?}");
                let da = DTensor::from_host(&m, &shape, &a, placement).unwrap();
                let db = DTensor::from_host(&m, &shape, &b, placement).unwrap();
                let sum = da.add(&db).unwrap();
                assert_eq!(sum.placement(), placement, "{what}");
                let want: Vec<f64> = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| *x as f64 + *y as f64)
                    .collect();
                assert_close(&format!("add {what}"), &sum.to_host().unwrap(), &want, 1e-6);
                let scaled = da.scale(-1.5).unwrap();
                assert_eq!(scaled.placement(), placement, "{what}");
                let want: Vec<f64> = a.iter().map(|x| -1.5 * *x as f64).collect();
                assert_close(
                    &format!("scale {what}"),
                    &scaled.to_host().unwrap(),
                    &want,
                    1e-6,
                );
            }
            // Partial(Sum) + Partial(Sum): every rank holds a real term.
            let pa: Vec<Vec<f32>> = (0..p).map(|_| rng.vec(n)).collect();
            let pb: Vec<Vec<f32>> = (0..p).map(|_| rng.vec(n)).collect();
            let (da, db) = (
                partial(&m, &shape, &pa, ReduceOp::Sum),
                partial(&m, &shape, &pb, ReduceOp::Sum),
            );
            let total =
                |parts: &[Vec<f32>], i: usize| parts.iter().map(|v| v[i] as f64).sum::<f64>();
            let sum = da.add(&db).unwrap();
            assert_eq!(sum.placement(), SUM);
            let want: Vec<f64> = (0..n).map(|i| total(&pa, i) + total(&pb, i)).collect();
            assert_close(
                &format!("P={p} Partial(Sum) add"),
                &sum.to_host().unwrap(),
                &want,
                1e-6,
            );
            let want: Vec<f64> = (0..n).map(|i| 0.25 * total(&pa, i)).collect();
            let got = da.scale(0.25).unwrap().to_host().unwrap();
            assert_close(&format!("P={p} Partial(Sum) scale"), &got, &want, 1e-6);
            // Partial(Max) scaled by α ≥ 0 stays the maximum.
            let dm = partial(&m, &shape, &pa, ReduceOp::Max);
            let max = |i: usize| pa.iter().map(|v| v[i] as f64).fold(f64::MIN, f64::max);
            let want: Vec<f64> = (0..n).map(|i| 2.0 * max(i)).collect();
            let got = dm.scale(2.0).unwrap();
            assert_eq!(got.placement(), MAX);
            assert_close(
                &format!("P={p} Partial(Max) scale"),
                &got.to_host().unwrap(),
                &want,
                1e-6,
            );
            assert!(
                m.comm_stats().is_empty(),
                "P={p}: element-wise operations communicate nothing, got {:?}",
                m.comm_stats()
            );
        }
    }
}

#[test]
fn activations_and_backward_match_f64_on_replicate_and_shards_p1_2_3_4_8() {
    let mut rng = Rng::fresh("dtensor_activations");
    for &shape in SHAPES {
        let n = shape[0] * shape[1];
        let mut x: Vec<f32> = rng.vec(n).iter().map(|v| v * 6.0).collect();
        // Saturation must give finite, exact limits (no NaN from exp overflow).
        for (i, v) in [40.0, -40.0, 100.0, -100.0, 0.0].into_iter().enumerate() {
            x[i * 2] = v;
        }
        let dy = rng.vec(n);
        for &p in WORLD_SIZES {
            let m = mesh(p);
            for placement in [
                Placement::Replicate,
                Placement::Shard(0),
                Placement::Shard(1),
            ] {
                let dx = DTensor::from_host(&m, &shape, &x, placement).unwrap();
                let ddy = DTensor::from_host(&m, &shape, &dy, placement).unwrap();
                for act in [Activation::Gelu, Activation::Relu, Activation::Silu] {
                    let what = format!("{act:?} P={p} {placement:?} {shape:?}");
                    let y = dx.activation(act).unwrap();
                    assert_eq!(y.placement(), placement, "{what}");
                    let want: Vec<f64> = x.iter().map(|&v| act64(act, v as f64).0).collect();
                    assert_close(
                        &format!("{what} forward"),
                        &y.to_host().unwrap(),
                        &want,
                        1e-5,
                    );
                    let g = dx.activation_backward(&ddy, act).unwrap();
                    assert_eq!(g.placement(), placement, "{what}");
                    let want: Vec<f64> = x
                        .iter()
                        .zip(&dy)
                        .map(|(&v, &d)| d as f64 * act64(act, v as f64).1)
                        .collect();
                    assert_close(
                        &format!("{what} backward"),
                        &g.to_host().unwrap(),
                        &want,
                        1e-5,
                    );
                }
            }
        }
    }
}

#[test]
fn bad_operands_are_errors_and_leave_the_operands_usable() {
    let mut rng = Rng::fresh("dtensor_elementwise_errors");
    let (m, other) = (mesh(2), shared_mesh(2));
    let a = rng.vec(7 * 5);
    let rep = DTensor::from_host(&m, &[7, 5], &a, Placement::Replicate).unwrap();
    let sh0 = DTensor::from_host(&m, &[7, 5], &a, Placement::Shard(0)).unwrap();
    let sum = DTensor::from_host(&m, &[7, 5], &a, SUM).unwrap();
    let max = DTensor::from_host(&m, &[7, 5], &a, MAX).unwrap();
    let small = DTensor::from_host(&m, &[5, 7], &a, Placement::Replicate).unwrap();
    let elsewhere = DTensor::from_host(&other, &[7, 5], &a, Placement::Replicate).unwrap();
    let ids: Vec<i32> = (0..35).collect();
    let ints = DTensor::from_host_i32(&m, &[7, 5], &ids, Placement::Replicate).unwrap();
    let bad: Vec<(&str, wgpu_tp::Result<DTensor>)> = vec![
        ("Partial(Sum) + Replicate", sum.add(&rep)),
        ("Replicate + Shard(0)", rep.add(&sh0)),
        ("Partial(Max) + Partial(Max)", max.add(&max)),
        ("shapes differ", rep.add(&small)),
        ("meshes differ", rep.add(&elsewhere)),
        ("i32 add", ints.add(&ints)),
        ("i32 scale", ints.scale(2.0)),
        ("NaN scale", rep.scale(f32::NAN)),
        ("Partial(Max) scaled by < 0", max.scale(-1.0)),
        (
            "activation of Partial(Sum)",
            sum.activation(Activation::Silu),
        ),
        (
            "activation of Partial(Max)",
            max.activation(Activation::Relu),
        ),
        ("activation of i32", ints.activation(Activation::Gelu)),
        (
            "backward, placements differ",
            rep.activation_backward(&sh0, Activation::Gelu),
        ),
        (
            "backward of Partial(Sum)",
            sum.activation_backward(&sum, Activation::Gelu),
        ),
        (
            "backward, shapes differ",
            rep.activation_backward(&small, Activation::Silu),
        ),
    ];
    for (what, r) in bad {
        assert!(r.is_err(), "{what} must be an error");
        eprintln!("{what}: {}", r.unwrap_err());
    }
    let want: Vec<f64> = a.iter().map(|v| 2.0 * *v as f64).collect();
    assert_close(
        "after errors",
        &rep.add(&rep).unwrap().to_host().unwrap(),
        &want,
        1e-6,
    );
    assert_close(
        "after errors",
        &sum.add(&sum).unwrap().to_host().unwrap(),
        &want,
        1e-6,
    );
}

//! The Llama family's element-wise ops on the tape, against f64 and central
//! finite differences (`fd`), on both transports:
//! - `DTensor::rotary` with tables from `nn::RopeConfig`, for x `Replicate`,
//!   `Shard(1)` in whole heads (3 heads on 4 and 8 ranks: some hold none) and
//!   `Partial(Sum)`, every world size of `util::WORLD_SIZES`; an incoming
//!   gradient that is a partial sum (a replicated key's share of each rank's
//!   query heads) stays partial through its VJP;
//! - `DTensor::rms_norm_heads` (value, dx, dγ) for x `Replicate` and
//!   `Shard(1)` in whole heads at P = 1..4, dγ a partial sum over ranks where
//!   heads are split or the incoming gradient is partial;
//! - `DTensor::mul` (value and both gradients) on every world size, and the
//!   `kernels::mul` kernel on ragged lengths;
//! - bad operands of all three are errors.

use super::fd::{Input, assert_fd, central_all, check_vjp, wide};
use crate::util::{Rng, WORLD_SIZES, assert_close, mesh, meshes};
use wgpu_tp::nn::RopeConfig;
use wgpu_tp::{DTensor, Mapping, Mesh, Placement, ReduceOp};

const SUM: Placement = Placement::Partial(ReduceOp::Sum);
const BATCH: usize = 2;
const SEQ: usize = 5;
const HEADS: usize = 3;
const HEAD_DIM: usize = 6;
const EPS: f32 = 1e-5;

/// f64 rotation (`rotate_half` layout) of `x` `[BATCH·SEQ, heads·d]` by the
/// tables `[SEQ, d/2]`; `sign` −1 rotates back.
fn host_rotary(x: &[f64], (cos, sin): (&[f32], &[f32]), d: usize, sign: f64) -> Vec<f64> {
    let half = d / 2;
    let seq = cos.len() / half;
    let cols = x.len() / (BATCH * seq);
    let mut y = vec![0.0; x.len()];
    for r in 0..x.len() / cols {
        let t = (r % seq) * half;
        for h in 0..cols / d {
            let base = r * cols + h * d;
            for i in 0..half {
                let (c, s) = (cos[t + i] as f64, sign * sin[t + i] as f64);
                let (x1, x2) = (x[base + i], x[base + half + i]);
                y[base + i] = x1 * c - x2 * s;
                y[base + half + i] = x2 * c + x1 * s;
            }
        }
    }
    y
}

/// f64 RMSNorm of every head (width `d`) of `x` with the shared `γ` `[d]`.
fn host_rms_heads(x: &[f64], gamma: &[f64], d: usize) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for (xs, ys) in x.chunks(d).zip(y.chunks_mut(d)) {
        let ms = xs.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let r = 1.0 / (ms + EPS as f64).sqrt();
        for e in 0..d {
            ys[e] = gamma[e] * xs[e] * r;
        }
    }
    y
}

/// The tables of positions `0..SEQ`, `Replicate` on `m`.
fn tables(m: &Mesh, cfg: &RopeConfig) -> (DTensor, DTensor, Vec<f32>, Vec<f32>) {
    let (cos, sin) = cfg.tables(0..SEQ);
    let shape = [SEQ, cfg.head_dim / 2];
    let up = |t: &[f32]| DTensor::from_host(m, &shape, t, Placement::Replicate).unwrap();
    (up(&cos), up(&sin), cos, sin)
}

/// `x` placed `placement` on `m`: `Shard(1)` in whole heads of `d`;
/// `Partial(Sum)` as random addends on every rank (rank 0 the remainder), so
/// the logical value is their f32 sum, returned with the tensor.
fn place(
    m: &Mesh,
    rng: &mut Rng,
    x: &[f32],
    shape: &[usize],
    placement: Placement,
    d: usize,
) -> (DTensor, Vec<f32>) {
    if placement != SUM || m.size() == 1 {
        let t = DTensor::from_host_in_units(m, shape, x, placement, d).unwrap();
        return (t, x.to_vec());
    }
    let p = m.size();
    let mut parts: Vec<Vec<f32>> = (1..p).map(|_| rng.vec(x.len())).collect();
    let first: Vec<f32> = (0..x.len())
        .map(|i| x[i] - parts.iter().map(|q| q[i]).sum::<f32>())
        .collect();
    parts.insert(0, first);
    let logical: Vec<f32> = (0..x.len())
        .map(|i| parts.iter().map(|q| q[i]).sum::<f32>())
        .collect();
    let shards = m
        .ranks()
        .iter()
        .zip(&parts)
        .map(|(r, q)| r.upload(shape, q).unwrap())
        .collect();
    (
        DTensor::from_shards(m, shards, shape, SUM).unwrap(),
        logical,
    )
}

/// Rotary forward and VJP for x placed `placement` on every world size and
/// both transports: y against f64, dx against finite differences and the
/// f64 inverse rotation, placed like x.
fn check_rotary(label: &str, placement: Placement) {
    let mut rng = Rng::fresh(label);
    let (rows, cols, d) = (BATCH * SEQ, HEADS * HEAD_DIM, HEAD_DIM);
    let cfg = RopeConfig::new(10000.0, d, 64);
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            let (cos, sin, c32, s32) = tables(&m, &cfg);
            let what = format!("P={p} {transport} x {placement:?}");
            let x = rng.vec(rows * cols);
            let (xd, x) = place(&m, &mut rng, &x, &[rows, cols], placement, d);
            let xd = xd.requires_grad();
            let y = xd.rotary(&cos, &sin, d).unwrap();
            assert_eq!(y.placement(), xd.placement(), "{what}: y placed like x");
            assert_eq!(y.shard_unit(), xd.shard_unit(), "{what}");
            let want = host_rotary(&wide(&x), (&c32, &s32), d, 1.0);
            assert_close(&format!("{what}: y"), &y.to_host().unwrap(), &want, 1e-5);
            // dy as fd::check_vjp places it: like y, Replicate for a partial y.
            let dy = rng.vec(rows * cols);
            let dy_at = if placement == SUM {
                Placement::Replicate
            } else {
                placement
            };
            let dyd = DTensor::from_host_in_units(&m, &[rows, cols], &dy, dy_at, d).unwrap();
            y.backward_with(&dyd).unwrap();
            let g = xd.grad().unwrap();
            assert_eq!(g.placement(), xd.placement(), "{what}: dx placed like x");
            let f = |v: &[Vec<f64>]| host_rotary(&v[0], (&c32, &s32), d, 1.0);
            let fd = central_all(&f, &[wide(&x)], &wide(&dy));
            let got = g.to_host().unwrap();
            assert_fd(&format!("{what}: dx"), &got, &fd[0]);
            // The VJP is the inverse rotation.
            let inverse = host_rotary(&wide(&dy), (&c32, &s32), d, -1.0);
            assert_close(&format!("{what}: dx vs inverse"), &got, &inverse, 1e-5);
        }
    }
}

#[test]
fn rotary_and_its_vjp_match_f64_replicated_and_split_in_heads() {
    check_rotary("rotary_fd_replicate", Placement::Replicate);
    check_rotary("rotary_fd_shard", Placement::Shard(1));
}

/// x a partial sum: y is the partial sum of the rotated addends, and (as for
/// `sum_rows`, the `fd::check_vjp` convention) dy arrives `Replicate`, so the
/// gradient of the sum is the inverse rotation of dy once, not once per rank.
#[test]
fn rotary_vjp_of_a_partial_sum_input_matches_f64() {
    check_rotary("rotary_fd_partial", SUM);
}

/// Random addends of `dy` on every rank: a `Partial(Sum)` gradient.
fn partial_dy(m: &Mesh, rng: &mut Rng, dy: &[f32], shape: &[usize]) -> (DTensor, Vec<f32>) {
    place(m, rng, dy, shape, SUM, 1)
}

/// x (`Replicate`) → f → rms_norm_heads → rotary (a Qwen3 key) with an
/// incoming gradient that is a partial sum: both VJPs keep it partial (f's
/// backward refuses anything else), and its reduction is the gradient of
/// the summed `dy`.
#[test]
fn partial_incoming_gradients_stay_partial_through_rotary_and_rms_norm_heads() {
    let mut rng = Rng::fresh("rotary_partial_dy");
    let (rows, cols, d) = (BATCH * SEQ, HEADS * HEAD_DIM, HEAD_DIM);
    let cfg = RopeConfig::new(10000.0, d, 64);
    for &p in &[1, 2, 3, 4] {
        for (transport, m) in meshes(p) {
            let what = format!("P={p} {transport}");
            let (cos, sin, c32, s32) = tables(&m, &cfg);
            let (x, gamma) = (rng.vec(rows * cols), rng.vec(d));
            let xl = DTensor::from_host(&m, &[rows, cols], &x, Placement::Replicate)
                .unwrap()
                .requires_grad();
            let gl = DTensor::from_host(&m, &[d], &gamma, Placement::Replicate)
                .unwrap()
                .requires_grad();
            let (fx, fg) = (
                Mapping::CopyToParallel.forward(&xl).unwrap(),
                Mapping::CopyToParallel.forward(&gl).unwrap(),
            );
            // Rotary alone, then the chain.
            let dy = rng.vec(rows * cols);
            let (dyd, dy) = partial_dy(&m, &mut rng, &dy, &[rows, cols]);
            let y = fx.rotary(&cos, &sin, d).unwrap();
            y.backward_with(&dyd)
                .unwrap_or_else(|e| panic!("{what}: rotary backward: {e}"));
            let g = xl.grad().unwrap();
            let want = host_rotary(&wide(&dy), (&c32, &s32), d, -1.0);
            assert_close(
                &format!("{what}: rotary dx"),
                &g.to_host().unwrap(),
                &want,
                1e-5,
            );

            let xl = xl.detach().requires_grad();
            let fx = Mapping::CopyToParallel.forward(&xl).unwrap();
            let y = fx
                .rms_norm_heads(&fg, EPS, d)
                .unwrap()
                .rotary(&cos, &sin, d)
                .unwrap();
            let f = |v: &[Vec<f64>]| {
                host_rotary(&host_rms_heads(&v[0], &v[1], d), (&c32, &s32), d, 1.0)
            };
            let inputs = [wide(&x), wide(&gamma)];
            assert_close(
                &format!("{what}: y"),
                &y.to_host().unwrap(),
                &f(&inputs),
                1e-5,
            );
            let dy = rng.vec(rows * cols);
            let (dyd, dy) = partial_dy(&m, &mut rng, &dy, &[rows, cols]);
            y.backward_with(&dyd)
                .unwrap_or_else(|e| panic!("{what}: chain backward: {e}"));
            let fd = central_all(&f, &inputs, &wide(&dy));
            assert_fd(
                &format!("{what}: dx"),
                &xl.grad().unwrap().to_host().unwrap(),
                &fd[0],
            );
            assert_fd(
                &format!("{what}: dγ"),
                &gl.grad().unwrap().to_host().unwrap(),
                &fd[1],
            );
        }
    }
}

#[test]
fn rms_norm_heads_value_and_gradients_match_f64_p1_to_4() {
    let mut rng = Rng::fresh("rms_norm_heads_fd");
    let d = HEAD_DIM;
    let (rows, cols) = (BATCH * SEQ, HEADS * d);
    for p in [1, 2, 3, 4] {
        for (transport, m) in meshes(p) {
            for placement in [Placement::Replicate, Placement::Shard(1)] {
                let what = format!("P={p} {transport} x {placement:?}");
                let (x, gamma) = (rng.vec(rows * cols), rng.vec(d));
                let xd = DTensor::from_host_in_units(&m, &[rows, cols], &x, placement, d)
                    .unwrap()
                    .requires_grad();
                let gl = DTensor::from_host(&m, &[d], &gamma, Placement::Replicate)
                    .unwrap()
                    .requires_grad();
                // Split heads give each rank a share of dγ: a partial sum, which f requires.
                let split = placement == Placement::Shard(1) && p > 1;
                let g = if split {
                    Mapping::CopyToParallel.forward(&gl).unwrap()
                } else {
                    gl.clone()
                };
                let y = xd.rms_norm_heads(&g, EPS, d).unwrap();
                assert_eq!(
                    (y.placement(), y.shard_unit()),
                    (xd.placement(), xd.shard_unit()),
                    "{what}: y placed like x"
                );
                let inputs = [wide(&x), wide(&gamma)];
                let f = |v: &[Vec<f64>]| host_rms_heads(&v[0], &v[1], d);
                assert_close(
                    &format!("{what}: y"),
                    &y.to_host().unwrap(),
                    &f(&inputs),
                    1e-5,
                );
                let dy = rng.vec(rows * cols);
                let dyd =
                    DTensor::from_host_in_units(&m, &[rows, cols], &dy, placement, d).unwrap();
                y.backward_with(&dyd)
                    .unwrap_or_else(|e| panic!("{what}: backward: {e}"));
                let fd = central_all(&f, &inputs, &wide(&dy));
                let dx = xd.grad().unwrap();
                assert_eq!(dx.placement(), xd.placement(), "{what}: dx placed like x");
                assert_fd(&format!("{what}: dx"), &dx.to_host().unwrap(), &fd[0]);
                let dg = gl.grad().unwrap();
                assert_eq!(dg.placement(), Placement::Replicate, "{what}: dγ");
                assert_fd(&format!("{what}: dγ"), &dg.to_host().unwrap(), &fd[1]);
            }
        }
    }
}

#[test]
fn mul_value_and_vjp_match_finite_differences_on_every_world_size() {
    let mut rng = Rng::fresh("mul_fd");
    // Ragged: 7·13 = 91 elements (not whole vec4s), split unevenly.
    let shape = [7, 13];
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            for placement in [
                Placement::Replicate,
                Placement::Shard(0),
                Placement::Shard(1),
            ] {
                let what = format!("mul P={p} {transport} {placement:?}");
                let inputs = [
                    Input::new(&mut rng, &shape, placement),
                    Input::new(&mut rng, &shape, placement),
                ];
                let y = check_vjp(&what, &m, &mut rng, &inputs, &|v| v[0].mul(&v[1]), &|v| {
                    v[0].iter().zip(&v[1]).map(|(a, b)| a * b).collect()
                });
                assert_eq!(y.placement(), placement, "{what}");
            }
        }
    }
}

#[test]
fn mul_kernel_matches_f64_on_ragged_lengths() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("mul_kernel");
    for n in [1, 3, 4, 7, 13, 17, 1031] {
        let (a, b) = (rng.vec(n), rng.vec(n));
        let shape = [n];
        let got = wgpu_tp::kernels::mul(
            &r.upload(&shape, &a).unwrap(),
            &r.upload(&shape, &b).unwrap(),
        )
        .unwrap();
        assert_eq!(got.shape(), shape);
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| *x as f64 * *y as f64)
            .collect();
        assert_close(&format!("mul of {n}"), &got.to_vec().unwrap(), &want, 1e-6);
    }
    let a = r.upload(&[7], &[1.0; 7]).unwrap();
    let b = r.upload(&[13], &[1.0; 13]).unwrap();
    assert!(wgpu_tp::kernels::mul(&a, &b).is_err(), "lengths 7 and 13");
    let other = m.ranks()[0].upload_i32(&[7], &[1; 7]).unwrap();
    assert!(wgpu_tp::kernels::mul(&a, &other).is_err(), "f32 times i32");
}

#[test]
fn llama_ops_refuse_bad_operands() {
    let m = mesh(2);
    let d = HEAD_DIM;
    let (rows, cols) = (BATCH * SEQ, HEADS * d);
    let x = vec![0.5; rows * cols];
    let xs = DTensor::from_host_in_units(&m, &[rows, cols], &x, Placement::Shard(1), d).unwrap();
    let cfg = RopeConfig::new(10000.0, d, 64);
    let (cos, sin, c32, _) = tables(&m, &cfg);
    assert!(xs.rotary(&cos, &sin, d).is_ok());
    // Rotary: odd or zero head_dim, tables of the wrong width, placed or
    // shaped wrong, x split along tokens or 1-D.
    assert!(xs.rotary(&cos, &sin, 5).is_err(), "odd head_dim");
    assert!(xs.rotary(&cos, &sin, 0).is_err(), "head_dim 0");
    let (wc, ws) = RopeConfig::new(10000.0, 8, 64).tables(0..SEQ);
    let rep = |t: &[f32], shape: &[usize]| {
        DTensor::from_host(&m, shape, t, Placement::Replicate).unwrap()
    };
    assert!(
        xs.rotary(&rep(&wc, &[SEQ, 4]), &rep(&ws, &[SEQ, 4]), d)
            .is_err(),
        "tables 4 wide for d 6"
    );
    assert!(
        xs.rotary(&cos, &rep(&ws, &[SEQ, 4]), d).is_err(),
        "sin 4 wide"
    );
    assert!(
        xs.rotary(&rep(&c32, &[SEQ * 3]), &sin, d).is_err(),
        "1-D cos"
    );
    let split_cos = DTensor::from_host(&m, &[SEQ, 3], &c32, Placement::Shard(0)).unwrap();
    assert!(xs.rotary(&split_cos, &sin, d).is_err(), "cos Shard(0)");
    let (c4, s4) = cfg.tables(0..4);
    assert!(
        xs.rotary(&rep(&c4, &[4, 3]), &rep(&s4, &[4, 3]), d)
            .is_err(),
        "10 rows of 4 positions"
    );
    let x_tok = DTensor::from_host(&m, &[rows, cols], &x, Placement::Shard(0)).unwrap();
    assert!(x_tok.rotary(&cos, &sin, d).is_err(), "x Shard(0)");
    let x_flat = DTensor::from_host(&m, &[rows * cols], &x, Placement::Replicate).unwrap();
    assert!(x_flat.rotary(&cos, &sin, d).is_err(), "x 1-D");
    let x_int = DTensor::from_host_i32(
        &m,
        &[rows, cols],
        &vec![1; rows * cols],
        Placement::Replicate,
    )
    .unwrap();
    assert!(x_int.rotary(&cos, &sin, d).is_err(), "x i32");

    // rms_norm_heads: head_dim not dividing, weight of the wrong size or
    // placement, x split along tokens or partial, bad eps.
    let w = rep(&[1.0; HEAD_DIM], &[d]);
    assert!(xs.rms_norm_heads(&w, EPS, d).is_ok());
    assert!(
        xs.rms_norm_heads(&w, EPS, 7).is_err(),
        "head_dim 7 of 18 columns"
    );
    assert!(xs.rms_norm_heads(&w, EPS, 0).is_err(), "head_dim 0");
    assert!(
        xs.rms_norm_heads(&rep(&[1.0; 4], &[4]), EPS, d).is_err(),
        "weight [4]"
    );
    let w_split = DTensor::from_host(&m, &[d], &[1.0; HEAD_DIM], Placement::Shard(0)).unwrap();
    assert!(
        xs.rms_norm_heads(&w_split, EPS, d).is_err(),
        "weight Shard(0)"
    );
    assert!(x_tok.rms_norm_heads(&w, EPS, d).is_err(), "x Shard(0)");
    let x_sum = DTensor::from_host(&m, &[rows, cols], &x, SUM).unwrap();
    assert!(x_sum.rms_norm_heads(&w, EPS, d).is_err(), "x Partial(Sum)");
    assert!(xs.rms_norm_heads(&w, -1.0, d).is_err(), "eps −1");
    assert!(xs.rms_norm_heads(&w, f32::NAN, d).is_err(), "eps NaN");

    // mul: shapes, placements, partial sums, dtypes.
    let a = DTensor::from_host(&m, &[rows, cols], &x, Placement::Replicate).unwrap();
    assert!(a.mul(&a).is_ok());
    assert!(a.mul(&x_tok).is_err(), "Replicate times Shard(0)");
    assert!(
        x_sum.mul(&x_sum).is_err(),
        "Partial(Sum) times Partial(Sum)"
    );
    let b = DTensor::from_host(&m, &[cols, rows], &x, Placement::Replicate).unwrap();
    assert!(a.mul(&b).is_err(), "[10, 18] times [18, 10]");
    assert!(a.mul(&x_int).is_err(), "f32 times i32");
    let other_mesh = crate::util::shared_mesh(2);
    let c = DTensor::from_host(&other_mesh, &[rows, cols], &x, Placement::Replicate).unwrap();
    assert!(a.mul(&c).is_err(), "operands on two meshes");
    assert!(xs.rotary(&cos, &sin, d).is_ok(), "usable after the errors");
}

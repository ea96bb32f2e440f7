//! Tensors past one storage binding, stored as row blocks, on devices opened
//! with a 1 KiB binding limit: exact upload / download round trips (every
//! dtype, ragged rows), fills, copies, reshape, and every kernel that runs
//! per block (casts, element-wise ops, optimiser steps, embedding lookup and
//! scatter-add, cross-entropy over token blocks) against an f64 reference with poisoned outputs; a row over
//! the limit and kernels that bind one buffer are errors naming the limit,
//! never panics.

use crate::util::reference::{self, widen};
use crate::util::{Rng, assert_close, limited_mesh};
use wgpu_tp::kernels::optim::{AdamWStep, SgdStep, adamw_step, sgd_step};
use wgpu_tp::kernels::{self, Activation, GemmOptions};
use wgpu_tp::{DType, Error, LocalTensor, Rank};

/// Bytes per binding on the test devices: 256 four-byte elements.
const LIMIT: u64 = 1024;
const TOL: f64 = 1e-6;

/// Ragged shapes past the limit (at 4 bytes per element), and some within it.
const SHAPES: &[&[usize]] = &[
    &[37, 13],
    &[7, 13, 17],
    &[17, 7, 7],
    &[300],
    &[13, 7],
    &[2, 128],
];

fn rank() -> Rank {
    limited_mesh(1, LIMIT, false).ranks()[0].clone()
}

/// Blocks hold whole rows, each within the limit, and add up to the tensor.
fn check_layout(t: &LocalTensor) {
    let bytes = t.len() * t.dtype().size_bytes();
    assert_eq!(t.is_blocked(), bytes > LIMIT as usize, "{:?}", t.shape());
    let mut rows = 0;
    for (b, start) in t.blocks().iter().zip(t.block_row_starts()) {
        assert_eq!(start, rows);
        assert!(!b.is_blocked());
        assert_eq!(b.shape()[1..], t.shape()[1..]);
        // Blocks are sized at 4 bytes per element whatever the dtype.
        let unit = if t.is_blocked() {
            4
        } else {
            t.dtype().size_bytes()
        };
        assert!((b.len() * unit) as u64 <= LIMIT, "block {:?}", b.shape());
        rows += b.shape()[0];
    }
    assert_eq!(rows, t.shape()[0]);
}

#[test]
fn blocked_tensors_round_trip_exactly_in_every_dtype() {
    let r = rank();
    let mut rng = Rng::fresh("blocks-round-trip");
    for &shape in SHAPES {
        let n: usize = shape.iter().product();
        let x = rng.vec(n);
        let t = r.upload(shape, &x).unwrap();
        check_layout(&t);
        assert_eq!(t.to_vec().unwrap(), x, "f32 {shape:?}");
        let ids: Vec<i32> = (0..n).map(|_| rng.next_u64() as i32).collect();
        let ti = r.upload_i32(shape, &ids).unwrap();
        check_layout(&ti);
        assert_eq!(ti.to_vec_i32().unwrap(), ids, "i32 {shape:?}");
        // Several tensors, blocked or not, in one read.
        let both = wgpu_tp::download_many(&[&t, &ti]).unwrap();
        assert_eq!(both[0], bytemuck::cast_slice::<f32, u8>(&x));
        assert_eq!(both[1], bytemuck::cast_slice::<i32, u8>(&ids));
        if r.device().has_f16() {
            let h: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
            let th = r.upload_f16(shape, &h).unwrap();
            check_layout(&th);
            // One shape, one layout, whatever the dtype (where both are blocked).
            let rows = |t: &LocalTensor| t.block_row_starts();
            if th.is_blocked() {
                assert_eq!(rows(&th), rows(&t), "f16 blocks like f32 {shape:?}");
            }
            assert_eq!(th.to_vec_f16().unwrap(), h, "f16 {shape:?}");
            // Casts run per block.
            let wide = kernels::cast(&th, DType::F32).unwrap();
            let back = kernels::cast(&t, DType::F16).unwrap();
            assert_eq!(rows(&back), rows(&t), "a cast keeps its input's blocks");
            let want: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
            assert_eq!(wide.to_vec().unwrap(), want, "f16 -> f32 {shape:?}");
            assert_eq!(back.to_vec_f16().unwrap(), h, "f32 -> f16 {shape:?}");
            assert_eq!(
                kernels::cast(&wide, DType::F16)
                    .unwrap()
                    .to_vec_f16()
                    .unwrap(),
                h
            );
            assert_eq!(th.deep_copy().unwrap().to_vec_f16().unwrap(), h);
        }
        // Fills, zeros and copies.
        for dtype in [DType::F32, DType::I32] {
            let z = r.zeros(shape, dtype).unwrap();
            check_layout(&z);
            assert_eq!(wgpu_tp::download_many(&[&z]).unwrap()[0], vec![0u8; n * 4]);
        }
        let ones = r.filled(shape, DType::F32, 1.0f32.to_bits()).unwrap();
        assert_eq!(ones.to_vec().unwrap(), vec![1.0; n]);
        let copy = t.deep_copy().unwrap();
        check_layout(&copy);
        assert_eq!(copy.to_vec().unwrap(), x);
    }
}

#[test]
fn blocked_reshape_keeps_rows_whole_or_says_why() {
    let r = rank();
    let x = Rng::fresh("blocks-reshape").vec(7 * 13 * 17);
    let t = r.upload(&[7, 13, 17], &x).unwrap();
    let flat = t.reshape(&[7, 221]).unwrap();
    assert!(flat.is_blocked());
    assert_eq!(flat.to_vec().unwrap(), x);
    let rows = t.reshape(&[7 * 13, 17]).unwrap();
    assert_eq!(rows.to_vec().unwrap(), x);
    // Rows of 7·17 would straddle the blocks of 13·17 elements.
    let err = t.reshape(&[13, 7 * 17]).unwrap_err();
    assert!(err.to_string().contains("whole rows"), "{err}");
    assert!(t.reshape(&[7, 13]).is_err());
}

#[test]
fn copies_across_blocks_narrow_and_concat_along_rows() {
    let r = rank();
    let mut rng = Rng::fresh("blocks-copies");
    let (rows, cols) = (37, 13);
    let x = rng.vec(rows * cols);
    let t = r.upload(&[rows, cols], &x).unwrap();
    // Rows 5..30 cross two block boundaries (blocks of 18 rows).
    let part = kernels::narrow(&t, 0, 5, 25).unwrap();
    assert_eq!(part.to_vec().unwrap(), x[5 * cols..30 * cols]);
    let y = rng.vec(11 * cols);
    let u = r.upload(&[11, cols], &y).unwrap();
    let joined = kernels::concat(&[&u, &t, &u], 0).unwrap();
    check_layout(&joined);
    let want: Vec<f32> = [&y[..], &x[..], &y[..]].concat();
    assert_eq!(joined.to_vec().unwrap(), want);
}

#[test]
fn element_wise_ops_and_optimiser_steps_run_per_block() {
    let r = rank();
    let mut rng = Rng::fresh("blocks-elementwise");
    for shape in [&[37usize, 13][..], &[7, 13, 17], &[300]] {
        let n: usize = shape.iter().product();
        let (a, b) = (rng.vec(n), rng.vec(n));
        let (ta, tb) = (r.upload(shape, &a).unwrap(), r.upload(shape, &b).unwrap());
        let what = format!("{shape:?}");
        let got = kernels::axpby(0.5, &ta, -2.0, &tb).unwrap();
        check_layout(&got);
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| 0.5 * x as f64 - 2.0 * y as f64)
            .collect();
        assert_close(&format!("axpby {what}"), &got.to_vec().unwrap(), &want, TOL);
        let sum = kernels::add(&ta, &tb).unwrap().to_vec().unwrap();
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| x as f64 + y as f64)
            .collect();
        assert_close(&format!("add {what}"), &sum, &want, TOL);
        let g = kernels::activation(&ta, Activation::Gelu).unwrap();
        let want: Vec<f64> = a.iter().map(|&x| reference::gelu(x as f64)).collect();
        assert_close(&format!("gelu {what}"), &g.to_vec().unwrap(), &want, 1e-5);
        let dg = kernels::activation_backward(&ta, &tb, Activation::Gelu).unwrap();
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &d)| reference::gelu_grad(x as f64) * d as f64)
            .collect();
        assert_close(&format!("gelu' {what}"), &dg.to_vec().unwrap(), &want, 1e-5);
        // A mismatched layout (same elements, other rows) is an error.
        if shape.len() == 3 {
            let other = r.upload(&[7 * 13, 17], &b).unwrap();
            let flat = ta.reshape(&[7 * 13, 17]).unwrap();
            assert!(kernels::add(&flat, &other).is_err());
        }

        // SGD with momentum, two steps; AdamW, two steps.
        let (w0, g0) = (rng.vec(n), rng.vec(n));
        let (w, grad) = (r.upload(shape, &w0).unwrap(), r.upload(shape, &g0).unwrap());
        let buf = r.zeros(shape, DType::F32).unwrap();
        let spare = [
            &r.zeros(&[1], DType::F32).unwrap(),
            &r.zeros(&[1], DType::F32).unwrap(),
        ];
        let (mut pw, mut pbuf) = (widen(&w0), Vec::new());
        for first in [true, false] {
            let s = SgdStep {
                lr: 0.1,
                momentum: 0.9,
                weight_decay: 0.01,
                first_step: first,
            };
            sgd_step(&w, &grad, Some(&buf), spare, s).unwrap();
            reference::sgd(&mut pw, &mut pbuf, &g0, 0.1, 0.9, 0.01);
        }
        assert_close(&format!("sgd {what}"), &w.to_vec().unwrap(), &pw, TOL);
        let (m, v) = (
            r.zeros(shape, DType::F32).unwrap(),
            r.zeros(shape, DType::F32).unwrap(),
        );
        let (mut pm, mut pv) = (vec![0.0; n], vec![0.0; n]);
        for step in 1..=2 {
            let s = AdamWStep {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
                step,
            };
            adamw_step(&w, &grad, &m, &v, s).unwrap();
            let hp = (0.9, 0.999, 1e-8, 0.01);
            reference::adamw(&mut pw, &mut pm, &mut pv, &g0, step as i32, 0.01, hp);
        }
        assert_close(&format!("adamw {what}"), &w.to_vec().unwrap(), &pw, 1e-5);
        assert_close(&format!("adamw m {what}"), &m.to_vec().unwrap(), &pm, 1e-5);
    }
}

#[test]
fn embedding_lookup_and_scatter_add_run_per_block() {
    let r = rank();
    let mut rng = Rng::fresh("blocks-embedding");
    for (rows, dim, start) in [(37usize, 13usize, 0i64), (41, 7, 17), (17, 17, 5)] {
        let table = rng.vec(rows * dim);
        let t = r.upload(&[rows, dim], &table).unwrap();
        assert!(t.is_blocked());
        // Ids inside and outside this shard's rows, repeated, and negative;
        // as many as keep the lookup's output within one binding.
        let ids: Vec<i32> = (0..LIMIT as usize / 4 / dim)
            .map(|_| rng.below(rows + 2 * start as usize + 4) as i32 - 2)
            .collect();
        let tid = r.upload_i32(&[ids.len()], &ids).unwrap();
        let what = format!("[{rows}, {dim}] from row {start}");
        let got = kernels::embedding_lookup(&t, &tid, start).unwrap();
        let want = reference::embedding_lookup(&table, rows, dim, &ids, start);
        assert_close(
            &format!("lookup {what}"),
            &got.to_vec().unwrap(),
            &want,
            0.0,
        );
        let dout = rng.vec(ids.len() * dim);
        let td = r.upload(&[ids.len(), dim], &dout).unwrap();
        let acc = rng.vec(rows * dim);
        let ta = r.upload(&[rows, dim], &acc).unwrap();
        for accumulate in [None, Some(&ta)] {
            let g = kernels::embedding_backward(&tid, &td, rows, start, accumulate).unwrap();
            check_layout(&g);
            let host_acc = accumulate.map(|_| &acc[..]);
            let want =
                reference::embedding_backward(&ids, &dout, (rows, dim), start, host_acc, None);
            let what = format!("scatter-add {what} acc={}", accumulate.is_some());
            assert_close(&what, &g.to_vec().unwrap(), &want, TOL);
        }
    }
}

#[test]
fn a_row_over_the_limit_is_an_error_naming_it() {
    let r = rank();
    let cols = LIMIT as usize / 4 + 1;
    for err in [
        r.zeros(&[3, cols], DType::F32).unwrap_err(),
        r.upload(&[2, cols], &vec![0.0; 2 * cols]).unwrap_err(),
        // Any dtype.
        r.zeros(&[1, cols], DType::I32).unwrap_err(),
    ] {
        assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("max_storage_buffer_binding_size"), "{msg}");
        assert!(msg.contains("one row"), "{msg}");
    }
    assert_eq!(
        r.upload(&[2], &[1.0, 2.0]).unwrap().to_vec().unwrap(),
        [1.0, 2.0]
    );
}

#[test]
fn kernels_that_bind_one_buffer_refuse_blocked_tensors_with_an_error() {
    let r = rank();
    let x = r.upload(&[37, 13], &vec![0.5; 37 * 13]).unwrap();
    let small = r.upload(&[13, 3], &[0.25; 39]).unwrap();
    let errors = [
        kernels::gemm(&x, &small, GemmOptions::default()).unwrap_err(),
        kernels::transpose(&x).unwrap_err(),
        kernels::sum_rows(&x).unwrap_err(),
        kernels::narrow(&x, 1, 2, 5).unwrap_err(),
    ];
    for err in &errors {
        assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
        assert!(err.to_string().contains("row blocks"), "{err}");
    }
    // A bias row added to a blocked tensor runs per block.
    let bias: Vec<f32> = (0..13).map(|i| i as f32).collect();
    let got = kernels::add_row(&x, &r.upload(&[13], &bias).unwrap()).unwrap();
    let want: Vec<f32> = (0..37 * 13).map(|i| 0.5 + (i % 13) as f32).collect();
    assert_eq!(got.to_vec().unwrap(), want);
    // The device is still usable.
    assert_eq!(
        kernels::add(&small, &small).unwrap().to_vec().unwrap(),
        vec![0.5; 39]
    );
}

#[test]
fn cross_entropy_runs_per_token_block_of_blocked_logits() {
    let r = rank();
    let mut rng = Rng::fresh("blocks-cross-entropy");
    // [37, 13]: blocks of 16 token rows; label smoothing and an ignored row.
    let (t, v) = (37, 13);
    let z = rng.vec(t * v);
    let mut targets: Vec<i32> = (0..t).map(|_| rng.below(v) as i32).collect();
    targets[5] = -100;
    let tz = r.upload(&[t, v], &z).unwrap();
    assert!(tz.is_blocked());
    let tt = r.upload_i32(&[t], &targets).unwrap();
    let opts = kernels::CrossEntropyOptions {
        ignore_index: Some(-100),
        label_smoothing: 0.1,
    };
    let ce = kernels::cross_entropy(&tz, &tt, &opts).unwrap();
    let scale = vec![1.0; t];
    let want = reference::cross_entropy(&z, (v, v), &targets, 0.1, Some(-100), &scale);
    assert_close(
        "blocked cross-entropy loss",
        &ce.loss.to_vec().unwrap(),
        &want.loss,
        1e-5,
    );
    let ones = r.upload(&[t], &vec![1.0; t]).unwrap();
    let dz = kernels::cross_entropy_backward(&tz, &tt, &ce, &ones, &opts).unwrap();
    check_layout(&dz);
    assert_close(
        "blocked cross-entropy grad",
        &dz.to_vec().unwrap(),
        &want.grad,
        1e-5,
    );
}

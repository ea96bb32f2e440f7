//! Mixed precision (run where the adapter has `SHADER_F16`, reported as
//! skipped elsewhere): column- and row-parallel layers fed f16 inputs give
//! f16 outputs and input gradients within f16 rounding of an f64 reference
//! of the f16 operands, and f32 weight/bias gradients within f32's
//! tolerance, for every world size (shared-device mesh; host-staged at
//! P = 1 and 3), plainly and sequence-parallel. The f32 master weights keep
//! updates that f16 weights would round away. The ring overlap refuses f16.

use super::TOL;
use crate::util::reference::{LinearGrads, linear_grads};
use crate::util::{
    Rng, WORLD_SIZES, assert_close, assert_close_f16, f16_meshes, linear_results, mesh,
};
use wgpu_tp::half::f16;
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, Module, Overlap, RowParallelConfig,
    RowParallelLinear, Sgd,
};
use wgpu_tp::{DTensor, DType, Error, Mesh, Placement};

/// Sizes (tokens, in, out): ragged, and one where some ranks hold nothing at P = 8.
const SIZES: &[(usize, usize, usize)] = &[(7, 13, 17), (5, 3, 6)];

fn round(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| f16::from_f32(v).to_f32()).collect()
}

/// The meshes a mixed-precision layer test runs on: the shared-device mesh
/// at every world size (one device compiles the f16 pipelines once), the
/// host-staged one at P = 1 and 3. `None` where f16 is unavailable.
fn f16_layer_meshes(test: &str) -> Option<Vec<(String, Mesh)>> {
    let mut out = Vec::new();
    for &p in WORLD_SIZES {
        let [(host_name, host), (shared_name, shared)] = f16_meshes(p, test)?;
        out.push((format!("{shared_name} P={p}"), shared));
        if p == 1 || p == 3 {
            out.push((format!("{host_name} P={p}"), host));
        }
    }
    Some(out)
}

/// Random `(x, W, b, dy)` for `[t, inp] → [t, out]`, and the f64 reference of
/// the layer on x, W and dy rounded to f16 (the bias stays f32).
fn case(rng: &mut Rng, (t, inp, out): (usize, usize, usize)) -> ([Vec<f32>; 4], LinearGrads) {
    let (x, w, b, dy) = (
        rng.vec(t * inp),
        rng.vec(out * inp),
        rng.vec(out),
        rng.vec(t * out),
    );
    let want = linear_grads(&round(&x), &round(&w), &b, &round(&dy), (t, inp, out));
    ([x, w, b, dy], want)
}

/// y and dx are f16 (within f16 rounding), dW and db f32 (f32 tolerance).
#[track_caller]
fn check(what: &str, y: &DTensor, dx: &DTensor, layer: &dyn Module, want: &LinearGrads) {
    assert_eq!((y.dtype(), dx.dtype()), (DType::F16, DType::F16), "{what}");
    for (name, p) in layer.named_parameters() {
        assert_eq!(p.value.dtype(), DType::F32, "{what}: master {name}");
    }
    let [y, dx, dw, db] = linear_results(y, dx, layer);
    assert_close_f16(&format!("{what}: y"), &y, &want.y);
    assert_close_f16(&format!("{what}: dx"), &dx, &want.dx);
    assert_close(&format!("{what}: dW"), &dw, &want.dw, TOL);
    assert_close(&format!("{what}: db"), &db, &want.db, TOL);
}

#[test]
fn column_parallel_in_f16_matches_f64_every_world_size() {
    let Some(meshes) = f16_layer_meshes("column f16") else {
        return;
    };
    let mut rng = Rng::fresh("column_f16");
    for &size @ (t, inp, out) in SIZES {
        let ([x, w, b, dy], want) = case(&mut rng, size);
        for (i, (kind, m)) in meshes.iter().enumerate() {
            // Sequence parallel on every other mesh; gather_output where plain.
            let sp = i % 2 == 1;
            let mut cfg = ColumnParallelConfig::new(inp, out);
            cfg.sequence_parallel = sp;
            cfg.gather_output = !sp && i % 4 == 0;
            let x_place = if sp {
                Placement::Shard(0)
            } else {
                Placement::Replicate
            };
            let mut layer = ColumnParallelLinear::from_master(m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host_f16(m, &[t, inp], &x, x_place).unwrap();
            let y = layer.forward(&xd).unwrap();
            let dyd = DTensor::from_host_f16(m, &[t, out], &dy, y.placement()).unwrap();
            let dx = layer.backward(&dyd).unwrap();
            assert_eq!(dx.placement(), x_place);
            check(
                &format!("column {kind} sp={sp} {t}x{inp}x{out}"),
                &y,
                &dx,
                &layer,
                &want,
            );
        }
    }
}

#[test]
fn row_parallel_in_f16_matches_f64_every_world_size() {
    let Some(meshes) = f16_layer_meshes("row f16") else {
        return;
    };
    let mut rng = Rng::fresh("row_f16");
    for &size @ (t, inp, out) in SIZES {
        let ([x, w, b, dy], want) = case(&mut rng, size);
        for (i, (kind, m)) in meshes.iter().enumerate() {
            let sp = i % 2 == 1;
            let mut cfg = RowParallelConfig::new(inp, out);
            cfg.sequence_parallel = sp;
            // A parallel input (Shard(1); always with SP) on some meshes, a
            // replicated one scattered on others.
            cfg.input_is_parallel = sp || i % 3 != 0;
            let x_place = if cfg.input_is_parallel {
                Placement::Shard(1)
            } else {
                Placement::Replicate
            };
            let mut layer = RowParallelLinear::from_master(m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host_f16(m, &[t, inp], &x, x_place).unwrap();
            let y = layer.forward(&xd).unwrap();
            let dyd = DTensor::from_host_f16(m, &[t, out], &dy, y.placement()).unwrap();
            let dx = layer.backward(&dyd).unwrap();
            check(
                &format!("row {kind} sp={sp} {t}x{inp}x{out}"),
                &y,
                &dx,
                &layer,
                &want,
            );
        }
    }
}

#[test]
fn f32_masters_keep_updates_f16_weights_would_lose() {
    let Some([(_, m), _]) = f16_meshes(3, "f32 masters") else {
        return;
    };
    let mut rng = Rng::fresh("f16_masters");
    let (t, inp, out) = (7, 13, 17);
    let ([x, w, b, dy], _) = case(&mut rng, (t, inp, out));
    // Weights near 1, so one f16 step (2^-10) dwarfs lr·g.
    let w: Vec<f32> = w.iter().map(|v| 1.0 + 0.25 * v).collect();
    let mut layer =
        ColumnParallelLinear::from_master(&m, ColumnParallelConfig::new(inp, out), &w, Some(&b))
            .unwrap();
    let y = layer
        .forward(&DTensor::from_host_f16(&m, &[t, inp], &x, Placement::Replicate).unwrap())
        .unwrap();
    let dyd = DTensor::from_host_f16(&m, &[t, out], &dy, y.placement()).unwrap();
    layer.backward(&dyd).unwrap();
    let g = layer.weight.master_grad().unwrap().unwrap();
    let lr = 1e-5;
    Sgd::new(lr).step(&mut layer).unwrap();
    let after = layer.master_weight().unwrap();
    let (mut kept, mut f16_lost) = (0, 0);
    for i in 0..w.len() {
        let want = w[i] - lr * g[i];
        // One f32 rounding either way (the kernel may fuse the multiply-add).
        let ulp = f32::EPSILON * w[i].abs();
        assert!(
            (after[i] - want).abs() <= ulp,
            "master {i}: {} vs {want}",
            after[i]
        );
        kept += usize::from(after[i] != w[i]);
        f16_lost += usize::from(f16::from_f32(after[i]) == f16::from_f32(w[i]));
    }
    let n = w.len();
    assert!(kept * 10 >= n * 9, "the f32 masters moved ({kept} of {n})");
    assert!(
        f16_lost * 10 >= n * 9,
        "f16 weights would have lost most updates ({f16_lost} of {n})"
    );
}

#[test]
fn ring_overlap_refuses_f16_and_the_layer_stays_usable() {
    let m = mesh(2);
    if !m.ranks()[0].device().has_f16() {
        eprintln!("[wgpu-tp tests] ring f16: skipped, no SHADER_F16 on this adapter");
        return;
    }
    let (t, inp, out) = (6, 5, 4);
    let mut cfg = ColumnParallelConfig::new(inp, out);
    cfg.sequence_parallel = true;
    cfg.overlap = Overlap::Ring;
    let mut layer = ColumnParallelLinear::new(&m, cfg, &mut wgpu_tp::nn::InitRng::new(3)).unwrap();
    let x = vec![0.5; t * inp];
    let x16 = DTensor::from_host_f16(&m, &[t, inp], &x, Placement::Shard(0)).unwrap();
    match layer.forward(&x16) {
        Err(Error::InvalidArgument { message, .. }) => assert!(message.contains("Ring")),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    let x32 = DTensor::from_host(&m, &[t, inp], &x, Placement::Shard(0)).unwrap();
    let y = layer.forward(&x32).unwrap();
    assert_eq!((y.dtype(), y.shape()), (DType::F32, &[t, out][..]));
}

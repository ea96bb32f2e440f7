//! Sequence-parallel linear layers (tokens split, `Shard(0)`, outside the
//! Column → Row pair), with plain collectives and with the ring overlap, on
//! host-staged and shared-device meshes of every world size and ragged token
//! counts (13 tokens on 8 ranks: some hold 1; 3 tokens on 4 or 8 ranks: some
//! hold none): outputs, input gradients and gathered parameter gradients equal
//! an f64 reference and the non-sequence-parallel layers; communication counts
//! are exact; misconfigurations are clear errors. Backward is the tape's,
//! from the output with x a tracked leaf. (The ring step itself:
//! `comm::ring`; the fused ring products' own VJPs: `tensor::grad_ring`.)

use super::TOL;
use crate::util::reference::{LinearGrads, gemm, linear, linear_grads, sum_rows, widen};
use crate::util::{
    Rng, WORLD_SIZES, assert_close, assert_linear_close, assert_only, count_lock, counting_meshes,
    linear_results, master_grads, mesh, meshes,
};
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, Overlap, RowParallelConfig, RowParallelLinear,
};
use wgpu_tp::{Collective, DTensor, Mesh, Placement};

/// (tokens, in, out): ragged everywhere; 13 tokens leave ranks with 1 token
/// at P = 8, 3 tokens leave ranks with none at P = 4 and 8.
const SIZES: &[(usize, usize, usize)] = &[(13, 7, 10), (3, 5, 6)];

const OVERLAPS: &[Overlap] = &[Overlap::None, Overlap::Ring];

fn column_cfg(inp: usize, out: usize, overlap: Overlap) -> ColumnParallelConfig {
    let mut c = ColumnParallelConfig::new(inp, out);
    c.sequence_parallel = true;
    c.overlap = overlap;
    c
}

fn row_cfg(inp: usize, out: usize, overlap: Overlap) -> RowParallelConfig {
    let mut c = RowParallelConfig::new(inp, out);
    c.sequence_parallel = true;
    c.overlap = overlap;
    c
}

/// The non-sequence-parallel column layer's `[y, dx, dW, db]` on the same mesh.
fn plain_column(
    m: &Mesh,
    (t, inp, out): (usize, usize, usize),
    w: &[f32],
    b: &[f32],
    x: &[f32],
    dy: &[f32],
) -> [Vec<f32>; 4] {
    let l = ColumnParallelLinear::from_master(m, ColumnParallelConfig::new(inp, out), w, Some(b))
        .unwrap();
    let (y, dx) = run(
        m,
        &|x| l.forward(x),
        (x, &[t, inp], Placement::Replicate),
        dy,
    );
    linear_results(&y, &dx, &l)
}

/// `f(x)` with x a tracked leaf, then backward from it with `dy` placed like
/// the output: `(y, dx)`.
fn run(
    m: &Mesh,
    f: &dyn Fn(&DTensor) -> wgpu_tp::Result<DTensor>,
    (x, shape, placement): (&[f32], &[usize], Placement),
    dy: &[f32],
) -> (DTensor, DTensor) {
    let xd = DTensor::from_host(m, shape, x, placement)
        .unwrap()
        .requires_grad();
    let y = f(&xd).unwrap();
    let dyd = DTensor::from_host(m, y.shape(), dy, y.placement()).unwrap();
    y.backward_with(&dyd).unwrap();
    (y, xd.grad().unwrap())
}

#[test]
fn column_sequence_parallel_matches_reference_on_every_world_size_and_transport() {
    let mut rng = Rng::fresh("column_sp");
    for &(t, inp, out) in SIZES {
        let (w, b, x, dy) = (
            rng.vec(out * inp),
            rng.vec(out),
            rng.vec(t * inp),
            rng.vec(t * out),
        );
        let want = linear_grads(&x, &w, &b, &dy, (t, inp, out));
        for &p in WORLD_SIZES {
            for (kind, m) in meshes(p) {
                let plain =
                    LinearGrads::from_host(&plain_column(&m, (t, inp, out), &w, &b, &x, &dy));
                for &overlap in OVERLAPS {
                    for gather in [false, true] {
                        let what = format!(
                            "column SP (P={p}, {kind}, {overlap:?}, gather={gather}, {t}x{inp}x{out})"
                        );
                        let mut cfg = column_cfg(inp, out, overlap);
                        cfg.gather_output = gather;
                        let l = ColumnParallelLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
                        let x_in = (&x[..], &[t, inp][..], Placement::Shard(0));
                        let (y, dx) = run(&m, &|x| l.forward(x), x_in, &dy);
                        let yp = if gather {
                            Placement::Replicate
                        } else {
                            Placement::Shard(1)
                        };
                        assert_eq!(y.placement(), yp, "{what}");
                        assert_eq!(dx.placement(), Placement::Shard(0), "{what}");
                        let got = linear_results(&y, &dx, &l);
                        assert_linear_close(&what, &got, &want, TOL);
                        assert_linear_close(&format!("{what} vs plain"), &got, &plain, TOL);
                    }
                }
            }
        }
    }
}

#[test]
fn row_sequence_parallel_matches_reference_on_every_world_size_and_transport() {
    let mut rng = Rng::fresh("row_sp");
    for &(t, inp, out) in SIZES {
        let (w, b, x, dy) = (
            rng.vec(out * inp),
            rng.vec(out),
            rng.vec(t * inp),
            rng.vec(t * out),
        );
        let want = linear_grads(&x, &w, &b, &dy, (t, inp, out));
        for &p in WORLD_SIZES {
            for (kind, m) in meshes(p) {
                // The plain row layer on the same mesh.
                let plain = RowParallelLinear::from_master(
                    &m,
                    RowParallelConfig::new(inp, out),
                    &w,
                    Some(&b),
                )
                .unwrap();
                let x_in = (&x[..], &[t, inp][..], Placement::Shard(1));
                let (plain_y, plain_dx) = run(&m, &|x| plain.forward(x), x_in, &dy);
                let plain = LinearGrads::from_host(&linear_results(&plain_y, &plain_dx, &plain));
                for &overlap in OVERLAPS {
                    let what = format!("row SP (P={p}, {kind}, {overlap:?}, {t}x{inp}x{out})");
                    let l = RowParallelLinear::from_master(
                        &m,
                        row_cfg(inp, out, overlap),
                        &w,
                        Some(&b),
                    )
                    .unwrap();
                    let (y, dx) = run(&m, &|x| l.forward(x), x_in, &dy);
                    assert_eq!(y.placement(), Placement::Shard(0), "{what}");
                    assert_eq!(dx.placement(), Placement::Shard(1), "{what}");
                    let got = linear_results(&y, &dx, &l);
                    assert_linear_close(&what, &got, &want, TOL);
                    assert_linear_close(&format!("{what} vs plain"), &got, &plain, TOL);
                    // The replicated bias gradient is bit-identical on every rank.
                    let g = l.bias.as_ref().unwrap().grad().unwrap();
                    let r0 = g.local(0).unwrap().to_vec().unwrap();
                    for r in 1..p {
                        assert_eq!(
                            g.local(r).unwrap().to_vec().unwrap(),
                            r0,
                            "{what} db rank {r}"
                        );
                    }
                }
            }
        }
    }
}

/// Column(SP) → Row(SP) with the hidden activation never gathered: the
/// output and every gradient equal f64 and the plain Megatron MLP.
#[test]
fn column_to_row_sequence_parallel_chain_matches_reference_and_plain_mlp() {
    let mut rng = Rng::fresh("sp_chain");
    for &(t, d, h) in SIZES {
        let (w1, b1, w2, b2) = (rng.vec(h * d), rng.vec(h), rng.vec(d * h), rng.vec(d));
        let (x, dy) = (rng.vec(t * d), rng.vec(t * d));
        // f64 reference, the hidden activation and its gradient kept in f64.
        let hid = linear(&x, &w1, Some(&b1), t, d, h);
        let want_y = linear(&hid, &w2, Some(&b2), t, h, d);
        let dh = gemm(&dy, &w2, t, h, d, false, false);
        let want_dx = gemm(&dh, &w1, t, d, h, false, false);
        let want_dw2 = gemm(&dy, &hid, d, h, t, true, false);
        let want_dw1 = gemm(&dh, &x, h, d, t, true, false);
        let want_db2 = sum_rows(&dy, t, d);
        let want_db1 = sum_rows(&dh, t, h);
        for &p in WORLD_SIZES {
            for (kind, m) in meshes(p) {
                // Plain Megatron MLP on the same mesh.
                let f1 = ColumnParallelLinear::from_master(
                    &m,
                    ColumnParallelConfig::new(d, h),
                    &w1,
                    Some(&b1),
                )
                .unwrap();
                let f2 = RowParallelLinear::from_master(
                    &m,
                    RowParallelConfig::new(h, d),
                    &w2,
                    Some(&b2),
                )
                .unwrap();
                let mlp = |f1: &ColumnParallelLinear, f2: &RowParallelLinear, x: &DTensor| {
                    f2.forward(&f1.forward(x)?)
                };
                let x_in = (&x[..], &[t, d][..], Placement::Replicate);
                let (plain_y, plain_dx) = run(&m, &|x| mlp(&f1, &f2, x), x_in, &dy);
                let plain_y = plain_y.to_host().unwrap();
                let plain_dx = plain_dx.to_host().unwrap();
                for &overlap in OVERLAPS {
                    let what = format!("SP MLP (P={p}, {kind}, {overlap:?}, {t}x{d}x{h})");
                    let fc1 = ColumnParallelLinear::from_master(
                        &m,
                        column_cfg(d, h, overlap),
                        &w1,
                        Some(&b1),
                    )
                    .unwrap();
                    let fc2 =
                        RowParallelLinear::from_master(&m, row_cfg(h, d, overlap), &w2, Some(&b2))
                            .unwrap();
                    let x_in = (&x[..], &[t, d][..], Placement::Shard(0));
                    let (y, dx) = run(&m, &|x| mlp(&fc1, &fc2, x), x_in, &dy);
                    assert_eq!(y.placement(), Placement::Shard(0), "{what}");
                    let yv = y.to_host().unwrap();
                    assert_close(&format!("{what} y"), &yv, &want_y, TOL);
                    assert_close(&format!("{what} y vs plain"), &yv, &widen(&plain_y), TOL);
                    assert_eq!(dx.placement(), Placement::Shard(0), "{what}");
                    let dxv = dx.to_host().unwrap();
                    assert_close(&format!("{what} dx"), &dxv, &want_dx, TOL);
                    assert_close(&format!("{what} dx vs plain"), &dxv, &widen(&plain_dx), TOL);
                    // Gathered parameter gradients, fc1's then fc2's (weight, bias).
                    let got = [master_grads(&fc1), master_grads(&fc2)].concat();
                    let plain = [master_grads(&f1), master_grads(&f2)].concat();
                    let want = [&want_dw1, &want_db1, &want_dw2, &want_db2];
                    let names = ["dW1", "db1", "dW2", "db2"];
                    let order: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
                    assert_eq!(order, ["weight", "bias", "weight", "bias"], "{what}");
                    assert_eq!(plain.len(), 4, "{what}");
                    for (((name, (_, got)), (_, plain)), want) in
                        names.iter().zip(&got).zip(&plain).zip(want)
                    {
                        assert_close(&format!("{what} {name}"), got, want, TOL);
                        let plain = widen(plain);
                        assert_close(&format!("{what} {name} vs plain"), got, &plain, TOL);
                    }
                }
            }
        }
    }
}

/// Column(SP): forward 1 all-gather, backward 1 reduce-scatter; Row(SP):
/// forward 1 reduce-scatter, backward 1 all-gather. With the ring: P − 1
/// SendRecv steps per gather / reduce-scatter and no collective at all.
/// P = 1 communicates nothing in any mode. (The hidden activation is cut
/// into a fresh leaf so each layer's backward runs, and is counted, alone.)
#[test]
fn sequence_parallel_comm_counts_are_exact() {
    let _counting = count_lock();
    let (t, d, h) = (13, 6, 10);
    let mut rng = Rng::fresh("sp_counts");
    let (w1, w2) = (rng.vec(h * d), rng.vec(d * h));
    let (x, dy) = (rng.vec(t * d), rng.vec(t * d));
    for &p in WORLD_SIZES {
        for (kind, m) in counting_meshes(p) {
            for &overlap in OVERLAPS {
                let what = format!("P={p}, {kind}, {overlap:?}");
                let fc1 = ColumnParallelLinear::from_master(
                    &m,
                    column_cfg(d, h, overlap),
                    &w1,
                    Some(&vec![0.0; h]),
                )
                .unwrap();
                let fc2 = RowParallelLinear::from_master(
                    &m,
                    row_cfg(h, d, overlap),
                    &w2,
                    Some(&vec![0.0; d]),
                )
                .unwrap();
                let xd = DTensor::from_host(&m, &[t, d], &x, Placement::Shard(0))
                    .unwrap()
                    .requires_grad();
                let dyd = DTensor::from_host(&m, &[t, d], &dy, Placement::Shard(0)).unwrap();
                let phase = |label: &str, f: &mut dyn FnMut() -> DTensor| {
                    m.reset_comm_stats();
                    let out = f();
                    let stats = m.comm_stats();
                    (out, stats, format!("{what}: {label}"))
                };
                let (hid, s1, l1) = phase("column fwd", &mut || fc1.forward(&xd).unwrap());
                let cut = hid.detach().requires_grad();
                let (y, s2, l2) = phase("row fwd", &mut || fc2.forward(&cut).unwrap());
                let (dh, s3, l3) = phase("row bwd", &mut || {
                    y.backward_with(&dyd).unwrap();
                    cut.grad().unwrap()
                });
                let (dx, s4, l4) = phase("column bwd", &mut || {
                    hid.backward_with(&dh).unwrap();
                    xd.grad().unwrap()
                });
                assert_eq!(dx.placement(), Placement::Shard(0), "{what}");
                if p == 1 {
                    for (s, l) in [(&s1, &l1), (&s2, &l2), (&s3, &l3), (&s4, &l4)] {
                        assert!(s.is_empty(), "{l}: P = 1 communicates nothing, got {s:?}");
                    }
                    continue;
                }
                let steps = p as u64 - 1;
                match overlap {
                    Overlap::None => {
                        assert_only(&s1, Collective::AllGather, 1, &l1);
                        assert_only(&s2, Collective::ReduceScatter, 1, &l2);
                        assert_only(&s3, Collective::AllGather, 1, &l3);
                        assert_only(&s4, Collective::ReduceScatter, 1, &l4);
                    }
                    Overlap::Ring => {
                        for (s, l) in [(&s1, &l1), (&s2, &l2), (&s3, &l3), (&s4, &l4)] {
                            assert_only(s, Collective::SendRecv, steps, l);
                        }
                        // Every step moves each token chunk (gathers of x and dy)
                        // or each running chunk sum (reduce-scatters of y and
                        // dx), all [·, d] f32: tokens × d × 4 bytes per step.
                        let per_step = (t * d * 4) as u64;
                        for (s, l) in [(&s1, &l1), (&s2, &l2), (&s3, &l3), (&s4, &l4)] {
                            assert_eq!(s[&Collective::SendRecv].bytes, steps * per_step, "{l}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn sequence_parallel_misconfigurations_are_clear_errors() {
    let m = mesh(2);
    let w = vec![0.5; 4 * 3];
    // Ring without sequence parallelism.
    let mut c = ColumnParallelConfig::new(3, 4);
    c.overlap = Overlap::Ring;
    let e = ColumnParallelLinear::from_master(&m, c, &w, Some(&[0.0; 4])).unwrap_err();
    assert!(e.to_string().contains("sequence_parallel"), "{e}");
    let mut r = RowParallelConfig::new(4, 3);
    r.overlap = Overlap::Ring;
    assert!(RowParallelLinear::from_master(&m, r, &w, Some(&[0.0; 3])).is_err());
    // Row SP needs a parallel input.
    let mut r = row_cfg(4, 3, Overlap::None);
    r.input_is_parallel = false;
    let e = RowParallelLinear::from_master(&m, r, &w, Some(&[0.0; 3])).unwrap_err();
    assert!(e.to_string().contains("input_is_parallel"), "{e}");
    // A replicated input to a sequence-parallel column layer, in both modes.
    for overlap in OVERLAPS {
        let l =
            ColumnParallelLinear::from_master(&m, column_cfg(3, 4, *overlap), &w, Some(&[0.0; 4]))
                .unwrap();
        let x = DTensor::from_host(&m, &[5, 3], &[1.0; 15], Placement::Replicate).unwrap();
        assert!(l.forward(&x).is_err(), "{overlap:?}: replicated input");
        let x = DTensor::from_host(&m, &[5, 3], &[1.0; 15], Placement::Shard(0)).unwrap();
        l.forward(&x).unwrap();
        // A replicated dy for the Shard(0) output is sliced to its rows, not refused.
        let h = DTensor::from_host(&m, &[5, 4], &[1.0; 20], Placement::Shard(1)).unwrap();
        let dy: Vec<f32> = (0..15).map(|i| i as f32 * 0.25).collect();
        let grads = |dy_place| {
            let row =
                RowParallelLinear::from_master(&m, row_cfg(4, 3, *overlap), &w, Some(&[0.0; 3]))
                    .unwrap();
            let y = row.forward(&h).unwrap();
            let dyd = DTensor::from_host(&m, &[5, 3], &dy, dy_place).unwrap();
            y.backward_with(&dyd).unwrap();
            master_grads(&row)
        };
        assert_eq!(
            grads(Placement::Replicate),
            grads(Placement::Shard(0)),
            "{overlap:?}: replicated dy"
        );
    }
    // Defaults are unchanged: no sequence parallelism, no overlap.
    let c = ColumnParallelConfig::new(3, 4);
    assert!(!c.sequence_parallel && c.overlap == Overlap::None);
    let r = RowParallelConfig::new(4, 3);
    assert!(!r.sequence_parallel && r.overlap == Overlap::None);
}

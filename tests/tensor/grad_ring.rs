//! The sequence-parallel products with their VJPs: `ring_gather_linear`
//! (column), `ring_linear_reduce_scatter` (row) and `reduce_scatter_add_row`
//! (the row layer's plain reduce-scatter with its bias): gradients against
//! central differences of an f64 forward at P = 1, 2, 3, 4 with ragged
//! token counts (3 tokens leave a rank with none at P = 4), with and
//! without a bias; exact communication forward and backward on both
//! transports (the ring's P − 1 steps and nothing else; one reduce-scatter
//! and one all-gather, no all-reduce for the bias); refused inputs.

use super::fd::{Input, add_row, check_vjp, product};
use crate::util::{Rng, assert_only, count_lock, counting_meshes, mesh};
use wgpu_tp::{Collective, DTensor, Placement, ReduceOp};

const SUM: Placement = Placement::Partial(ReduceOp::Sum);
const PS: &[usize] = &[1, 2, 3, 4];
/// (T, K, N): ragged; 3 tokens leave rank 3 of 4 without any.
const SIZES: &[(usize, usize, usize)] = &[(7, 13, 5), (3, 5, 6)];

/// The ring ops with (x, w, bias) placements and the reduce-scatter with its
/// bias, each with or without a bias: its inputs and a closure running it.
type Case = (
    &'static str,
    Vec<Input>,
    Box<dyn Fn(&[DTensor]) -> wgpu_tp::Result<DTensor>>,
);

/// The cases for `x` `[T, K]`, `w` `[N, K]`, partial sums `[T, N]`.
fn cases(rng: &mut Rng, (t, k, n): (usize, usize, usize), with_bias: bool) -> Vec<Case> {
    let (x, w, z, bias_shape) = (&[t, k], &[n, k], &[t, n], &[n]);
    let bias = |rng: &mut Rng, p| Input::new(rng, bias_shape, p);
    let mut column = vec![
        Input::new(rng, x, Placement::Shard(0)),
        Input::new(rng, w, Placement::Shard(0)),
    ];
    let mut row = vec![
        Input::new(rng, x, Placement::Shard(1)),
        Input::new(rng, w, Placement::Shard(1)),
    ];
    if with_bias {
        column.push(bias(rng, Placement::Shard(0)));
        row.push(bias(rng, Placement::Replicate));
    }
    let mut out: Vec<Case> = vec![
        (
            "ring_gather_linear",
            column,
            Box::new(|v: &[DTensor]| v[0].ring_gather_linear(&v[1], v.get(2))),
        ),
        (
            "ring_linear_reduce_scatter",
            row,
            Box::new(|v: &[DTensor]| v[0].ring_linear_reduce_scatter(&v[1], v.get(2))),
        ),
    ];
    if with_bias {
        out.push((
            "reduce_scatter_add_row",
            vec![Input::new(rng, z, SUM), bias(rng, Placement::Replicate)],
            Box::new(|v: &[DTensor]| v[0].reduce_scatter_add_row(&v[1])),
        ));
    }
    out
}

/// The f64 forward of case `name`.
fn host(name: &str, v: &[Vec<f64>], (t, k, n): (usize, usize, usize)) -> Vec<f64> {
    match name {
        "reduce_scatter_add_row" => add_row(&v[0], &v[1]),
        _ => product(&v[0], &v[1], v.get(2).map(Vec::as_slice), (t, k, n), true),
    }
}

#[test]
fn ring_and_scatter_vjps_match_finite_differences_p1_2_3_4() {
    let mut rng = Rng::fresh("grad_ring");
    for &(t, k, n) in SIZES {
        for with_bias in [true, false] {
            for &p in PS {
                let m = mesh(p);
                for (name, inputs, op) in cases(&mut rng, (t, k, n), with_bias) {
                    let what = format!("{name} P={p} {t}x{k}x{n} bias={with_bias}");
                    let y = check_vjp(&what, &m, &mut rng, &inputs, &*op, &|v| {
                        host(name, v, (t, k, n))
                    });
                    let want = match name {
                        "ring_gather_linear" => Placement::Shard(1),
                        _ => Placement::Shard(0),
                    };
                    assert_eq!(y.placement(), want, "{what}");
                }
            }
        }
    }
}

/// Forward and backward each: the ring's P − 1 SendRecv steps and nothing
/// else; the reduce-scatter with its bias one reduce-scatter forward and one
/// all-gather backward (the bias's gradient from the gathered dy).
#[test]
fn ring_and_scatter_ops_communicate_exactly_their_collectives() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("ring_ops_counts");
    let (t, k, n) = (13, 6, 10);
    for p in [2, 3, 4] {
        for (kind, m) in counting_meshes(p) {
            for (name, inputs, op) in cases(&mut rng, (t, k, n), true) {
                let what = format!("{name} P={p} {kind}");
                let xs: Vec<DTensor> = inputs
                    .iter()
                    .map(|i| {
                        DTensor::from_host(&m, &i.shape, &i.values, i.placement)
                            .unwrap()
                            .requires_grad()
                    })
                    .collect();
                m.reset_comm_stats();
                let y = op(&xs).unwrap();
                let fwd = m.comm_stats();
                let dy = DTensor::from_host(&m, y.shape(), &rng.vec(t * n), y.placement()).unwrap();
                m.reset_comm_stats();
                y.backward_with(&dy).unwrap();
                let bwd = m.comm_stats();
                let steps = p as u64 - 1;
                if name == "reduce_scatter_add_row" {
                    assert_only(&fwd, Collective::ReduceScatter, 1, &format!("{what} fwd"));
                    assert_only(&bwd, Collective::AllGather, 1, &format!("{what} bwd"));
                } else {
                    assert_only(&fwd, Collective::SendRecv, steps, &format!("{what} fwd"));
                    assert_only(&bwd, Collective::SendRecv, steps, &format!("{what} bwd"));
                }
                for x in &xs {
                    assert!(x.grad().is_some(), "{what}: every input gets a gradient");
                }
            }
        }
    }
}

#[test]
fn ring_and_scatter_ops_refuse_what_they_cannot_compute() {
    let m = mesh(2);
    let (t, k, n) = (5, 4, 6);
    let up = |shape: &[usize], p| {
        let len = shape.iter().product();
        DTensor::from_host(&m, shape, &vec![0.5; len], p).unwrap()
    };
    let x0 = up(&[t, k], Placement::Shard(0));
    let x1 = up(&[t, k], Placement::Shard(1));
    let w0 = up(&[n, k], Placement::Shard(0));
    let w1 = up(&[n, k], Placement::Shard(1));
    let b0 = up(&[n], Placement::Shard(0));
    let br = up(&[n], Placement::Replicate);
    // Column: x split along tokens, w along N, the bias like w's rows.
    assert!(x1.ring_gather_linear(&w0, None).is_err(), "x Shard(1)");
    assert!(x0.ring_gather_linear(&w1, None).is_err(), "w Shard(1)");
    assert!(
        x0.ring_gather_linear(&w0, Some(&br)).is_err(),
        "bias Replicate"
    );
    assert!(
        x0.ring_gather_linear(&up(&[n, 3], Placement::Shard(0)), None)
            .is_err()
    );
    // Tokens split in units of 2 ([4, 2] rows) are not the ring's chunks ([3, 3]).
    let units = DTensor::from_host_in_units(&m, &[6, k], &[0.5; 24], Placement::Shard(0), 2);
    let err = units.unwrap().ring_gather_linear(&w0, None).unwrap_err();
    assert!(err.to_string().contains("chunks"), "{err}");
    // Row: x and w split along K alike, the bias replicated.
    assert!(
        x0.ring_linear_reduce_scatter(&w1, None).is_err(),
        "x Shard(0)"
    );
    assert!(
        x1.ring_linear_reduce_scatter(&w0, None).is_err(),
        "w Shard(0)"
    );
    assert!(
        x1.ring_linear_reduce_scatter(&w1, Some(&b0)).is_err(),
        "bias Shard(0)"
    );
    // K split [3, 3] against w's K split in units of 2, [4, 2].
    let w_units = DTensor::from_host_in_units(&m, &[n, 6], &[0.5; 36], Placement::Shard(1), 2);
    let err = up(&[t, 6], Placement::Shard(1))
        .ring_linear_reduce_scatter(&w_units.unwrap(), None)
        .unwrap_err();
    assert!(err.to_string().contains("line up"), "{err}");
    // The reduce-scatter takes partial sums and a replicated bias.
    let z = up(&[t, n], SUM);
    assert!(
        up(&[t, n], Placement::Replicate)
            .reduce_scatter_add_row(&br)
            .is_err()
    );
    assert!(z.reduce_scatter_add_row(&b0).is_err(), "bias Shard(0)");
    assert!(
        z.reduce_scatter_add_row(&up(&[n + 1], Placement::Replicate))
            .is_err()
    );
    // f16 operands: the ring moves f32 chunks.
    if m.ranks()[0].device().has_f16() {
        let h = x0.cast(wgpu_tp::DType::F16).unwrap();
        let err = h.ring_gather_linear(&w0, None).unwrap_err();
        assert!(err.to_string().contains("f32"), "{err}");
    }
    // The mesh is still usable.
    let y = x0.ring_gather_linear(&w0, Some(&b0)).unwrap();
    assert_eq!(y.to_host().unwrap(), vec![4.0 * 0.25 + 0.5; t * n]);
}

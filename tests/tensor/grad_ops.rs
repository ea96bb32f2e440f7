//! The VJPs of `DTensor::matmul` (every placement rule, both `transpose_w`),
//! `linear` (its bias fused, on every placement that takes one), `add_row`
//! and `sum_rows` (every placement) against central differences of an f64
//! forward, at P = 1, 2, 3, 4 with ragged sizes (some ranks hold no columns
//! or no tokens at P = 4).

use super::fd::{Input, add_row, check_vjp, product};
use crate::util::{Rng, mesh};
use wgpu_tp::{MatmulOptions, Placement, ReduceOp};

const SUM: Placement = Placement::Partial(ReduceOp::Sum);
const PS: &[usize] = &[1, 2, 3, 4];
/// (T, K, N): ragged; K and N below P = 4 in the second.
const SIZES: &[(usize, usize, usize)] = &[(7, 13, 5), (5, 3, 2)];

/// `(x placement, w placement)` of every matmul rule, w's dims by role.
fn rules(transpose_w: bool) -> [(Placement, Placement); 4] {
    let (kd, nd) = if transpose_w { (1, 0) } else { (0, 1) };
    [
        (Placement::Replicate, Placement::Shard(nd)),
        (Placement::Shard(1), Placement::Shard(kd)),
        (Placement::Replicate, Placement::Replicate),
        (Placement::Shard(0), Placement::Replicate),
    ]
}

#[test]
fn matmul_vjp_matches_finite_differences_for_every_rule_p1_2_3_4() {
    let mut rng = Rng::fresh("grad_matmul");
    for &(t, k, n) in SIZES {
        for tw in [false, true] {
            let ws = if tw { [n, k] } else { [k, n] };
            for (xp, wp) in rules(tw) {
                for &p in PS {
                    let what = format!("matmul P={p} {t}x{k}x{n} tw={tw} x {xp:?} w {wp:?}");
                    let inputs = [
                        Input::new(&mut rng, &[t, k], xp),
                        Input::new(&mut rng, &ws, wp),
                    ];
                    check_vjp(
                        &what,
                        &mesh(p),
                        &mut rng,
                        &inputs,
                        &|v| v[0].matmul(&v[1], tw),
                        &|v| product(&v[0], &v[1], None, (t, k, n), tw),
                    );
                }
            }
        }
    }
}

#[test]
fn linear_vjp_matches_finite_differences_with_its_bias_p1_2_3_4() {
    let mut rng = Rng::fresh("grad_linear");
    // (x, w [N, K], bias): column parallel, replicated, token-split x.
    let rules = [
        (
            Placement::Replicate,
            Placement::Shard(0),
            Placement::Shard(0),
        ),
        (
            Placement::Replicate,
            Placement::Replicate,
            Placement::Replicate,
        ),
        (
            Placement::Shard(0),
            Placement::Replicate,
            Placement::Replicate,
        ),
    ];
    for &(t, k, n) in SIZES {
        for (xp, wp, bp) in rules {
            for &p in PS {
                let what = format!("linear P={p} {t}x{k}x{n} x {xp:?} w {wp:?} b {bp:?}");
                let inputs = [
                    Input::new(&mut rng, &[t, k], xp),
                    Input::new(&mut rng, &[n, k], wp),
                    Input::new(&mut rng, &[n], bp),
                ];
                check_vjp(
                    &what,
                    &mesh(p),
                    &mut rng,
                    &inputs,
                    &|v| v[0].linear(&v[1], Some(&v[2]), MatmulOptions::default()),
                    &|v| product(&v[0], &v[1], Some(&v[2]), (t, k, n), true),
                );
            }
        }
    }
}

#[test]
fn add_row_and_sum_rows_vjps_match_finite_differences_p1_2_3_4() {
    let mut rng = Rng::fresh("grad_rows");
    let add_rules = [
        (Placement::Shard(1), Placement::Shard(0)),
        (Placement::Replicate, Placement::Replicate),
        (Placement::Shard(0), Placement::Replicate),
    ];
    for &(t, _, n) in SIZES {
        for &p in PS {
            let m = mesh(p);
            for (yp, bp) in add_rules {
                let what = format!("add_row P={p} {t}x{n} y {yp:?} b {bp:?}");
                let inputs = [
                    Input::new(&mut rng, &[t, n], yp),
                    Input::new(&mut rng, &[n], bp),
                ];
                check_vjp(
                    &what,
                    &m,
                    &mut rng,
                    &inputs,
                    &|v| v[0].add_row(&v[1]),
                    &|v| add_row(&v[0], &v[1]),
                );
            }
            for xp in [
                Placement::Shard(1),
                Placement::Replicate,
                Placement::Shard(0),
                SUM,
            ] {
                let what = format!("sum_rows P={p} {t}x{n} x {xp:?}");
                let inputs = [Input::new(&mut rng, &[t, n], xp)];
                check_vjp(&what, &m, &mut rng, &inputs, &|v| v[0].sum_rows(), &|v| {
                    (0..n)
                        .map(|j| (0..t).map(|i| v[0][i * n + j]).sum())
                        .collect()
                });
            }
        }
    }
}

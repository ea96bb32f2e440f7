//! The VJPs of the element-wise operations (`add`, `scale`, GELU, SiLU and
//! the soft-cap `c·tanh(x/c)`),
//! `narrow` and `redistribute` (each move between placements, its backward
//! the conjugate move) against central differences of an f64 forward, at
//! P = 1, 2, 3, 4 with ragged sizes.

use super::fd::{Input, check_vjp};
use crate::util::reference::gelu;
use crate::util::{Rng, mesh};
use wgpu_tp::Placement;
use wgpu_tp::kernels::Activation;

const PS: &[usize] = &[1, 2, 3, 4];
const PLACES: [Placement; 3] = [
    Placement::Replicate,
    Placement::Shard(0),
    Placement::Shard(1),
];
const SHAPE: [usize; 2] = [7, 5];

#[test]
fn add_scale_and_activations_match_finite_differences_p1_2_3_4() {
    let mut rng = Rng::fresh("grad_elementwise");
    for &p in PS {
        for place in PLACES {
            let m = mesh(p);
            let what = |op: &str| format!("{op} P={p} {place:?}");
            let two = [
                Input::new(&mut rng, &SHAPE, place),
                Input::new(&mut rng, &SHAPE, place),
            ];
            check_vjp(
                &what("add"),
                &m,
                &mut rng,
                &two,
                &|v| v[0].add(&v[1]),
                &|v| v[0].iter().zip(&v[1]).map(|(a, b)| a + b).collect(),
            );
            let one = [Input::new(&mut rng, &SHAPE, place)];
            check_vjp(
                &what("scale"),
                &m,
                &mut rng,
                &one,
                &|v| v[0].scale(-1.5),
                &|v| v[0].iter().map(|a| -1.5 * a).collect(),
            );
            check_vjp(
                &what("gelu"),
                &m,
                &mut rng,
                &one,
                &|v| v[0].activation(Activation::Gelu),
                &|v| v[0].iter().map(|&a| gelu(a)).collect(),
            );
            check_vjp(
                &what("silu"),
                &m,
                &mut rng,
                &one,
                &|v| v[0].activation(Activation::Silu),
                &|v| v[0].iter().map(|&a| a / (1.0 + (-a).exp())).collect(),
            );
            // Gemma 2's logit soft-cap, at a cap the inputs pass.
            check_vjp(
                &what("softcap"),
                &m,
                &mut rng,
                &one,
                &|v| v[0].softcap(0.6),
                &|v| v[0].iter().map(|&a| 0.6 * (a / 0.6).tanh()).collect(),
            );
            // A value used twice: x·x through add of two uses is 2x.
            check_vjp(
                &what("x + x"),
                &m,
                &mut rng,
                &one,
                &|v| v[0].add(&v[0]),
                &|v| v[0].iter().map(|a| 2.0 * a).collect(),
            );
        }
    }
}

#[test]
fn narrow_matches_finite_differences_on_unsplit_dims_p1_2_3_4() {
    let mut rng = Rng::fresh("grad_narrow");
    let (rows, cols) = (SHAPE[0], SHAPE[1]);
    for &p in PS {
        for (place, dim) in [
            (Placement::Replicate, 0),
            (Placement::Shard(1), 0),
            (Placement::Shard(0), 1),
        ] {
            let (start, len) = if dim == 0 { (2, 4) } else { (1, 3) };
            let what = format!("narrow P={p} {place:?} dim {dim}");
            let one = [Input::new(&mut rng, &SHAPE, place)];
            check_vjp(
                &what,
                &mesh(p),
                &mut rng,
                &one,
                &|v| v[0].narrow(dim, start, len),
                &|v| {
                    let mut out = Vec::new();
                    for i in 0..rows {
                        for j in 0..cols {
                            let (k, lo) = if dim == 0 { (i, start) } else { (j, start) };
                            if (lo..lo + len).contains(&k) {
                                out.push(v[0][i * cols + j]);
                            }
                        }
                    }
                    out
                },
            );
        }
    }
}

#[test]
fn redistribute_matches_finite_differences_between_placements_p1_2_3_4() {
    let mut rng = Rng::fresh("grad_redistribute");
    for &p in PS {
        for from in PLACES {
            for to in PLACES {
                let what = format!("redistribute P={p} {from:?} -> {to:?}");
                let one = [Input::new(&mut rng, &SHAPE, from)];
                // The logical value is unchanged, so its gradient is dy, moved back.
                check_vjp(
                    &what,
                    &mesh(p),
                    &mut rng,
                    &one,
                    &|v| v[0].redistribute(to),
                    &|v| v[0].clone(),
                );
            }
        }
    }
}

#[test]
fn softcap_refuses_a_cap_that_is_not_positive_and_partial_sums() {
    let m = mesh(2);
    let x = wgpu_tp::DTensor::from_host(&m, &[2, 3], &[0.5; 6], Placement::Replicate).unwrap();
    for cap in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let e = x.softcap(cap).unwrap_err().to_string();
        assert!(e.contains("cap"), "{cap}: {e}");
    }
    let partial = x
        .redistribute(Placement::Partial(wgpu_tp::ReduceOp::Sum))
        .unwrap();
    assert!(
        partial.softcap(1.0).is_err(),
        "tanh of partial sums is not theirs"
    );
}

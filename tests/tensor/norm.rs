//! `DTensor::layer_norm` (with and without a bias) and `DTensor::rms_norm`:
//! the tape's gradients of x, γ and β against central finite differences of
//! an f64 host forward, at P = 1, 2, 3 with the input `Replicate` and
//! `Shard(0)` (tokens), ragged sizes; the gradients are placed like their
//! tensors. Bad operands are errors.

use super::fd::{assert_fd, central, dot, wide};
use crate::util::{Rng, mesh};
use wgpu_tp::{DTensor, Placement};

const EPS: f32 = 1e-5;
/// (tokens, dim): ragged; 2 tokens leave a rank empty at P = 3.
const SIZES: &[(usize, usize)] = &[(7, 13), (2, 5)];

/// f64 LayerNorm (`centre`) or RMSNorm of the rows of `x` `[t, dim]`.
fn host_norm(x: &[f64], g: &[f64], b: Option<&[f64]>, centre: bool) -> Vec<f64> {
    let dim = g.len();
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(dim) {
        let mu = if centre {
            row.iter().sum::<f64>() / dim as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / dim as f64;
        let rstd = 1.0 / (var + EPS as f64).sqrt();
        for j in 0..dim {
            y.push(g[j] * (row[j] - mu) * rstd + b.map_or(0.0, |b| b[j]));
        }
    }
    y
}

#[test]
fn norm_vjps_match_finite_differences_p1_2_3() {
    let mut rng = Rng::fresh("norm_fd");
    for &(t, dim) in SIZES {
        let x: Vec<f32> = rng.vec(t * dim).iter().map(|v| 2.0 * v + 0.75).collect();
        let g: Vec<f32> = rng.vec(dim).iter().map(|v| 1.0 + 0.5 * v).collect();
        let (b, dy) = (rng.vec(dim), rng.vec(t * dim));
        let (x64, g64, b64, dy64) = (wide(&x), wide(&g), wide(&b), wide(&dy));
        // (LayerNorm?, bias?)
        for (centre, bias) in [(true, true), (true, false), (false, false)] {
            let bias64 = bias.then_some(&b64[..]);
            let dx_fd = central(|x| dot(&dy64, &host_norm(x, &g64, bias64, centre)), &x64);
            let dg_fd = central(|g| dot(&dy64, &host_norm(&x64, g, bias64, centre)), &g64);
            let db_fd = central(
                |b| dot(&dy64, &host_norm(&x64, &g64, Some(b), centre)),
                &b64,
            );
            for p in [1, 2, 3] {
                let m = mesh(p);
                for place in [Placement::Replicate, Placement::Shard(0)] {
                    let what = format!("P={p} [{t}, {dim}] {place:?} centre {centre} bias {bias}");
                    let xd = DTensor::from_host(&m, &[t, dim], &x, place).unwrap();
                    let xd = xd.requires_grad();
                    let rep = |v: &[f32]| {
                        DTensor::from_host(&m, &[dim], v, Placement::Replicate)
                            .unwrap()
                            .requires_grad()
                    };
                    let (gd, bd) = (rep(&g), rep(&b));
                    let y = match (centre, bias) {
                        (true, true) => xd.layer_norm(&gd, Some(&bd), EPS),
                        (true, false) => xd.layer_norm(&gd, None, EPS),
                        _ => xd.rms_norm(&gd, EPS),
                    }
                    .unwrap();
                    assert_eq!(y.placement(), place, "{what}");
                    let dyd = DTensor::from_host(&m, &[t, dim], &dy, place).unwrap();
                    y.backward_with(&dyd).unwrap();
                    let dx = xd.grad().unwrap();
                    assert_eq!(dx.placement(), place, "{what}: dx");
                    assert_fd(&format!("{what}: dx"), &dx.to_host().unwrap(), &dx_fd);
                    let dg = gd.grad().unwrap();
                    assert_eq!(dg.placement(), Placement::Replicate, "{what}: dγ");
                    assert_fd(&format!("{what}: dγ"), &dg.to_host().unwrap(), &dg_fd);
                    match bias {
                        true => {
                            let db = bd.grad().unwrap().to_host().unwrap();
                            assert_fd(&format!("{what}: dβ"), &db, &db_fd);
                        }
                        false => assert!(bd.grad().is_none(), "{what}: unused β"),
                    }
                }
            }
        }
    }
}

#[test]
fn norm_ops_refuse_bad_operands() {
    let m = mesh(2);
    let (t, dim) = (5, 3);
    let x = DTensor::from_host(&m, &[t, dim], &[0.5; 15], Placement::Replicate).unwrap();
    let g = DTensor::from_host(&m, &[dim], &[1.0; 3], Placement::Replicate).unwrap();
    let short = DTensor::from_host(&m, &[2], &[1.0; 2], Placement::Replicate).unwrap();
    let split = DTensor::from_host(&m, &[dim], &[1.0; 3], Placement::Shard(0)).unwrap();
    let cols = DTensor::from_host(&m, &[t, dim], &[0.5; 15], Placement::Shard(1)).unwrap();
    let flat = DTensor::from_host(&m, &[15], &[0.5; 15], Placement::Replicate).unwrap();
    assert!(
        x.layer_norm(&short, None, EPS).is_err(),
        "γ of another size"
    );
    assert!(
        x.layer_norm(&g, Some(&short), EPS).is_err(),
        "β of another size"
    );
    assert!(x.rms_norm(&split, EPS).is_err(), "a split γ");
    assert!(cols.rms_norm(&g, EPS).is_err(), "x split along dim");
    assert!(flat.rms_norm(&g, EPS).is_err(), "1-D x");
    assert!(x.rms_norm(&g, -1.0).is_err(), "negative eps");
    assert!(x.layer_norm(&g, None, f32::NAN).is_err(), "NaN eps");
    let other = mesh(3);
    let g3 = DTensor::from_host(&other, &[dim], &[1.0; 3], Placement::Replicate).unwrap();
    assert!(x.rms_norm(&g3, EPS).is_err(), "γ on another mesh");
    assert!(x.rms_norm(&g, EPS).is_ok(), "usable after the errors");
}

//! Element-wise kernels and activations against an f64 CPU reference.

use crate::util::reference::{gelu, gelu_grad};
use crate::util::{Rng, assert_close, mesh};
use wgpu_tp::kernels::{self, Activation};

#[test]
fn axpby_add_scale_match_f64() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("axpby");
    for &n in &[0usize, 1, 7, 13, 17, 255, 256, 257, 4099] {
        let (a, b) = (rng.vec(n), rng.vec(n));
        let ta = r.upload(&[n], &a).unwrap();
        let tb = r.upload(&[n], &b).unwrap();
        let got = kernels::axpby(0.5, &ta, -2.0, &tb)
            .unwrap()
            .to_vec()
            .unwrap();
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| 0.5 * *x as f64 - 2.0 * *y as f64)
            .collect();
        assert_close("axpby", &got, &want, 1e-6);
        let got = kernels::add(&ta, &tb).unwrap().to_vec().unwrap();
        let want: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| *x as f64 + *y as f64)
            .collect();
        assert_close("add", &got, &want, 1e-6);
        let got = kernels::scale(&ta, 3.0).unwrap().to_vec().unwrap();
        let want: Vec<f64> = a.iter().map(|x| 3.0 * *x as f64).collect();
        assert_close("scale", &got, &want, 1e-6);
    }
}

#[test]
fn activations_and_backward_match_f64() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("activations");
    for &n in &[7usize, 13, 1000] {
        let mut x: Vec<f32> = rng.vec(n).iter().map(|v| v * 6.0).collect();
        x[0] = 40.0; // tanh saturation must not give NaN
        let dy = rng.vec(n);
        let tx = r.upload(&[n], &x).unwrap();
        let tdy = r.upload(&[n], &dy).unwrap();
        let got = kernels::activation(&tx, Activation::Gelu)
            .unwrap()
            .to_vec()
            .unwrap();
        let want: Vec<f64> = x.iter().map(|&v| gelu(v as f64)).collect();
        assert_close("gelu", &got, &want, 1e-5);
        let got = kernels::activation_backward(&tx, &tdy, Activation::Gelu)
            .unwrap()
            .to_vec()
            .unwrap();
        let want: Vec<f64> = x
            .iter()
            .zip(&dy)
            .map(|(&v, &g)| gelu_grad(v as f64) * g as f64)
            .collect();
        assert_close("gelu_backward", &got, &want, 1e-5);
        let got = kernels::activation(&tx, Activation::Relu)
            .unwrap()
            .to_vec()
            .unwrap();
        let want: Vec<f64> = x.iter().map(|&v| (v as f64).max(0.0)).collect();
        assert_close("relu", &got, &want, 1e-6);
        let got = kernels::activation_backward(&tx, &tdy, Activation::Relu)
            .unwrap()
            .to_vec()
            .unwrap();
        let want: Vec<f64> = x
            .iter()
            .zip(&dy)
            .map(|(&v, &g)| if v > 0.0 { g as f64 } else { 0.0 })
            .collect();
        assert_close("relu_backward", &got, &want, 1e-6);
    }
}

#[test]
fn add_row_matches_f64_for_every_row_width() {
    // Widths off and on a multiple of 4 (the kernel's vec4 fast path), and
    // totals that end mid-vec4.
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("add_row");
    for &(rows, cols) in &[
        (1usize, 1usize),
        (5, 3),
        (3, 4),
        (7, 13),
        (2, 8),
        (17, 7),
        (4, 17),
    ] {
        let (a, b) = (rng.vec(rows * cols), rng.vec(cols));
        let ta = r.upload(&[rows, cols], &a).unwrap();
        let tb = r.upload(&[cols], &b).unwrap();
        let got = kernels::add_row(&ta, &tb).unwrap().to_vec().unwrap();
        let want: Vec<f64> = a
            .iter()
            .enumerate()
            .map(|(i, x)| *x as f64 + b[i % cols] as f64)
            .collect();
        assert_close(&format!("add_row {rows}x{cols}"), &got, &want, 1e-6);
    }
}

#[test]
fn shape_and_rank_errors_leave_mesh_usable() {
    let m = mesh(2);
    let a = m.ranks()[0].upload(&[3], &[1.0, 2.0, 3.0]).unwrap();
    let b = m.ranks()[0].upload(&[2], &[1.0, 2.0]).unwrap();
    let c = m.ranks()[1].upload(&[3], &[1.0, 2.0, 3.0]).unwrap();
    assert!(matches!(
        kernels::add(&a, &b),
        Err(wgpu_tp::Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        kernels::add(&a, &c),
        Err(wgpu_tp::Error::RankMismatch { .. })
    ));
    assert!(matches!(
        m.ranks()[0].upload(&[4], &[1.0]),
        Err(wgpu_tp::Error::DataLength { .. })
    ));
    let got = kernels::add(&a, &a).unwrap().to_vec().unwrap();
    assert_eq!(got, vec![2.0, 4.0, 6.0]);
}

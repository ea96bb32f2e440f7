//! `DTensor::dropout` and its VJP: the tape's input gradient for a random
//! `dy` against central finite differences of `x ↦ Σ dy·x·m/(1 − p)` in f64
//! (the mask read off the op at P = 1) on ragged shapes split over 1 to 3
//! ranks every way, bit-equal to masking `dy` with the forward's key; `p = 0`
//! passes the gradient through, `p = 1` gives zeros; f16 gradients stay f16;
//! nothing is communicated.

use super::fd::{assert_fd, central_differences, dot};
use crate::util::reference::widen;
use crate::util::{Rng, count_lock, counting_mesh, f16_meshes, mesh, round_f16};
use wgpu_tp::kernels::PhiloxKey;
use wgpu_tp::{DTensor, DType, Placement};

const KEY: PhiloxKey = PhiloxKey {
    seed: 0x5EED_0000_0000_0007,
    step: (1 << 32) + 3,
    layer: 9,
};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `x·m/(1 − p)` given `m/(1 − p)`, dropped elements +0 as the kernel writes them.
fn apply(x: &[f32], mask: &[f32]) -> Vec<f32> {
    x.iter()
        .zip(mask)
        .map(|(a, &m)| if m == 0.0 { 0.0 } else { a * m })
        .collect()
}

#[test]
fn dropout_vjp_matches_finite_differences_p1_2_3() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("dropout_fd");
    let shape = [7, 13];
    let n = 7 * 13;
    let (x, dy) = (rng.vec(n), rng.vec(n));
    let p = 0.3;
    // m/(1 − p) per logical element, as the op draws it.
    let ones = DTensor::from_host(&mesh(1), &shape, &vec![1.0; n], Placement::Replicate).unwrap();
    let mask = ones.dropout(p, KEY).unwrap().to_host().unwrap();
    assert!(mask.contains(&0.0) && mask.iter().any(|&v| v > 1.0));
    let fd = central_differences(&widen(&x), 1e-3, |x| {
        let y: Vec<f64> = x.iter().zip(&mask).map(|(a, &m)| a * m as f64).collect();
        dot(&widen(&dy), &y)
    });
    let masked_dy = apply(&dy, &mask);
    for size in [1, 2, 3] {
        let m = counting_mesh(size);
        for placement in [
            Placement::Replicate,
            Placement::Shard(0),
            Placement::Shard(1),
        ] {
            let what = format!("P={size} {placement:?}");
            let xd = DTensor::from_host(&m, &shape, &x, placement)
                .unwrap()
                .requires_grad();
            m.reset_comm_stats();
            let y = xd.dropout(p, KEY).unwrap();
            assert_eq!(y.placement(), placement, "{what}");
            y.backward_with(&DTensor::from_host(&m, &shape, &dy, placement).unwrap())
                .unwrap();
            assert!(m.comm_stats().is_empty(), "{what}: no communication");
            let g = xd.grad().unwrap();
            assert_eq!(g.placement(), placement, "{what}");
            let g = g.to_host().unwrap();
            assert_fd(&what, &g, &fd);
            assert_eq!(
                bits(&g),
                bits(&masked_dy),
                "{what}: dy masked by the forward's mask"
            );
        }
    }
}

#[test]
fn p_zero_passes_the_gradient_and_p_one_zeroes_it_p1_3() {
    let mut rng = Rng::fresh("dropout_limits_vjp");
    let (x, dy) = (rng.vec(35), rng.vec(35));
    for size in [1, 3] {
        let m = mesh(size);
        let dyd = DTensor::from_host(&m, &[7, 5], &dy, Placement::Shard(0)).unwrap();
        let xd = DTensor::from_host(&m, &[7, 5], &x, Placement::Shard(0)).unwrap();
        let leaf = xd.requires_grad();
        leaf.dropout(0.0, KEY).unwrap().backward_with(&dyd).unwrap();
        assert_eq!(
            bits(&leaf.grad().unwrap().to_host().unwrap()),
            bits(&dy),
            "p = 0"
        );
        let leaf = xd.requires_grad();
        leaf.dropout(1.0, KEY).unwrap().backward_with(&dyd).unwrap();
        let g = leaf.grad().unwrap().to_host().unwrap();
        assert!(g.iter().all(|v| v.to_bits() == 0), "p = 1");
        for bad in [-0.5, 1.5, f32::NAN] {
            assert!(xd.dropout(bad, KEY).is_err(), "p = {bad}");
        }
    }
}

#[test]
fn f16_gradients_are_masked_in_f32_and_stay_f16() {
    let Some(meshes) = f16_meshes(2, "dropout f16 VJP") else {
        return;
    };
    let mut rng = Rng::fresh("dropout_f16_vjp");
    let (x, dy) = (round_f16(&rng.vec(35)), round_f16(&rng.vec(35)));
    let ones = DTensor::from_host(&mesh(1), &[7, 5], &[1.0; 35], Placement::Replicate).unwrap();
    let mask = ones.dropout(0.5, KEY).unwrap().to_host().unwrap();
    let want = round_f16(&apply(&dy, &mask));
    for (kind, m) in &meshes {
        let xd = DTensor::from_host_f16(m, &[7, 5], &x, Placement::Shard(1))
            .unwrap()
            .requires_grad();
        let y = xd.dropout(0.5, KEY).unwrap();
        assert_eq!(y.dtype(), DType::F16, "{kind}");
        let dyd = DTensor::from_host_f16(m, &[7, 5], &dy, Placement::Shard(1)).unwrap();
        y.backward_with(&dyd).unwrap();
        let g = xd.grad().unwrap();
        assert_eq!(g.dtype(), DType::F16, "{kind}");
        assert_eq!(bits(&g.to_host().unwrap()), bits(&want), "{kind}");
    }
}

//! The tape itself (`src/tensor/autograd`): a value used twice gets the sum
//! of its gradients (against f64), `no_grad` records nothing, and the
//! misuses are errors that change no gradient: backward twice, backward with
//! nothing recorded, backward from a tensor of more than one element, a
//! seed of the wrong shape. A parameter's clone accumulates on its own.

use crate::util::reference::gemm;
use crate::util::{Rng, WORLD_SIZES, assert_close, mesh};
use wgpu_tp::nn::Parameter;
use wgpu_tp::{DTensor, Error, Placement, no_grad};

const TOL: f64 = 1e-5;

/// `x [t, k]` replicated and `w [n, k]` split along n.
fn operands(p: usize, rng: &mut Rng, (t, k, n): (usize, usize, usize)) -> (DTensor, Parameter) {
    let m = mesh(p);
    let x = DTensor::from_host(&m, &[t, k], &rng.vec(t * k), Placement::Replicate).unwrap();
    let w = Parameter::from_master(&m, &[n, k], &rng.vec(n * k), Placement::Shard(0), 1).unwrap();
    (x, w)
}

#[test]
fn a_value_used_twice_gets_the_sum_of_its_gradients_p1_2_3_4_8() {
    let mut rng = Rng::fresh("tape_fan_out");
    let (t, k, n) = (7, 13, 5);
    for &p in WORLD_SIZES {
        let (x, w) = operands(p, &mut rng, (t, k, n));
        let x = x.requires_grad();
        // y = x·wᵀ + (2x)·wᵀ: x and w each feed two products.
        let a = x.matmul(&w.value, true).unwrap();
        let b = x.scale(2.0).unwrap().matmul(&w.value, true).unwrap();
        let y = a.add(&b).unwrap();
        let dy = rng.vec(t * n);
        let dyd = DTensor::from_host(x.mesh(), &[t, n], &dy, Placement::Replicate)
            .unwrap()
            .redistribute(Placement::Shard(1))
            .unwrap();
        y.backward_with(&dyd).unwrap();
        // dx = 3·dy·w, dw = 3·dyᵀ·x.
        let (xh, wh) = (x.to_host().unwrap(), w.master().unwrap());
        let dx: Vec<f64> = gemm(&dy, &wh, t, k, n, false, false)
            .iter()
            .map(|v| 3.0 * v)
            .collect();
        let dw: Vec<f64> = gemm(&dy, &xh, n, k, t, true, false)
            .iter()
            .map(|v| 3.0 * v)
            .collect();
        let what = format!("P={p}");
        assert_close(
            &format!("{what} dx"),
            &x.grad().unwrap().to_host().unwrap(),
            &dx,
            TOL,
        );
        assert_close(
            &format!("{what} dw"),
            &w.master_grad().unwrap().unwrap(),
            &dw,
            TOL,
        );
    }
}

#[test]
fn gradients_accumulate_over_backward_passes_until_zero_grad() {
    let mut rng = Rng::fresh("tape_accumulate");
    let (x, mut w) = operands(3, &mut rng, (5, 4, 7));
    let ones = DTensor::from_host(x.mesh(), &[5, 7], &[1.0; 35], Placement::Shard(1)).unwrap();
    for _ in 0..2 {
        x.matmul(&w.value, true)
            .unwrap()
            .backward_with(&ones)
            .unwrap();
    }
    let twice = w.master_grad().unwrap().unwrap();
    w.zero_grad();
    assert!(w.grad().is_none());
    x.matmul(&w.value, true)
        .unwrap()
        .backward_with(&ones)
        .unwrap();
    let once = w.master_grad().unwrap().unwrap();
    let want: Vec<f64> = once.iter().map(|&g| 2.0 * g as f64).collect();
    assert_close("two passes", &twice, &want, TOL);
}

/// Gradients are summed in place only into buffers nobody else holds: a
/// gradient the caller kept a handle to keeps its value, and once the
/// handle is gone the next pass sums in place and is still right.
#[test]
fn a_gradient_the_caller_holds_keeps_its_value_when_more_is_summed_in() {
    let mut rng = Rng::fresh("tape_held_grad");
    let (x, w) = operands(2, &mut rng, (5, 4, 7));
    let ones = DTensor::from_host(x.mesh(), &[5, 7], &[1.0; 35], Placement::Shard(1)).unwrap();
    let pass = || {
        x.matmul(&w.value, true)
            .unwrap()
            .backward_with(&ones)
            .unwrap()
    };
    pass();
    let once = w.master_grad().unwrap().unwrap();
    let held = w.grad().unwrap();
    let held_before = held.to_host().unwrap();
    pass();
    // Bit for bit: the handle's buffers were not written.
    assert_eq!(held.to_host().unwrap(), held_before);
    let times = |k: f64| once.iter().map(|&g| k * g as f64).collect::<Vec<f64>>();
    assert_close(
        "two passes",
        &w.master_grad().unwrap().unwrap(),
        &times(2.0),
        TOL,
    );
    drop(held);
    pass();
    assert_close(
        "three passes",
        &w.master_grad().unwrap().unwrap(),
        &times(3.0),
        TOL,
    );
}

#[test]
fn no_grad_records_nothing_and_backward_then_says_so() {
    let mut rng = Rng::fresh("tape_no_grad");
    let (x, w) = operands(2, &mut rng, (3, 4, 5));
    let y = no_grad(|| x.matmul(&w.value, true)).unwrap();
    assert!(!y.is_tracked());
    assert!(x.matmul(&w.value, true).unwrap().is_tracked());
    // An untracked input alone records nothing either.
    assert!(!x.scale(2.0).unwrap().is_tracked());
    let seed = DTensor::from_host(x.mesh(), &[3, 5], &[1.0; 15], Placement::Shard(1)).unwrap();
    let err = y.backward_with(&seed).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("nothing was recorded"), "{err}");
    assert!(w.grad().is_none());
}

#[test]
fn backward_twice_is_an_error_that_keeps_the_first_gradients() {
    let mut rng = Rng::fresh("tape_twice");
    let (x, w) = operands(2, &mut rng, (3, 4, 5));
    let loss = x
        .matmul(&w.value, true)
        .unwrap()
        .sum_rows()
        .unwrap()
        .redistribute(Placement::Replicate)
        .unwrap();
    let seed = DTensor::from_host(x.mesh(), &[5], &[1.0; 5], Placement::Replicate).unwrap();
    loss.backward_with(&seed).unwrap();
    let first = w.master_grad().unwrap().unwrap();
    let err = loss.backward_with(&seed).unwrap_err();
    assert!(err.to_string().contains("already ran"), "{err}");
    assert_eq!(w.master_grad().unwrap().unwrap(), first);
}

#[test]
fn backward_needs_a_one_element_loss_and_a_seed_shaped_like_it() {
    let mut rng = Rng::fresh("tape_seed");
    let (x, w) = operands(2, &mut rng, (3, 4, 5));
    let y = x.matmul(&w.value, true).unwrap();
    let err = y.backward().unwrap_err();
    assert!(err.to_string().contains("backward_with"), "{err}");
    let bad = DTensor::from_host(x.mesh(), &[5, 3], &[1.0; 15], Placement::Shard(1)).unwrap();
    assert!(matches!(
        y.backward_with(&bad),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(w.grad().is_none());
    // The graph is still whole: a good seed runs.
    let good = DTensor::from_host(x.mesh(), &[3, 5], &[1.0; 15], Placement::Shard(1)).unwrap();
    y.backward_with(&good).unwrap();
    assert!(w.grad().is_some());
}

#[test]
fn a_clone_of_a_parameter_accumulates_its_own_gradient() {
    let m = mesh(2);
    let w = Parameter::from_master(&m, &[2, 3], &[1.0; 6], Placement::Shard(0), 1).unwrap();
    let c = w.clone();
    assert_eq!(c.id(), w.id());
    let x = DTensor::from_host(&m, &[1, 3], &[1.0, 2.0, 3.0], Placement::Replicate).unwrap();
    let seed = DTensor::from_host(&m, &[1, 2], &[1.0, 1.0], Placement::Shard(1)).unwrap();
    x.matmul(&c.value, true)
        .unwrap()
        .backward_with(&seed)
        .unwrap();
    assert!(w.grad().is_none());
    assert_eq!(
        c.master_grad().unwrap().unwrap(),
        vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    );
}

#[test]
fn set_grad_refuses_a_gradient_shaped_or_placed_unlike_the_value() {
    let m = mesh(2);
    let mut w = Parameter::from_master(&m, &[2, 3], &[1.0; 6], Placement::Shard(0), 1).unwrap();
    let rep = DTensor::from_host(&m, &[2, 3], &[1.0; 6], Placement::Replicate).unwrap();
    assert!(w.set_grad(Some(rep)).is_err());
    let wide = DTensor::from_host(&m, &[3, 3], &[1.0; 9], Placement::Shard(0)).unwrap();
    assert!(matches!(
        w.set_grad(Some(wide)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(w.grad().is_none());
    let ok = DTensor::from_host(&m, &[2, 3], &[2.0; 6], Placement::Shard(0)).unwrap();
    w.set_grad(Some(ok)).unwrap();
    assert_eq!(w.master_grad().unwrap().unwrap(), vec![2.0; 6]);
}

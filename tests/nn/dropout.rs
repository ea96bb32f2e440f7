//! Dropout with a Philox-4x32-10 mask keyed on (seed, step, layer, global
//! element index): a CPU Philox checked against Random123's known answers,
//! and the kernel checked bit for bit against it on every sharding (so P = 1,
//! 2, 3, 4 and 8 give the same mask for one logical tensor); the same key
//! gives the same mask, another step, layer or seed another; the keep rate is
//! within 5σ; backward (the tape) applies the forward's mask; `p = 0` and
//! evaluation are the identity, `p = 1` gives zeros; bad inputs are errors
//! that leave the layer and the graph usable; nothing is communicated.

use crate::util::{Rng, WORLD_SIZES, count_lock, counting_mesh, mesh};
use wgpu_tp::nn::{Dropout, DropoutConfig};
use wgpu_tp::{DTensor, Placement, ReduceOp};

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox-4x32 with 10 rounds (Salmon et al., Random123).
fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = M0 as u64 * c[0] as u64;
        let p1 = M1 as u64 * c[2] as u64;
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

/// The logical tensor's dropout output on the CPU: element g is kept when
/// the first Philox word of (g, layer, step_lo, step_hi) under (seed_lo,
/// seed_hi) is at least ⌊p·2³²⌋, and then scaled by 1/(1 − p) in f32.
fn cpu_dropout(x: &[f32], p: f32, seed: u64, step: u64, layer: u32) -> Vec<f32> {
    let threshold = ((p as f64) * 4_294_967_296.0).floor() as u32;
    let scale = 1.0f32 / (1.0f32 - p);
    let key = [seed as u32, (seed >> 32) as u32];
    x.iter()
        .enumerate()
        .map(|(g, &v)| {
            let ctr = [g as u32, layer, step as u32, (step >> 32) as u32];
            if philox4x32_10(ctr, key)[0] >= threshold {
                v * scale
            } else {
                0.0
            }
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn layer(p: f32, seed: u64, layer: u32) -> Dropout {
    Dropout::new(DropoutConfig { p, seed, layer }).unwrap()
}

#[test]
fn cpu_philox_matches_random123_known_answers() {
    // Random123's kat_vectors, "philox4x32 10": counter, key → output.
    let cases: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        (
            [0; 4],
            [0; 2],
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
        ),
        (
            [u32::MAX; 4],
            [u32::MAX; 2],
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
        ),
        (
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0],
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
        ),
    ];
    for (ctr, key, want) in cases {
        assert_eq!(
            philox4x32_10(ctr, key),
            want,
            "counter {ctr:x?} key {key:x?}"
        );
    }
}

/// Every sharding of a 2-D and a 3-D logical tensor, on every world size,
/// gives exactly the CPU reference's bits: the mask depends only on the
/// logical index. Seed and step use their high words too.
#[test]
fn mask_is_bit_exact_and_independent_of_sharding_p1_2_3_4_8() {
    let mut rng = Rng::fresh("dropout_sharding");
    let (seed, step, id) = (0xDEAD_BEEF_0123_4567, (1u64 << 32) + 5, 7);
    for shape in [vec![13, 17], vec![3, 7, 5]] {
        let n: usize = shape.iter().product();
        let x = rng.vec(n);
        let want = bits(&cpu_dropout(&x, 0.3, seed, step, id));
        let kept = want.iter().filter(|&&b| b != 0).count();
        assert!(
            kept > 0 && kept < n,
            "a mask that drops some and keeps some"
        );
        let mut placements = vec![Placement::Replicate];
        placements.extend((0..shape.len()).map(Placement::Shard));
        for &p in WORLD_SIZES {
            let m = mesh(p);
            for &placement in &placements {
                let what = format!("P={p} {placement:?} {shape:?}");
                let mut d = layer(0.3, seed, id);
                d.set_step(step);
                let xd = DTensor::from_host(&m, &shape, &x, placement).unwrap();
                let y = d.forward(&xd).unwrap();
                assert_eq!(y.placement(), placement, "{what}");
                assert_eq!(bits(&y.to_host().unwrap()), want, "{what}");
                if placement == Placement::Replicate {
                    // Every rank holds the same masked tensor.
                    for s in y.shards() {
                        assert_eq!(bits(&s.to_vec().unwrap()), want, "{what}: a replica");
                    }
                }
            }
            // A partial sum gets the same mask on every term.
            let parts: Vec<Vec<f32>> = (0..p).map(|_| rng.vec(n)).collect();
            let shards = m
                .ranks()
                .iter()
                .zip(&parts)
                .map(|(r, v)| r.upload(&shape, v).unwrap())
                .collect();
            let sum = Placement::Partial(ReduceOp::Sum);
            let xd = DTensor::from_shards(&m, shards, &shape, sum).unwrap();
            let mut d = layer(0.3, seed, id);
            d.set_step(step);
            let y = d.forward(&xd).unwrap().to_host().unwrap();
            let mask = cpu_dropout(&vec![1.0; n], 0.3, seed, step, id);
            for (i, (&yi, &mi)) in y.iter().zip(&mask).enumerate() {
                let total: f32 = parts.iter().map(|v| v[i] * mi).sum();
                assert!(
                    (yi - total).abs() <= 1e-5 * (1.0 + total.abs()),
                    "P={p} partial {i}"
                );
                if mi == 0.0 {
                    assert_eq!(yi, 0.0, "P={p} partial {i}: dropped");
                }
            }
        }
    }
}

#[test]
fn same_key_same_mask_and_another_step_layer_or_seed_another_mask() {
    let m = mesh(3);
    let (t, h) = (17, 13);
    let ones = DTensor::from_host(&m, &[t, h], &vec![1.0; t * h], Placement::Shard(0)).unwrap();
    let mask = |d: &mut Dropout| bits(&d.forward(&ones).unwrap().to_host().unwrap());
    let mut d = layer(0.5, 42, 1);
    let first = mask(&mut d);
    assert_eq!(
        mask(&mut d),
        first,
        "the same seed and step give the same mask"
    );
    assert_eq!(
        mask(&mut layer(0.5, 42, 1)),
        first,
        "a fresh layer with the same key too"
    );
    d.advance_step();
    assert_eq!(d.step(), 1);
    let next = mask(&mut d);
    assert_ne!(next, first, "another step gives another mask");
    d.set_step(0);
    assert_eq!(mask(&mut d), first, "set_step(0) gives step 0's mask again");
    assert_ne!(mask(&mut layer(0.5, 42, 2)), first, "another layer id");
    assert_ne!(mask(&mut layer(0.5, 43, 1)), first, "another seed");
}

/// The kept count of n elements is Binomial(n, 1 − p): within 5σ.
#[test]
fn keep_rate_is_within_five_sigma() {
    let n = 1 << 16;
    for &p in &[1, 3] {
        let m = mesh(p);
        let ones = DTensor::from_host(&m, &[256, 256], &vec![1.0; n], Placement::Shard(1)).unwrap();
        for (i, &q) in [0.1f32, 0.5, 0.9].iter().enumerate() {
            let d = layer(q, 2024, i as u32);
            let kept = d
                .forward(&ones)
                .unwrap()
                .to_host()
                .unwrap()
                .iter()
                .filter(|&&v| v != 0.0)
                .count();
            let (nf, qf) = (n as f64, q as f64);
            let (mean, sigma) = (nf * (1.0 - qf), (nf * qf * (1.0 - qf)).sqrt());
            let z = (kept as f64 - mean) / sigma;
            assert!(
                z.abs() <= 5.0,
                "P={p} p={q}: kept {kept} of {n}, {z:.2}σ from {mean}"
            );
        }
    }
}

/// Backward scales dy by the forward's mask, even after the step moved on.
#[test]
fn backward_applies_the_forward_mask() {
    let mut rng = Rng::fresh("dropout_backward");
    let (t, h) = (13, 7);
    let (x, dy) = (rng.vec(t * h), rng.vec(t * h));
    let (seed, step) = (99, 3);
    let want = bits(&cpu_dropout(&dy, 0.25, seed, step, 5));
    for &p in WORLD_SIZES {
        let m = mesh(p);
        for placement in [
            Placement::Replicate,
            Placement::Shard(0),
            Placement::Shard(1),
        ] {
            let mut d = layer(0.25, seed, 5);
            d.set_step(step);
            let xd = DTensor::from_host(&m, &[t, h], &x, placement)
                .unwrap()
                .requires_grad();
            let y = d.forward(&xd).unwrap();
            d.advance_step();
            y.backward_with(&DTensor::from_host(&m, &[t, h], &dy, placement).unwrap())
                .unwrap();
            let dx = xd.grad().unwrap();
            assert_eq!(dx.placement(), placement);
            assert_eq!(bits(&dx.to_host().unwrap()), want, "P={p} {placement:?}");
        }
    }
}

#[test]
fn p_zero_and_eval_are_the_identity_and_p_one_gives_zeros() {
    let mut rng = Rng::fresh("dropout_limits");
    let m = mesh(4);
    let (t, h) = (7, 13);
    let x = rng.vec(t * h);
    let xd = DTensor::from_host(&m, &[t, h], &x, Placement::Shard(1)).unwrap();
    // The gradient of x for dy = x.
    let grad = |d: &Dropout| {
        let leaf = xd.requires_grad();
        d.forward(&leaf).unwrap().backward_with(&xd).unwrap();
        leaf.grad().unwrap().to_host().unwrap()
    };
    let d = layer(0.0, 1, 0);
    assert_eq!(
        bits(&d.forward(&xd).unwrap().to_host().unwrap()),
        bits(&x),
        "p = 0"
    );
    assert_eq!(bits(&grad(&d)), bits(&x), "p = 0 backward");
    let mut d = layer(0.5, 1, 0);
    d.eval();
    assert!(!d.is_training());
    assert_eq!(
        bits(&d.forward(&xd).unwrap().to_host().unwrap()),
        bits(&x),
        "eval"
    );
    assert_eq!(bits(&grad(&d)), bits(&x), "eval backward");
    d.train();
    assert_ne!(
        bits(&d.forward(&xd).unwrap().to_host().unwrap()),
        bits(&x),
        "train again"
    );
    // p = 1 is accepted and drops everything (forward and backward), as PyTorch does.
    let d = layer(1.0, 1, 0);
    let y = d.forward(&xd).unwrap();
    assert_eq!(y.placement(), Placement::Shard(1));
    assert!(
        y.to_host().unwrap().iter().all(|&v| v.to_bits() == 0),
        "p = 1"
    );
    assert!(grad(&d).iter().all(|&v| v.to_bits() == 0), "p = 1 backward");
    for bad in [-0.1, 1.5, f32::NAN] {
        assert!(Dropout::new(DropoutConfig::new(bad)).is_err(), "p = {bad}");
    }
}

#[test]
fn bad_inputs_are_errors_and_leave_the_layer_usable() {
    let m = mesh(2);
    let (t, h) = (7, 5);
    let x: Vec<f32> = (0..t * h).map(|i| i as f32 + 1.0).collect();
    let xd = DTensor::from_host(&m, &[t, h], &x, Placement::Shard(0))
        .unwrap()
        .requires_grad();
    let ids: Vec<i32> = (0..(t * h) as i32).collect();
    let ints = DTensor::from_host_i32(&m, &[t, h], &ids, Placement::Shard(0)).unwrap();
    let mut d = layer(0.5, 8, 3);
    assert!(d.forward(&ints).is_err(), "i32 input");
    d.eval();
    assert!(d.forward(&ints).is_err(), "i32 input in evaluation mode");
    d.train();
    let y = d.forward(&xd).unwrap();
    let want = bits(&cpu_dropout(&x, 0.5, 8, 0, 3));
    assert_eq!(bits(&y.to_host().unwrap()), want);
    let wide = DTensor::from_host(&m, &[h, t], &x, Placement::Shard(0)).unwrap();
    assert!(
        y.backward_with(&wide).is_err(),
        "backward of the wrong shape"
    );
    // dy placed otherwise is moved to the output's placement: the same mask.
    let rep = DTensor::from_host(&m, &[t, h], &x, Placement::Replicate).unwrap();
    y.backward_with(&rep).unwrap();
    let dx = xd.grad().unwrap();
    assert_eq!(dx.placement(), Placement::Shard(0));
    assert_eq!(bits(&dx.to_host().unwrap()), want);
}

#[test]
fn dropout_communicates_nothing() {
    let _counting = count_lock();
    for &p in WORLD_SIZES {
        let m = counting_mesh(p);
        let xd = DTensor::from_host(&m, &[13, 7], &[1.0; 91], Placement::Shard(0))
            .unwrap()
            .requires_grad();
        m.reset_comm_stats();
        let d = layer(0.5, 1, 1);
        let y = d.forward(&xd).unwrap();
        y.backward_with(&y.detach()).unwrap();
        assert!(m.comm_stats().is_empty(), "P={p}: {:?}", m.comm_stats());
    }
}

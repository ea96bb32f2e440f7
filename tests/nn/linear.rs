//! Column- and row-parallel linear layers: forward, input gradients and
//! gathered parameter gradients equal an f64 reference and the P = 1 run, for
//! every world size and ragged sizes; two SGD steps land on the same weights;
//! communication counts match docs/MATH.md's table ("Communication per call")
//! exactly; seeded and strided initialisation; bad inputs. Backward is the
//! tape's: `y.backward_with(dy)` from the layer's output, x a tracked leaf.
//! (The same layers sequence-parallel: `nn::sequence_parallel`.)

use super::TOL;
use crate::util::reference::{linear_grads, widen};
use crate::util::{
    Rng, WORLD_SIZES, assert_close, assert_linear_close, assert_only, count_lock, counting_mesh,
    linear_results, mesh,
};
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, InitRng, Params, RowParallelConfig,
    RowParallelLinear, Sgd,
};
use wgpu_tp::{Collective, DTensor, Placement};

/// Sizes (tokens, in, out): ragged, and one where some ranks hold nothing at P = 8.
const SIZES: &[(usize, usize, usize)] = &[(7, 13, 17), (5, 3, 6)];

#[test]
fn column_parallel_matches_reference_p1_2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("column_parallel");
    for &(t, inp, out) in SIZES {
        let w = rng.vec(out * inp);
        let b = rng.vec(out);
        let x = rng.vec(t * inp);
        let dy = rng.vec(t * out);
        let want = linear_grads(&x, &w, &b, &dy, (t, inp, out));
        for &gather in &[false, true] {
            let mut serial: Option<Vec<f32>> = None;
            for &p in WORLD_SIZES {
                let m = counting_mesh(p);
                let mut cfg = ColumnParallelConfig::new(inp, out);
                cfg.gather_output = gather;
                let layer = ColumnParallelLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
                let xd = DTensor::from_host(&m, &[t, inp], &x, Placement::Replicate)
                    .unwrap()
                    .requires_grad();
                m.reset_comm_stats();
                let y = layer.forward(&xd).unwrap();
                let fwd_gathers = m.comm_calls(Collective::AllGather);
                assert_eq!(
                    y.placement(),
                    if gather {
                        Placement::Replicate
                    } else {
                        Placement::Shard(1)
                    }
                );
                let yv = y.to_host().unwrap();
                let what = format!("column y (P={p}, gather={gather}, {t}x{inp}x{out})");
                match &serial {
                    None => serial = Some(yv.clone()),
                    Some(s) => assert_close(&format!("{what} vs P=1"), &yv, &widen(s), TOL),
                }
                let dyd = DTensor::from_host(&m, &[t, out], &dy, y.placement()).unwrap();
                m.reset_comm_stats();
                y.backward_with(&dyd).unwrap();
                let dx = xd.grad().unwrap();
                // docs/MATH.md, "Communication per call": forward none (1
                // all-gather with gather_output), backward 1 all-reduce.
                if p > 1 {
                    assert_eq!(fwd_gathers, u64::from(gather), "forward all-gathers");
                    let stats = m.comm_stats();
                    assert_only(&stats, Collective::AllReduce, 1, "column backward");
                }
                assert_eq!(dx.placement(), Placement::Replicate);
                let got = linear_results(&y, &dx, &layer);
                assert_linear_close(
                    &format!("column (P={p}, gather={gather})"),
                    &got,
                    &want,
                    TOL,
                );
            }
        }
    }
}

#[test]
fn row_parallel_matches_reference_p1_2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("row_parallel");
    for &(t, inp, out) in SIZES {
        let w = rng.vec(out * inp);
        let b = rng.vec(out);
        let x = rng.vec(t * inp);
        let dy = rng.vec(t * out);
        let want = linear_grads(&x, &w, &b, &dy, (t, inp, out));
        for &parallel_in in &[true, false] {
            for &p in WORLD_SIZES {
                let m = counting_mesh(p);
                let mut cfg = RowParallelConfig::new(inp, out);
                cfg.input_is_parallel = parallel_in;
                let layer = RowParallelLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
                let xp = if parallel_in {
                    Placement::Shard(1)
                } else {
                    Placement::Replicate
                };
                let xd = DTensor::from_host(&m, &[t, inp], &x, xp)
                    .unwrap()
                    .requires_grad();
                m.reset_comm_stats();
                let y = layer.forward(&xd).unwrap();
                if p > 1 {
                    assert_only(&m.comm_stats(), Collective::AllReduce, 1, "row forward");
                }
                assert_eq!(y.placement(), Placement::Replicate);
                let dyd = DTensor::from_host(&m, &[t, out], &dy, Placement::Replicate).unwrap();
                m.reset_comm_stats();
                y.backward_with(&dyd).unwrap();
                let dx = xd.grad().unwrap();
                if p > 1 {
                    // input_is_parallel: no communication; else the scatter's backward all-gathers.
                    let stats = m.comm_stats();
                    if parallel_in {
                        assert!(stats.is_empty(), "row backward: {stats:?}");
                    } else {
                        assert_only(&stats, Collective::AllGather, 1, "row backward");
                    }
                }
                assert_eq!(dx.placement(), xp);
                let got = linear_results(&y, &dx, &layer);
                let what = format!("row (P={p}, parallel_in={parallel_in})");
                assert_linear_close(&what, &got, &want, TOL);
            }
        }
    }
}

/// The Megatron MLP: Column(no gather) → Row(input_is_parallel) does exactly
/// one all-reduce forward and one backward (x's gradient: x is tracked); two
/// SGD steps give the serial weights.
#[test]
fn mlp_comm_counts_and_sgd_steps_match_serial_p1_2_3_4_8() {
    let _counting = count_lock();
    let (t, d, h) = (6, 11, 13);
    let mut rng = Rng::fresh("mlp_sgd");
    let x = rng.vec(t * d);
    let dy = rng.vec(t * d);
    let mut results: Vec<(usize, Vec<f32>, Vec<f32>)> = Vec::new();
    for &p in WORLD_SIZES {
        let m = counting_mesh(p);
        let mut init = InitRng::new(42);
        let mut fc1 =
            ColumnParallelLinear::new(&m, ColumnParallelConfig::new(d, h), &mut init).unwrap();
        let mut fc2 = RowParallelLinear::new(&m, RowParallelConfig::new(h, d), &mut init).unwrap();
        let mut opt1 = Sgd::new(0.1).with_momentum(0.9);
        let mut opt2 = Sgd::new(0.1).with_momentum(0.9);
        for step in 0..2 {
            let xd = DTensor::from_host(&m, &[t, d], &x, Placement::Replicate)
                .unwrap()
                .requires_grad();
            m.reset_comm_stats();
            let y = fc2.forward(&fc1.forward(&xd).unwrap()).unwrap();
            let fwd = m.comm_stats();
            let dyd = DTensor::from_host(&m, &[t, d], &dy, Placement::Replicate).unwrap();
            m.reset_comm_stats();
            y.backward_with(&dyd).unwrap();
            let bwd = m.comm_stats();
            assert!(xd.grad().is_some());
            if p > 1 && step == 0 {
                assert_only(&fwd, Collective::AllReduce, 1, "MLP forward");
                assert_only(&bwd, Collective::AllReduce, 1, "MLP backward");
                // payload: every rank contributes a [t, d] f32 tensor.
                assert_eq!(fwd[&Collective::AllReduce].bytes, (p * t * d * 4) as u64);
            }
            opt1.step(&mut fc1).unwrap();
            opt2.step(&mut fc2).unwrap();
            fc1.zero_grad();
            fc2.zero_grad();
        }
        results.push((
            p,
            fc1.master_weight().unwrap(),
            fc2.master_weight().unwrap(),
        ));
    }
    let (_, w1, w2) = &results[0];
    for (p, v1, v2) in &results[1..] {
        assert_close(&format!("fc1 after 2 steps, P={p}"), v1, &widen(w1), TOL);
        assert_close(&format!("fc2 after 2 steps, P={p}"), v2, &widen(w2), TOL);
    }
}

#[test]
fn seeded_init_gives_serial_weights_and_stride_round_trips_p1_2_3_4_8() {
    let mut serial = None;
    for &p in WORLD_SIZES {
        let m = mesh(p);
        let mut cfg = ColumnParallelConfig::new(5, 72); // 72 is divisible by 3·P for every P
        cfg.stride = 3;
        cfg.init = wgpu_tp::nn::Init::XavierUniform { gain: 1.0 };
        let layer = ColumnParallelLinear::new(&m, cfg, &mut InitRng::new(7)).unwrap();
        let w = layer.master_weight().unwrap();
        match &serial {
            None => serial = Some(w),
            Some(s) => assert_eq!(&w, s, "P={p}: seeded master weight differs from serial"),
        }
    }
    // Rank r of a stride-3 split holds its slice of each of the 3 blocks.
    let m = mesh(2);
    let master: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let mut cfg = ColumnParallelConfig::new(1, 12);
    cfg.stride = 3;
    cfg.bias = false;
    let layer = ColumnParallelLinear::from_master(&m, cfg, &master, None).unwrap();
    let r0 = layer.weight.value.local(0).unwrap().to_vec().unwrap();
    assert_eq!(r0, vec![0.0, 1.0, 4.0, 5.0, 8.0, 9.0]);
    assert_eq!(layer.master_weight().unwrap(), master);
}

#[test]
fn bad_inputs_are_errors_and_keep_state() {
    let m = mesh(2);
    let layer =
        ColumnParallelLinear::new(&m, ColumnParallelConfig::new(4, 6), &mut InitRng::new(1))
            .unwrap();
    let before = layer.master_weight().unwrap();
    let wrong = DTensor::from_host(&m, &[3, 5], &[0.0; 15], Placement::Replicate).unwrap();
    assert!(matches!(
        layer.forward(&wrong),
        Err(wgpu_tp::Error::ShapeMismatch { .. })
    ));
    let sharded = DTensor::from_host(&m, &[3, 4], &[0.0; 12], Placement::Shard(1)).unwrap();
    assert!(
        layer.forward(&sharded).is_err(),
        "column input must be replicated"
    );
    let x = DTensor::from_host(&m, &[3, 4], &[1.0; 12], Placement::Replicate).unwrap();
    let y = layer.forward(&x).unwrap();
    let bad_dy = DTensor::from_host(&m, &[2, 6], &[0.0; 12], Placement::Shard(1)).unwrap();
    assert!(y.backward_with(&bad_dy).is_err());
    assert!(
        layer.weight.grad().is_none(),
        "a refused backward adds nothing"
    );
    // The graph survived the bad call: the right gradient still works.
    let dy = DTensor::from_host(&m, &[3, 6], &[1.0; 18], y.placement()).unwrap();
    y.backward_with(&dy).unwrap();
    assert!(layer.weight.grad().is_some());
    assert_eq!(layer.master_weight().unwrap(), before);
    assert!(
        ColumnParallelLinear::from_master(
            &m,
            ColumnParallelConfig::new(4, 6),
            &[0.0; 5],
            Some(&[0.0; 6])
        )
        .is_err()
    );
    let names: Vec<String> = layer
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, vec!["weight", "bias"]);
}

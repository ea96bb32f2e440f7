//! `KvHeadLinear`, grouped-query attention's key/value projection: every
//! rank holds only its query heads' key/value heads (one head each for
//! SmolLM2's 9 / 3 at P = 3); forward equals an f64 reference of the held
//! columns; backward gives the master gradient `Σ_holders dyᵀ x` (and the
//! input's through the caller's mapping) equal to f64, with the copies'
//! values bit-identical after an SGD step; `new` draws the same logical
//! weight at every P (the host's `Init::sample`); `master` / `load_master`
//! see the logical `[kv·d, in]` tensor; bad masters are errors.

use crate::util::reference::{gemm, linear};
use crate::util::{Rng, WORLD_SIZES, assert_close, mesh};
use wgpu_tp::nn::{Init, InitRng, KvHeadConfig, KvHeadLinear, Params, Sgd};
use wgpu_tp::tensor::Holding;
use wgpu_tp::{DTensor, Mapping, Placement};

#[test]
fn held_projection_matches_f64_forward_and_backward_p1_2_3_4_8() {
    let mut rng = Rng::fresh("kv_heads_linear");
    // (tokens, in, heads, kv_heads, head_dim)
    for (t, inp, heads, kv, d) in [(7, 13, 9, 3, 2), (5, 6, 14, 2, 3), (3, 4, 5, 5, 2)] {
        let out = kv * d;
        let (w, b, x) = (rng.vec(out * inp), rng.vec(out), rng.vec(t * inp));
        let full = linear(&x, &w, Some(&b), t, inp, out);
        for &p in WORLD_SIZES.iter().filter(|&&p| p <= heads) {
            let what = format!("{heads}/{kv} d {d} P={p}");
            let m = mesh(p);
            let mut cfg = KvHeadConfig::new(inp, heads, kv, d);
            cfg.bias = true;
            let mut layer = KvHeadLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
            let held = layer.holding();
            assert_eq!(held, Holding::kv_heads(heads, kv, p).unwrap(), "{what}");
            for s in layer.weight.value.shards() {
                assert_eq!(
                    s.shape(),
                    [held.per * d, inp],
                    "{what}: only the held heads"
                );
            }
            assert_eq!(layer.weight.shape(), [out, inp], "{what}: logical shape");
            let xd = DTensor::from_host(&m, &[t, inp], &x, Placement::Replicate)
                .unwrap()
                .requires_grad();
            let y = layer
                .forward_mapped(&Mapping::CopyToParallel.forward(&xd).unwrap())
                .unwrap();
            let ew = held.expanded() * d;
            assert_eq!(y.shape(), [t, ew], "{what}");
            // Rank r's columns are heads starts[r].. of the full output.
            let cols: Vec<usize> = held
                .starts
                .iter()
                .flat_map(|&s| s * d..(s + held.per) * d)
                .collect();
            let want: Vec<f64> = (0..t)
                .flat_map(|i| cols.iter().map(move |&c| (i, c)))
                .map(|(i, c)| full[i * out + c])
                .collect();
            assert_close(&format!("{what}: y"), &y.to_host().unwrap(), &want, 1e-5);
            // Backward: each held column's gradient lands on its logical row.
            let dy = rng.vec(t * ew);
            let mut dfold = vec![0.0f64; t * out];
            for i in 0..t {
                for (e, &c) in cols.iter().enumerate() {
                    dfold[i * out + c] += dy[i * ew + e] as f64;
                }
            }
            let dyd =
                DTensor::from_host_in_units(&m, &[t, ew], &dy, Placement::Shard(1), held.per * d)
                    .unwrap();
            y.backward_with(&dyd).unwrap();
            let dw = gemm(&dfold, &x, out, inp, t, true, false);
            let db: Vec<f64> = (0..out)
                .map(|c| (0..t).map(|i| dfold[i * out + c]).sum())
                .collect();
            let dx = gemm(&dfold, &w, t, inp, out, false, false);
            let got = |g: Option<Vec<f32>>| g.expect("a gradient");
            assert_close(
                &format!("{what}: dW"),
                &got(layer.weight.master_grad().unwrap()),
                &dw,
                1e-5,
            );
            let bias = layer.bias.as_ref().unwrap();
            assert_close(
                &format!("{what}: db"),
                &got(bias.master_grad().unwrap()),
                &db,
                1e-5,
            );
            assert_close(
                &format!("{what}: dx"),
                &xd.grad().unwrap().to_host().unwrap(),
                &dx,
                1e-5,
            );
            // One step: the copies of a head stay bit-identical.
            Sgd::new(0.1).step(&mut layer).unwrap();
            let all = layer.weight.value.to_host().unwrap();
            let rows = held.logical_rows();
            let first = held.first_holders();
            for (i, &j) in rows.iter().enumerate() {
                let (a, b) = (
                    &all[i * d * inp..][..d * inp],
                    &all[first[j] * d * inp..][..d * inp],
                );
                assert_eq!(a, b, "{what}: head {j}'s copies after a step");
            }
            let stepped: Vec<f64> = w
                .iter()
                .zip(&dw)
                .map(|(&w, g)| w as f64 - 0.1 * g)
                .collect();
            assert_close(
                &format!("{what}: stepped"),
                &layer.master_weight().unwrap(),
                &stepped,
                1e-5,
            );
        }
    }
}

#[test]
fn new_draws_the_same_logical_weight_at_every_p_and_masters_round_trip() {
    let seed = Rng::fresh("kv_heads_new").next_u64();
    let (inp, heads, kv, d) = (11, 9, 3, 4);
    let want = Init::default().sample(&mut InitRng::new(seed), kv * d, inp);
    let mut first: Option<Vec<f32>> = None;
    for &p in WORLD_SIZES {
        let m = mesh(p);
        let cfg = KvHeadConfig::new(inp, heads, kv, d);
        let mut layer = KvHeadLinear::new(&m, cfg.clone(), &mut InitRng::new(seed)).unwrap();
        let got = layer.master_weight().unwrap();
        let wide: Vec<f64> = want.iter().map(|&v| v as f64).collect();
        assert_close(
            &format!("P={p}: new against the host's draws"),
            &got,
            &wide,
            1e-5,
        );
        match &first {
            None => first = Some(got),
            Some(f) => assert_eq!(&got, f, "P={p}: the same bits as P = 1"),
        }
        // load_master writes the logical tensor into every copy.
        let fresh: Vec<f32> = (0..kv * d * inp).map(|i| i as f32 * 0.5).collect();
        layer.weight.load_master(&fresh).unwrap();
        assert_eq!(layer.master_weight().unwrap(), fresh, "P={p}");
        assert!(
            layer.weight.load_master(&fresh[1..]).is_err(),
            "P={p}: short master"
        );
        assert_eq!(
            layer.master_weight().unwrap(),
            fresh,
            "P={p}: unchanged after the error"
        );
        assert!(KvHeadLinear::from_master(&m, cfg.clone(), &fresh[1..], None).is_err());
        assert!(KvHeadLinear::from_master(&m, cfg.clone(), &fresh, Some(&[0.0; 3])).is_err());
        let names: Vec<String> = layer
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["weight"], "P={p}");
    }
    // Key/value heads that do not divide the query heads.
    let bad = KvHeadConfig::new(inp, 9, 2, d);
    assert!(KvHeadLinear::new(&mesh(2), bad, &mut InitRng::new(seed)).is_err());
}

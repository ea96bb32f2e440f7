//! Initialisers: seeded and independent of the world size (the master a
//! layer holds, drawn on the devices, is what the initialiser draws on the
//! host, in order, up to the device's f32 rounding, and the same bits for
//! P = 1, 3 and 4), and every distribution's sample mean and std match its
//! formula.

use crate::util::{Rng, WORLD_SIZES, mesh, meshes};
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, Embedding, EmbeddingConfig, Init, InitRng,
    ParallelEmbedding, RowParallelConfig, RowParallelLinear, VocabParallelEmbedding,
};

const INITS: &[Init] = &[
    Init::Normal {
        mean: 0.1,
        std: 0.5,
    },
    Init::Uniform {
        low: -0.3,
        high: 0.7,
    },
    Init::TruncNormal {
        mean: 0.0,
        std: 1.0,
        a: -0.5,
        b: 1.5,
    },
    Init::XavierNormal { gain: 1.5 },
    Init::XavierUniform { gain: 1.0 },
    Init::KaimingNormal,
    Init::KaimingUniform,
    Init::Zeros,
    Init::Ones,
];

#[test]
fn seeded_initialisers_give_the_serial_master_p1_3_4() {
    let mut rng = Rng::fresh("init_seeded");
    let seed = rng.next_u64();
    for &init in INITS {
        let mut firsts: Option<(Vec<f32>, Vec<f32>, Vec<f32>)> = None;
        for &p in &[1, 4, 3] {
            let m = mesh(p);
            let mut r = InitRng::new(seed);
            let mut ccfg = ColumnParallelConfig::new(11, 13);
            ccfg.init = init;
            let col = ColumnParallelLinear::new(&m, ccfg, &mut r).unwrap();
            let mut rcfg = RowParallelConfig::new(13, 11);
            rcfg.init = init;
            let row = RowParallelLinear::new(&m, rcfg, &mut r).unwrap();
            let mut ecfg = EmbeddingConfig::new(10, 6);
            ecfg.init = init;
            let emb = VocabParallelEmbedding::new(&m, ecfg, &mut r).unwrap();
            let got = (
                col.master_weight().unwrap(),
                row.master_weight().unwrap(),
                emb.master_weight().unwrap(),
            );
            // The master is what the initialiser draws on the host, in order.
            let mut r2 = InitRng::new(seed);
            close(
                &got.0,
                &init.sample(&mut r2, 13, 11),
                &format!("{init:?} column P={p}"),
            );
            close(
                &got.1,
                &init.sample(&mut r2, 11, 13),
                &format!("{init:?} row P={p}"),
            );
            close(
                &got.2,
                &init.sample(&mut r2, 10, 6),
                &format!("{init:?} embedding P={p}"),
            );
            match &firsts {
                None => firsts = Some(got),
                Some(f) => assert_eq!(&got, f, "{init:?}: P={p} differs from P=1"),
            }
        }
    }
    // A different seed gives different weights.
    let a = Init::default().sample(&mut InitRng::new(seed), 4, 4);
    let b = Init::default().sample(&mut InitRng::new(seed.wrapping_add(1)), 4, 4);
    assert_ne!(a, b);
}

/// Device draws against the host's: equal up to the driver's `log` /
/// `sqrt` / `cos` (near a zero of a normal draw, the radius times `cos`'s
/// absolute error: a floor of 2e-4, as `tolerance` in
/// tests/kernels/random.rs explains).
fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-4 + 1e-5 * w.abs(),
            "{what}: element {i}: device {g}, host {w}"
        );
    }
}

fn mean_std(x: &[f32]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn initialiser_statistics_match_their_formulas() {
    let mut rng = Rng::fresh("init_stats");
    let mut r = InitRng::new(rng.next_u64());
    // 256 × 1024 = 262144 draws: the sample std is within ~0.15% (1σ) of the
    // truth, the mean within std/512; the bounds below are ≥ 6σ.
    let (fo, fi) = (256usize, 1024usize);
    let n = (fo * fi) as f64;
    let check = |what: &str, x: &[f32], mean: f64, std: f64| {
        let (m, s) = mean_std(x);
        assert!(
            (m - mean).abs() <= 6.0 * std / n.sqrt(),
            "{what}: mean {m}, want {mean}"
        );
        assert!((s / std - 1.0).abs() <= 0.01, "{what}: std {s}, want {std}");
    };
    let x = Init::Normal {
        mean: 0.25,
        std: 2.0,
    }
    .sample(&mut r, fo, fi);
    check("Normal", &x, 0.25, 2.0);

    let x = Init::Uniform {
        low: -0.5,
        high: 1.5,
    }
    .sample(&mut r, fo, fi);
    assert!(
        x.iter().all(|&v| (-0.5..1.5).contains(&v)),
        "Uniform bounds"
    );
    check("Uniform", &x, 0.5, 2.0 / 12f64.sqrt());

    let (a, b) = (-0.5f32, 1.0f32);
    let x = Init::TruncNormal {
        mean: 0.2,
        std: 1.0,
        a,
        b,
    }
    .sample(&mut r, fo, fi);
    assert!(
        x.iter().all(|&v| (a..=b).contains(&v)),
        "TruncNormal inside [a, b]"
    );
    // Closed form of N(0.2, 1) truncated to [-0.5, 1]: α = -0.7, β = 0.8.
    let (al, be) = (-0.7f64, 0.8f64);
    let pdf = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    // Φ(0.8) − Φ(−0.7) with Φ from a fine trapezoid rule.
    let z = {
        let k = 20000;
        let h = (be - al) / k as f64;
        (0..=k)
            .map(|i| {
                let w = if i == 0 || i == k { 0.5 } else { 1.0 };
                w * pdf(al + i as f64 * h)
            })
            .sum::<f64>()
            * h
    };
    let tmean = 0.2 + (pdf(al) - pdf(be)) / z;
    let tvar = 1.0 + (al * pdf(al) - be * pdf(be)) / z - ((pdf(al) - pdf(be)) / z).powi(2);
    check("TruncNormal", &x, tmean, tvar.sqrt());

    let xavier = (2.0 / (fi + fo) as f64).sqrt();
    let x = Init::XavierNormal { gain: 1.5 }.sample(&mut r, fo, fi);
    check("XavierNormal", &x, 0.0, 1.5 * xavier);
    let x = Init::XavierUniform { gain: 2.0 }.sample(&mut r, fo, fi);
    let bound = 2.0 * (6.0 / (fi + fo) as f64).sqrt();
    assert!(x.iter().all(|&v| (v as f64).abs() <= bound * (1.0 + 1e-6)));
    check("XavierUniform", &x, 0.0, 2.0 * xavier);
    let kaiming = (2.0 / fi as f64).sqrt();
    let x = Init::KaimingNormal.sample(&mut r, fo, fi);
    check("KaimingNormal", &x, 0.0, kaiming);
    let x = Init::KaimingUniform.sample(&mut r, fo, fi);
    let bound = (6.0 / fi as f64).sqrt();
    assert!(x.iter().all(|&v| (v as f64).abs() <= bound * (1.0 + 1e-6)));
    check("KaimingUniform", &x, 0.0, kaiming);

    assert!(Init::Zeros.sample(&mut r, 3, 7).iter().all(|&v| v == 0.0));
    assert!(Init::Ones.sample(&mut r, 3, 7).iter().all(|&v| v == 1.0));
    assert_eq!(Init::Ones.sample(&mut r, 3, 7).len(), 21);
    // Megatron's default N(0, 0.02²).
    let x = Init::default().sample(&mut r, fo, fi);
    check("default", &x, 0.0, 0.02);
}

#[test]
fn new_tables_zero_the_padding_row_on_every_split_p1_2_3_4_8() {
    let mut rng = Rng::fresh("init_padding");
    let seed = rng.next_u64();
    let (vocab, dim, pad) = (13, 7, 6);
    let mut cfg = EmbeddingConfig::new(vocab, dim);
    cfg.padding_idx = Some(pad);
    // The host's draws with the padding row zeroed.
    let mut want = cfg.init.sample(&mut InitRng::new(seed), vocab, dim);
    want[pad * dim..(pad + 1) * dim].fill(0.0);
    // Both layouts: on a shared device a replicated table is one buffer.
    for (kind, m) in WORLD_SIZES.iter().flat_map(|&p| meshes(p)) {
        let p = m.size();
        let vocab_split = VocabParallelEmbedding::new(&m, cfg.clone(), &mut InitRng::new(seed));
        let dim_split = ParallelEmbedding::new(&m, cfg.clone(), &mut InitRng::new(seed));
        let replicated = Embedding::new(&m, cfg.clone(), &mut InitRng::new(seed)).unwrap();
        for s in replicated.weight().value.shards() {
            let row = s.to_vec().unwrap()[pad * dim..(pad + 1) * dim].to_vec();
            assert!(
                row.iter().all(|&v| v == 0.0),
                "{kind} P={p}: a rank's padding row"
            );
        }
        for (what, got) in [
            ("vocab split", vocab_split.unwrap().master_weight().unwrap()),
            ("dim split", dim_split.unwrap().master_weight().unwrap()),
            ("replicated", replicated.master_weight().unwrap()),
        ] {
            let what = format!("{what} {kind} P={p}");
            assert!(
                got[pad * dim..(pad + 1) * dim].iter().all(|&v| v == 0.0),
                "{what}: padding row"
            );
            close(&got, &want, &what);
        }
    }
}

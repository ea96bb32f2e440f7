//! LayerNorm (with and without bias) and RMSNorm against f64 on every world
//! size, on both transports, with the input `Replicate` and sequence-parallel
//! `Shard(0)` (3 tokens leave ranks empty at P = 4 and 8), backward on the
//! tape; exact communication (nothing, except one all-reduce of `[dγ; dβ]`
//! per sequence-parallel backward); replicas bit-identical after the
//! gradient all-reduce and an optimiser step; bad inputs are errors that
//! leave the layer usable.

use crate::util::{
    Rng, WORLD_SIZES, assert_close, count_lock, counting_mesh, counting_shared_mesh, mesh,
    shared_mesh,
};
use wgpu_tp::nn::{LayerNorm, NormConfig, Parameter, Params, RMSNorm, Sgd};
use wgpu_tp::{Collective, DTensor, Mesh, Placement, ReduceOp};

const TOL: f64 = 1e-5;
const EPS: f32 = 1e-5;
/// (tokens, hidden): ragged; 3 tokens leave ranks empty at P = 4 and 8.
const SIZES: &[(usize, usize)] = &[(7, 13), (3, 17), (17, 7)];
const PLACEMENTS: &[Placement] = &[Placement::Replicate, Placement::Shard(0)];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Layer {
        bias: bool,
    },
    Rms,
    /// RMSNorm scaling by `1 + w` (Gemma's): built from `w = γ − 1`.
    RmsPlusOne,
}
const KINDS: &[Kind] = &[
    Kind::Layer { bias: true },
    Kind::Layer { bias: false },
    Kind::Rms,
    Kind::RmsPlusOne,
];

/// Either layer behind one interface.
enum Norm {
    Layer(LayerNorm),
    Rms(RMSNorm),
}

impl Norm {
    fn new(m: &Mesh, kind: Kind, g: &[f32], b: &[f32]) -> Norm {
        match kind {
            Kind::Layer { bias } => {
                let mut c = NormConfig::new(g.len());
                c.bias = bias;
                c.eps = EPS;
                Norm::Layer(LayerNorm::from_master(m, c, g, bias.then_some(b)).unwrap())
            }
            Kind::Rms => Norm::Rms(RMSNorm::from_master(m, NormConfig::rms(g.len()), g).unwrap()),
            Kind::RmsPlusOne => {
                let mut c = NormConfig::rms(g.len());
                c.offset = 1.0;
                let w: Vec<f32> = g.iter().map(|v| v - 1.0).collect();
                Norm::Rms(RMSNorm::from_master(m, c, &w).unwrap())
            }
        }
    }
    fn forward(&self, x: &DTensor) -> wgpu_tp::Result<DTensor> {
        match self {
            Norm::Layer(l) => l.forward(x),
            Norm::Rms(l) => l.forward(x),
        }
    }
    /// Forward of a tracked `x`, then backward with `dy` on the tape:
    /// `(y, dx)`; the parameters' gradients accumulate.
    fn forward_backward(&self, x: &DTensor, dy: &DTensor) -> wgpu_tp::Result<(DTensor, DTensor)> {
        let x = x.requires_grad();
        let y = self.forward(&x)?;
        y.backward_with(dy)?;
        Ok((y, x.grad().expect("x's gradient")))
    }
}

/// The variant's parameters (by hand: `#[derive(Params)]` refuses enums).
impl Params for Norm {
    fn visit_params<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Parameter)) {
        match self {
            Norm::Layer(l) => l.visit_params(prefix, f),
            Norm::Rms(l) => l.visit_params(prefix, f),
        }
    }

    fn visit_params_mut<'a>(
        &'a mut self,
        prefix: &str,
        f: &mut dyn FnMut(String, &'a mut Parameter),
    ) {
        match self {
            Norm::Layer(l) => l.visit_params_mut(prefix, f),
            Norm::Rms(l) => l.visit_params_mut(prefix, f),
        }
    }
}

/// f64 `(y, dx, dγ, dβ)` of the norm over rows of `x` `[t, h]`.
fn reference(kind: Kind, x: &[f32], g: &[f32], b: &[f32], dy: &[f32], h: usize) -> [Vec<f64>; 4] {
    let t = x.len() / h;
    let (mut y, mut dx) = (vec![0.0; t * h], vec![0.0; t * h]);
    let (mut dg, mut db) = (vec![0.0; h], vec![0.0; h]);
    for r in 0..t {
        let row: Vec<f64> = x[r * h..(r + 1) * h].iter().map(|&v| v as f64).collect();
        let centre = matches!(kind, Kind::Layer { .. });
        let mu = if centre {
            row.iter().sum::<f64>() / h as f64
        } else {
            0.0
        };
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / h as f64;
        let rstd = 1.0 / (var + EPS as f64).sqrt();
        let xh: Vec<f64> = row.iter().map(|v| (v - mu) * rstd).collect();
        let gh: Vec<f64> = (0..h).map(|j| dy[r * h + j] as f64 * g[j] as f64).collect();
        let mg = if centre {
            gh.iter().sum::<f64>() / h as f64
        } else {
            0.0
        };
        let mgx = (0..h).map(|j| gh[j] * xh[j]).sum::<f64>() / h as f64;
        for j in 0..h {
            let bias = if kind == (Kind::Layer { bias: true }) {
                b[j] as f64
            } else {
                0.0
            };
            y[r * h + j] = g[j] as f64 * xh[j] + bias;
            dx[r * h + j] = rstd * (gh[j] - mg - xh[j] * mgx);
            dg[j] += dy[r * h + j] as f64 * xh[j];
            db[j] += dy[r * h + j] as f64;
        }
    }
    [y, dx, dg, db]
}

/// Every rank's shard of `t`, which must hold the same bits everywhere.
#[track_caller]
fn assert_replicas_identical(what: &str, t: &DTensor) {
    assert_eq!(t.placement(), Placement::Replicate, "{what}");
    let first = t.shards()[0].to_vec().unwrap();
    for (r, s) in t.shards().iter().enumerate().skip(1) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&s.to_vec().unwrap()),
            bits(&first),
            "{what}: rank {r} differs from rank 0"
        );
    }
}

/// Random data for `[t, h]`, off-centre so LayerNorm's mean matters.
fn data(rng: &mut Rng, t: usize, h: usize) -> [Vec<f32>; 4] {
    let x = rng.vec(t * h).iter().map(|v| 2.0 * v + 0.75).collect();
    let g = rng.vec(h).iter().map(|v| 1.0 + 0.5 * v).collect();
    [x, g, rng.vec(h), rng.vec(t * h)]
}

#[test]
fn norms_match_f64_replicated_and_sequence_parallel_on_both_transports_p1_2_3_4_8() {
    let mut rng = Rng::fresh("norms_f64");
    for &(t, h) in SIZES {
        let [x, g, b, dy] = data(&mut rng, t, h);
        for &kind in KINDS {
            let want = reference(kind, &x, &g, &b, &dy, h);
            for &p in WORLD_SIZES {
                for (transport, m) in [("host-staged", mesh(p)), ("shared-device", shared_mesh(p))]
                {
                    for &placement in PLACEMENTS {
                        let what = format!("{kind:?} P={p} {transport} {placement:?} [{t}, {h}]");
                        let norm = Norm::new(&m, kind, &g, &b);
                        let xd = DTensor::from_host(&m, &[t, h], &x, placement).unwrap();
                        let dyd = DTensor::from_host(&m, &[t, h], &dy, placement).unwrap();
                        let (y, dx) = norm.forward_backward(&xd, &dyd).unwrap();
                        assert_eq!(y.placement(), placement, "{what}");
                        assert_close(&format!("{what} y"), &y.to_host().unwrap(), &want[0], TOL);
                        assert_eq!(dx.placement(), placement, "{what}");
                        assert_close(&format!("{what} dx"), &dx.to_host().unwrap(), &want[1], TOL);
                        let params = norm.named_parameters();
                        let names: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
                        let expect: &[&str] = match kind {
                            Kind::Layer { bias: true } => &["weight", "bias"],
                            _ => &["weight"],
                        };
                        assert_eq!(names, expect, "{what}");
                        for ((name, param), want) in params.iter().zip(&want[2..]) {
                            let grad = param.grad().unwrap();
                            assert_replicas_identical(&format!("{what} d{name}"), &grad);
                            let got = param.master_grad().unwrap().unwrap();
                            assert_close(&format!("{what} d{name}"), &got, want, TOL);
                        }
                    }
                }
            }
        }
    }
}

/// Forward never communicates; backward communicates only with `Shard(0)`
/// input and P > 1: one all-reduce of `[dγ; dβ]` (`[dγ]` for RMSNorm),
/// `P·k·h·4` bytes.
#[test]
fn norm_comm_counts_are_exact() {
    let _counting = count_lock();
    let (t, h) = (13, 7);
    let mut rng = Rng::fresh("norm_counts");
    let [x, g, b, dy] = data(&mut rng, t, h);
    for &p in WORLD_SIZES {
        for (transport, m) in [
            ("host-staged", counting_mesh(p)),
            ("shared-device", counting_shared_mesh(p)),
        ] {
            for &kind in KINDS {
                for &placement in PLACEMENTS {
                    let what = format!("{kind:?} P={p} {transport} {placement:?}");
                    let norm = Norm::new(&m, kind, &g, &b);
                    let xd = DTensor::from_host(&m, &[t, h], &x, placement)
                        .unwrap()
                        .requires_grad();
                    let dyd = DTensor::from_host(&m, &[t, h], &dy, placement).unwrap();
                    m.reset_comm_stats();
                    let y = norm.forward(&xd).unwrap();
                    assert!(
                        m.comm_stats().is_empty(),
                        "{what}: forward, got {:?}",
                        m.comm_stats()
                    );
                    y.backward_with(&dyd).unwrap();
                    let stats = m.comm_stats();
                    if p == 1 || placement == Placement::Replicate {
                        assert!(stats.is_empty(), "{what}: backward, got {stats:?}");
                        continue;
                    }
                    let k = if kind == (Kind::Layer { bias: true }) {
                        2
                    } else {
                        1
                    };
                    assert_eq!(stats.len(), 1, "{what}: {stats:?}");
                    assert_eq!(m.comm_calls(Collective::AllReduce), 1, "{what}: {stats:?}");
                    let bytes = (p * k * h * 4) as u64;
                    assert_eq!(
                        stats[&Collective::AllReduce].bytes,
                        bytes,
                        "{what}: {stats:?}"
                    );
                }
            }
        }
    }
}

/// Sequence-parallel LayerNorm, two accumulated backward calls and an SGD
/// step: gradients and weights are bit-identical on every rank and equal
/// the P = 1 run.
#[test]
fn sequence_parallel_replicas_stay_bit_identical_after_a_step() {
    let (t, h) = (13, 17);
    let mut rng = Rng::fresh("norm_sp_step");
    let [x, g, b, dy] = data(&mut rng, t, h);
    let mut serial: Option<Vec<Vec<f32>>> = None;
    for &p in &[1, 3, 4, 8] {
        for m in [mesh(p), shared_mesh(p)] {
            let mut norm = Norm::new(&m, Kind::Layer { bias: true }, &g, &b);
            let xd = DTensor::from_host(&m, &[t, h], &x, Placement::Shard(0)).unwrap();
            let dyd = DTensor::from_host(&m, &[t, h], &dy, Placement::Shard(0)).unwrap();
            for _ in 0..2 {
                norm.forward_backward(&xd, &dyd).unwrap();
            }
            for (name, param) in norm.named_parameters() {
                assert_replicas_identical(&format!("P={p} grad {name}"), &param.grad().unwrap());
            }
            Sgd::new(0.1).step(&mut norm).unwrap();
            let mut values = Vec::new();
            for (name, param) in norm.named_parameters() {
                assert_replicas_identical(&format!("P={p} {name} after a step"), &param.value);
                values.push(param.master().unwrap());
            }
            match &serial {
                None => serial = Some(values),
                Some(s) => {
                    for (got, want) in values.iter().zip(s) {
                        let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
                        assert_close(&format!("P={p} vs P=1 after a step"), got, &want, TOL);
                    }
                }
            }
        }
    }
}

#[test]
fn bad_inputs_are_errors_and_leave_the_layer_usable() {
    let m = mesh(2);
    let (t, h) = (7, 5);
    let mut rng = Rng::fresh("norm_errors");
    let [x, g, b, dy] = data(&mut rng, t, h);
    // Construction.
    let mut bad_cfg = NormConfig::new(h);
    bad_cfg.eps = -1.0;
    assert!(LayerNorm::new(&m, bad_cfg).is_err(), "negative eps");
    bad_cfg.eps = f32::NAN;
    assert!(LayerNorm::new(&m, bad_cfg).is_err(), "NaN eps");
    assert!(LayerNorm::new(&m, NormConfig::new(0)).is_err(), "dim 0");
    assert!(
        RMSNorm::new(&m, NormConfig::new(h)).is_err(),
        "RMSNorm with a bias"
    );
    assert!(LayerNorm::from_master(&m, NormConfig::new(h), &g[..h - 1], Some(&b)).is_err());
    assert!(
        LayerNorm::from_master(&m, NormConfig::new(h), &g, None).is_err(),
        "missing bias"
    );
    assert!(RMSNorm::from_master(&m, NormConfig::rms(h), &[1.0; 3]).is_err());
    // Forward and backward.
    for kind in KINDS {
        let norm = Norm::new(&m, *kind, &g, &b);
        let xd = DTensor::from_host(&m, &[t, h], &x, Placement::Replicate).unwrap();
        let dyd = DTensor::from_host(&m, &[t, h], &dy, Placement::Replicate).unwrap();
        let wide = DTensor::from_host(&m, &[h, t], &x, Placement::Replicate).unwrap();
        let ids: Vec<i32> = (0..(t * h) as i32).collect();
        let ints = DTensor::from_host_i32(&m, &[t, h], &ids, Placement::Replicate).unwrap();
        let cols = DTensor::from_host(&m, &[t, h], &x, Placement::Shard(1)).unwrap();
        let partial =
            DTensor::from_host(&m, &[t, h], &x, Placement::Partial(ReduceOp::Sum)).unwrap();
        let flat = DTensor::from_host(&m, &[t * h], &x, Placement::Replicate).unwrap();
        for (what, bad) in [
            ("wrong hidden size", &wide),
            ("i32", &ints),
            ("Shard(1)", &cols),
            ("Partial(Sum)", &partial),
            ("1-D", &flat),
        ] {
            let e = norm.forward(bad);
            assert!(e.is_err(), "{kind:?}: forward of {what} must fail");
        }
        let want = reference(*kind, &x, &g, &b, &dy, h);
        let xt = xd.requires_grad();
        let y = norm.forward(&xt).unwrap();
        assert_close(
            &format!("{kind:?} y after errors"),
            &y.to_host().unwrap(),
            &want[0],
            TOL,
        );
        for (what, bad) in [("wrong shape", &wide), ("1-D", &flat)] {
            assert!(
                y.backward_with(bad).is_err(),
                "{kind:?}: backward of {what} must fail"
            );
        }
        y.backward_with(&dyd).unwrap();
        let dx = xt.grad().unwrap();
        assert_close(
            &format!("{kind:?} dx after errors"),
            &dx.to_host().unwrap(),
            &want[1],
            TOL,
        );
        let dg = norm.named_parameters()[0].1.master_grad().unwrap().unwrap();
        assert_close(&format!("{kind:?} dγ after errors"), &dg, &want[2], TOL);
    }
}

/// On one rank every placement holds the same bytes: the norms accept any,
/// as the linear layers and mappings do, and communicate nothing.
#[test]
fn one_rank_accepts_any_placement() {
    let m = mesh(1);
    let (t, h) = (7, 13);
    let mut rng = Rng::fresh("norm_one_rank");
    let [x, g, b, dy] = data(&mut rng, t, h);
    let want = reference(Kind::Layer { bias: true }, &x, &g, &b, &dy, h);
    let sum = Placement::Partial(ReduceOp::Sum);
    for (xp, dyp) in [
        (Placement::Shard(1), Placement::Replicate),
        (sum, Placement::Shard(0)),
    ] {
        let norm = Norm::new(&m, Kind::Layer { bias: true }, &g, &b);
        let xd = DTensor::from_host(&m, &[t, h], &x, xp).unwrap();
        let dyd = DTensor::from_host(&m, &[t, h], &dy, dyp).unwrap();
        let (y, dx) = norm.forward_backward(&xd, &dyd).unwrap();
        assert_close(&format!("{xp:?} y"), &y.to_host().unwrap(), &want[0], TOL);
        assert_close(&format!("{xp:?} dx"), &dx.to_host().unwrap(), &want[1], TOL);
        let dg = norm.named_parameters()[0].1.master_grad().unwrap().unwrap();
        assert_close(&format!("{xp:?} dγ"), &dg, &want[2], TOL);
    }
}

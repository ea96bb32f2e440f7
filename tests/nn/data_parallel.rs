//! Data parallelism over a mesh's `dp` axis (`DataParallel`): GPT replicas,
//! each on its own tensor-parallel sub-mesh and its own slice of the global
//! batch, give the loss, every gradient and the parameters after each of 3
//! AdamW steps of one rank on the whole batch (plain and sequence-parallel, both
//! transports, meshes (dp, tp) = (2, 2), (4, 1), (3, 2)), with the
//! communication docs/MATH.md §17 states; replicas end bit-identical and a
//! rerun gives the same bits; bad input is an error that changes nothing.

use std::collections::BTreeMap;

use crate::util::{
    Rng, assert_close, count_lock, counting_mesh, counting_shared_mesh, mesh, shared_mesh,
};
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{AdamW, DataParallel, Params};
use wgpu_tp::{Collective, Mesh};

const TOL: f64 = 1e-5;
pub(super) const SEQ: usize = 5;
pub(super) const ROWS: usize = 12;
pub(super) const STEPS: usize = 3;

/// AdamW with ε = 1e-4: the key bias's gradient is zero in exact
/// arithmetic (softmax ignores a shift of every score), and with the
/// default 1e-8 AdamW turns its rounding noise, different in every
/// summation order, into full ±lr steps.
pub(super) fn adamw() -> AdamW {
    let mut opt = AdamW::new(1e-2);
    opt.eps = 1e-4;
    opt
}

pub(super) fn config() -> Gpt2Config {
    let mut cfg = Gpt2Config::new(11, 8, 12, 3, 2);
    cfg.n_inner = Some(20);
    cfg
}

/// The GPT of [`config`] on `m`, sequence-parallel or not.
pub(super) fn build(m: &Mesh, sp: bool, seed: u64) -> CausalLm {
    CausalLm::new_with(
        m,
        config(),
        seed,
        LoadOptions::default().sequence_parallel(sp),
    )
    .unwrap()
}

pub(super) type Named = BTreeMap<String, Vec<f32>>;

pub(super) fn grads(m: &dyn Params) -> Named {
    m.named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.master_grad().unwrap().expect("a gradient")))
        .collect()
}

pub(super) fn masters(m: &dyn Params) -> Named {
    m.named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.master().unwrap()))
        .collect()
}

pub(super) fn close(what: &str, got: &Named, want: &Named) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (name, g) in got {
        let w: Vec<f64> = want[name].iter().map(|&v| v as f64).collect();
        assert_close(&format!("{what} {name}"), g, &w, TOL);
    }
}

/// Per step: the parameters it starts from, the loss and the gradients; and
/// the parameters after the steps.
pub(super) struct Run {
    pub(super) starts: Vec<Named>,
    pub(super) losses: Vec<f32>,
    pub(super) grads: Vec<Named>,
    pub(super) masters: Named,
}

impl Run {
    pub(super) fn new() -> Run {
        Run {
            starts: vec![],
            losses: vec![],
            grads: vec![],
            masters: Named::new(),
        }
    }
}

/// Loads `want` (by name) into `m`. Two f32 runs of the same steps drift
/// apart by rounding that AdamW amplifies (an update divides by the
/// gradient's own size), past 1e-5 after a step or two (up to 6e-5 over
/// 20 seeds); starting every step from the serial run's parameters keeps
/// each step's comparison at 1e-5 while still running the optimiser's
/// moments over all the steps.
pub(super) fn force(m: &mut dyn Params, want: &Named) {
    for (name, p) in m.named_parameters_mut() {
        p.load_master(&want[&name]).unwrap();
    }
}

pub(super) fn batch(seed: u64) -> (Vec<i32>, Vec<i32>) {
    let mut rng = Rng::seeded(seed);
    let mut draw = || (0..ROWS * SEQ).map(|_| rng.below(11) as i32).collect();
    (draw(), draw())
}

pub(super) fn serial(cfg: Gpt2Config, sp: bool, seed: u64, data: &(Vec<i32>, Vec<i32>)) -> Run {
    let opts = LoadOptions::default().sequence_parallel(sp);
    let mut gpt = CausalLm::new_with(&mesh(1), cfg, seed, opts).unwrap();
    let mut opt = adamw();
    let mut run = Run::new();
    for _ in 0..STEPS {
        run.starts.push(masters(&gpt));
        let loss = gpt.loss(&data.0, &data.1, SEQ).unwrap();
        run.losses.push(loss.to_host().unwrap()[0]);
        loss.backward().unwrap();
        run.grads.push(grads(&gpt));
        opt.step(&mut gpt).unwrap();
        gpt.zero_grad();
    }
    run.masters = masters(&gpt);
    run
}

/// The steps on replicas over `m`'s `dp` axis, each from `starts`' step,
/// checking the communication of each and that the replicas agree bit for
/// bit.
fn data_parallel(
    m: &Mesh,
    sp: bool,
    seed: u64,
    data: &(Vec<i32>, Vec<i32>),
    bucket: Option<u64>,
    starts: &[Named],
) -> Run {
    let what = format!("{:?} sp={sp}", m.axes());
    let (dp, tp) = (m.axis_size("dp").unwrap(), m.axis_size("tp").unwrap());
    let mut ddp = DataParallel::new(m, "dp").unwrap();
    if let Some(b) = bucket {
        ddp = ddp.with_bucket_bytes(b);
    }
    let mut replicas: Vec<CausalLm> = m
        .axis_groups("tp")
        .unwrap()
        .iter()
        .map(|g| build(g, sp, seed))
        .collect();
    assert_eq!(replicas.len(), dp);
    let mut opts: Vec<AdamW> = (0..dp).map(|_| adamw()).collect();
    let mut run = Run::new();
    let reset = |axis: &str| {
        m.axis_groups(axis)
            .unwrap()
            .iter()
            .for_each(Mesh::reset_comm_stats)
    };
    for start in starts {
        replicas.iter_mut().for_each(|r| force(r, start));
        reset("dp");
        reset("tp");
        let (mut loss, mut losses) = (0.0, Vec::new());
        for (d, gpt) in replicas.iter().enumerate() {
            let rows = ddp.batch_rows(ROWS, d).unwrap();
            let span = rows.start * SEQ..rows.end * SEQ;
            let l = gpt.loss(&data.0[span.clone()], &data.1[span], SEQ).unwrap();
            loss += l.to_host().unwrap()[0] / dp as f32;
            l.backward().unwrap();
            losses.push(l);
        }
        let mut refs: Vec<&mut dyn Params> =
            replicas.iter_mut().map(|r| r as &mut dyn Params).collect();
        ddp.average_gradients(&mut refs).unwrap();
        let stats = |axis| m.axis_comm_stats(axis).unwrap();
        let calls = |axis, k| stats(axis).get(&k).map_or(0, |c| c.calls);
        let n_params = replicas[0].named_parameters().len() as u64;
        let buckets = if bucket == Some(1) { n_params } else { 1 };
        assert_eq!(
            calls("dp", Collective::AllReduce),
            buckets * tp as u64,
            "{what}: dp all-reduces"
        );
        assert_eq!(stats("dp").len(), 1, "{what}: dp moves nothing else");
        if tp > 1 {
            let (l, d) = (2u64, dp as u64);
            let want = match sp {
                false => [(Collective::AllReduce, 4 * l + 5)].to_vec(),
                true => [
                    (Collective::AllReduce, 2 * l + 5),
                    (Collective::AllGather, 4 * l + 2),
                    (Collective::ReduceScatter, 4 * l + 1),
                ]
                .to_vec(),
            };
            for (k, n) in want {
                assert_eq!(calls("tp", k), n * d, "{what}: tp {k:?} over the replicas");
            }
        }
        let g0 = grads(&replicas[0]);
        for r in &replicas[1..] {
            assert!(
                grads(r) == g0,
                "{what}: replicas hold the same averaged gradient bits"
            );
        }
        // The mean over the replicas through the dp axis (one all-reduce).
        let mean = ddp.mean(&losses).unwrap();
        assert_close(&format!("{what} mean loss"), &[mean], &[loss as f64], 1e-6);
        run.losses.push(mean);
        run.grads.push(g0);
        for (gpt, opt) in replicas.iter_mut().zip(&mut opts) {
            opt.step(gpt).unwrap();
            gpt.zero_grad();
        }
    }
    run.masters = masters(&replicas[0]);
    for r in &replicas[1..] {
        assert!(
            masters(r) == run.masters,
            "{what}: replicas stay bit-identical"
        );
    }
    run
}

#[test]
fn data_parallel_gpt_steps_equal_one_rank_on_the_global_batch() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("data parallel");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    for sp in [false, true] {
        let want = serial(config(), sp, seed, &data);
        let layouts = [
            ("host-staged", counting_mesh(4), 2, 2),
            ("host-staged", counting_mesh(4), 4, 1),
            ("shared-device", counting_shared_mesh(4), 2, 2),
            ("shared-device", shared_mesh(6), 3, 2),
        ];
        for (kind, base, dp, tp) in layouts {
            let m = base.with_axes(&[("dp", dp), ("tp", tp)]).unwrap();
            let what = format!("{kind} dp={dp} tp={tp} sp={sp}");
            let bucket = (dp, tp, kind) == (2, 2, "host-staged");
            let got = data_parallel(&m, sp, seed, &data, bucket.then_some(1), &want.starts);
            for s in 0..STEPS {
                assert_close(
                    &format!("{what} loss {s}"),
                    &[got.losses[s]],
                    &[want.losses[s] as f64],
                    TOL,
                );
                close(
                    &format!("{what} step {s} grad"),
                    &got.grads[s],
                    &want.grads[s],
                );
            }
            close(
                &format!("{what} after {STEPS} AdamW steps"),
                &got.masters,
                &want.masters,
            );
        }
    }
}

#[test]
fn a_rerun_gives_the_same_bits() {
    let mut rng = Rng::fresh("data parallel rerun");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let m = mesh(4).with_axes(&[("dp", 2), ("tp", 2)]).unwrap();
    let a = data_parallel_quiet(&m, seed, &data, None);
    let b = data_parallel_quiet(&m, seed, &data, None);
    assert!(a == b, "the same step twice gives the same gradient bits");
    // Buckets that end between parameters sum each value alike.
    let c = data_parallel_quiet(&m, seed, &data, Some(2000));
    assert!(a == c, "bucket boundaries do not change the bits");
}

/// One step's averaged gradients (no communication checks: this mesh is
/// shared with tests running beside this one).
fn data_parallel_quiet(
    m: &Mesh,
    seed: u64,
    data: &(Vec<i32>, Vec<i32>),
    bucket: Option<u64>,
) -> Named {
    let mut ddp = DataParallel::new(m, "dp").unwrap();
    if let Some(b) = bucket {
        ddp = ddp.with_bucket_bytes(b);
    }
    let mut replicas = replicas(m, seed);
    backward(&ddp, &mut replicas, data);
    grads(&replicas[1])
}

/// One plain GPT replica per tp group of `m`, built alike.
pub(super) fn replicas(m: &Mesh, seed: u64) -> Vec<CausalLm> {
    m.axis_groups("tp")
        .unwrap()
        .iter()
        .map(|g| build(g, false, seed))
        .collect()
}

/// Forward, backward and the gradient average of one step on every replica.
pub(super) fn backward(ddp: &DataParallel, reps: &mut [CausalLm], data: &(Vec<i32>, Vec<i32>)) {
    for (d, gpt) in reps.iter().enumerate() {
        let rows = ddp.batch_rows(ROWS, d).unwrap();
        let span = rows.start * SEQ..rows.end * SEQ;
        let l = gpt.loss(&data.0[span.clone()], &data.1[span], SEQ).unwrap();
        l.backward().unwrap();
    }
    let mut refs: Vec<&mut dyn Params> = reps.iter_mut().map(|r| r as &mut dyn Params).collect();
    ddp.average_gradients(&mut refs).unwrap();
}

#[test]
fn bad_data_parallel_input_is_an_error_that_changes_nothing() {
    let mut rng = Rng::fresh("data parallel errors");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let m = mesh(4).with_axes(&[("dp", 2), ("tp", 2)]).unwrap();
    let msg = |e: wgpu_tp::Error| e.to_string();
    assert!(msg(DataParallel::new(&m, "pp").unwrap_err()).contains("\"pp\""));
    assert!(msg(DataParallel::new(&mesh(4), "dp").unwrap_err()).contains("no named axes"));
    let ddp = DataParallel::new(&m, "dp").unwrap();
    assert_eq!(ddp.size(), 2);
    assert!(msg(ddp.batch_rows(7, 0).unwrap_err()).contains("multiple of 2"));
    assert!(ddp.batch_rows(8, 2).is_err());
    let groups = m.axis_groups("tp").unwrap();
    let mut a = build(&groups[0], false, seed);
    let mut b = build(&groups[1], false, seed);
    for gpt in [&a, &b] {
        gpt.loss(&data.0[..SEQ * 2], &data.1[..SEQ * 2], SEQ)
            .unwrap()
            .backward()
            .unwrap();
    }
    let before = grads(&a);
    // One replica of the two this process drives.
    let e = ddp
        .average_gradients(&mut [&mut a as &mut dyn Params])
        .unwrap_err();
    assert!(msg(e).contains("every replica"), "names what is missing");
    // Replicas built differently.
    let mut other = config();
    other.n_inner = Some(24);
    let mut c = CausalLm::new(&groups[1], other, seed).unwrap();
    c.loss(&data.0[..SEQ], &data.1[..SEQ], SEQ)
        .unwrap()
        .backward()
        .unwrap();
    let e = ddp
        .average_gradients(&mut [&mut a as &mut dyn Params, &mut c])
        .unwrap_err();
    assert!(msg(e).contains("alike"));
    // A replica on a mesh not taken from this one.
    let mut d = build(&shared_mesh(2), false, seed);
    d.loss(&data.0[..SEQ], &data.1[..SEQ], SEQ)
        .unwrap()
        .backward()
        .unwrap();
    let e = ddp
        .average_gradients(&mut [&mut a as &mut dyn Params, &mut d])
        .unwrap_err();
    assert!(msg(e).contains("axis_groups"));
    // A model on the whole (dp, tp) mesh is not a replica.
    let mut whole = build(&m, false, seed);
    whole
        .loss(&data.0[..SEQ], &data.1[..SEQ], SEQ)
        .unwrap()
        .backward()
        .unwrap();
    let e = ddp
        .average_gradients(&mut [&mut whole as &mut dyn Params])
        .unwrap_err();
    assert!(msg(e).contains("spans the \"dp\" axis"));
    assert!(grads(&a) == before, "a refused call changes no gradient");
    // Then the right call works.
    ddp.average_gradients(&mut [&mut a as &mut dyn Params, &mut b])
        .unwrap();
    assert!(grads(&a) == grads(&b));
}

//! Pipeline parallelism (`Pipeline`, `CausalLm::stage`): a GPT split into stages
//! along `pp`, run 1F1B over micro-batches, with data parallelism over `dp`
//! and tensor parallelism inside each stage, gives the loss, every gradient
//! and the parameters after each of 3 AdamW steps of one rank on the global batch
//! (plain and sequence-parallel, meshes (pp, dp, tp) = (2, 1, 2), (2, 2, 1),
//! (2, 2, 2), (3, 1, 2), both transports), with the communication
//! docs/MATH.md §18 states; the tied embedding's two copies stay
//! bit-identical; ZeRO-1 equals AdamW bit for bit; bad input is an error.

use super::data_parallel::{
    Named, ROWS, Run, SEQ, STEPS, adamw, batch, close, config, force, grads, masters, serial,
};
use crate::util::{
    Rng, assert_close, count_lock, counting_mesh, counting_shared_mesh, shared_mesh,
};
use wgpu_tp::models::{CausalLm, Gpt2Config, LoadOptions};
use wgpu_tp::nn::{
    AdamW, DataParallel, Params, Pipeline, PipelineStage, Sampling, StageDecoder, Work, ZeroAdamW,
    load_safetensors_dir, save_safetensors,
};
use wgpu_tp::{Collective, Mesh};

const TOL: f64 = 1e-5;

/// A config and whether the model is sequence-parallel.
type Cfg = (Gpt2Config, bool);

/// Three blocks, so three stages can each hold one.
fn cfg3(sp: bool) -> Cfg {
    let mut c = config();
    c.n_layer = 3;
    (c, sp)
}

/// Two blocks.
fn cfg2() -> Cfg {
    (config(), false)
}

/// Every stage's parameters of replica `d`, the tied table checked equal
/// between the first and the last stage.
fn merged(stages: &[CausalLm], dp: usize, d: usize, f: fn(&dyn Params) -> Named) -> Named {
    let mut all = Named::new();
    for s in stages.iter().skip(d).step_by(dp) {
        for (name, v) in f(s) {
            if let Some(old) = all.insert(name.clone(), v.clone()) {
                assert!(old == v, "{name}: the stages' copies hold the same bits");
            }
        }
    }
    all
}

/// `STEPS` steps on the stages over `m`'s (pp, dp, tp) axes, each from
/// `starts`' step where given.
fn pipelined(
    m: &Mesh,
    cfg: Cfg,
    seed: u64,
    data: &(Vec<i32>, Vec<i32>),
    micro: usize,
    zero: bool,
    starts: Option<&[Named]>,
) -> Run {
    let what = format!("{:?} sp={} micro={micro}", m.axes(), cfg.1);
    let size = |a| m.axis_size(a).unwrap();
    let (pp, dp, tp) = (size("pp"), size("dp"), size("tp"));
    let pipeline = Pipeline::new(m, "pp", micro).unwrap();
    let ddp = DataParallel::new(m, "dp").unwrap();
    // Groups in row-major order of (pp, dp): group k is stage k / dp of replica k % dp.
    let mut stages: Vec<CausalLm> = stages(m, cfg.clone(), seed, &pipeline);
    assert_eq!(stages.len(), pp * dp);
    let mut opts: Vec<AdamW> = (0..pp * dp).map(|_| adamw()).collect();
    let mut zeros: Vec<ZeroAdamW> = (0..pp)
        .map(|_| {
            let mut z = ZeroAdamW::new(&ddp, 1e-2);
            z.eps = 1e-4;
            z
        })
        .collect();
    let mut run = Run::new();
    for step in 0..STEPS {
        if let Some(starts) = starts {
            stages.iter_mut().for_each(|s| force(s, &starts[step]));
        }
        for axis in ["pp", "dp", "tp"] {
            m.axis_groups(axis)
                .unwrap()
                .iter()
                .for_each(Mesh::reset_comm_stats);
        }
        let slices: Vec<(usize, usize)> = (0..pp * dp)
            .map(|k| {
                let rows = ddp.batch_rows(ROWS, k % dp).unwrap();
                (rows.start * SEQ, rows.end * SEQ)
            })
            .collect();
        let batches: Vec<(&[i32], &[i32])> = slices
            .iter()
            .map(|&(a, b)| (&data.0[a..b], &data.1[a..b]))
            .collect();
        let mut refs: Vec<&mut dyn PipelineStage> = stages
            .iter_mut()
            .map(|s| s as &mut dyn PipelineStage)
            .collect();
        let losses = pipeline.forward_backward(&mut refs, &batches, SEQ).unwrap();
        let last = &losses[(pp - 1) * dp..];
        for (k, l) in losses.iter().enumerate() {
            assert_eq!(
                *l,
                last[k % dp],
                "{what}: every stage has its replica's loss"
            );
        }
        let loss = last.iter().sum::<f32>() / dp as f32;
        for p in 0..pp {
            let mut reps: Vec<&mut dyn Params> = stages[p * dp..(p + 1) * dp]
                .iter_mut()
                .map(|s| s as &mut dyn Params)
                .collect();
            ddp.average_gradients(&mut reps).unwrap();
        }
        if step == 0 {
            check_counts(m, &what, cfg.clone(), micro, (pp, dp, tp));
        }
        run.losses.push(loss);
        run.grads.push(merged(&stages, dp, 0, grads));
        for d in 1..dp {
            assert!(
                merged(&stages, dp, d, grads) == run.grads[step],
                "{what}: replicas agree"
            );
        }
        if zero {
            for (p, z) in zeros.iter_mut().enumerate() {
                let mut reps: Vec<&mut dyn Params> = stages[p * dp..(p + 1) * dp]
                    .iter_mut()
                    .map(|s| s as &mut dyn Params)
                    .collect();
                z.step(&mut reps).unwrap();
            }
        } else {
            for (s, opt) in stages.iter_mut().zip(&mut opts) {
                opt.step(s).unwrap();
            }
        }
        stages.iter_mut().for_each(|s| s.zero_grad());
    }
    run.masters = merged(&stages, dp, 0, masters);
    run
}

/// One step's communication per axis (docs/MATH.md §18): each pipeline
/// line (a tp rank of a dp replica) sends M (pp − 1) activations and as
/// many gradients, the tied table's gradient both ways, and the loss from
/// the last stage to each other; tp moves what
/// M micro-batches of the whole model move, per replica; dp one bucket per
/// stage and tp rank.
fn check_counts(m: &Mesh, what: &str, cfg: Cfg, micro: usize, (pp, dp, tp): (usize, usize, usize)) {
    let calls = |axis, k| {
        m.axis_comm_stats(axis)
            .unwrap()
            .get(&k)
            .map_or(0, |c| c.calls)
    };
    let (mu, lines) = (micro as u64, (dp * tp) as u64);
    let s = pp as u64 - 1;
    let sends = if pp > 1 {
        lines * (2 * mu * s + 2 + s)
    } else {
        0
    };
    assert_eq!(calls("pp", Collective::Send), sends, "{what}: pp sends");
    assert_eq!(
        m.axis_comm_stats("pp").unwrap().len(),
        usize::from(pp > 1),
        "{what}: pp sends only"
    );
    let dp_calls = if dp > 1 { (pp * tp) as u64 } else { 0 };
    assert_eq!(
        calls("dp", Collective::AllReduce),
        dp_calls,
        "{what}: dp all-reduces"
    );
    if tp > 1 {
        let l = cfg.0.n_layer as u64;
        let want = match cfg.1 {
            false => vec![(Collective::AllReduce, 4 * l + 5)],
            true => vec![
                (Collective::AllReduce, 2 * l + 5),
                (Collective::AllGather, 4 * l + 2),
                (Collective::ReduceScatter, 4 * l + 1),
            ],
        };
        for (k, n) in want {
            assert_eq!(calls("tp", k), n * mu * dp as u64, "{what}: tp {k:?}");
        }
    }
}

#[test]
fn pipelined_gpt_steps_equal_one_rank_on_the_global_batch() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("pipeline");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    for sp in [false, true] {
        let (cfg, _) = cfg3(sp);
        let want = serial(cfg, sp, seed, &data);
        let layouts = [
            ("host-staged", counting_mesh(4), [2, 1, 2], 3),
            ("shared-device", counting_shared_mesh(4), [2, 2, 1], 2),
            ("host-staged", counting_mesh(8), [2, 2, 2], 3),
            ("shared-device", shared_mesh(6), [3, 1, 2], 4),
        ];
        for (kind, base, [pp, dp, tp], micro) in layouts {
            let m = base
                .with_axes(&[("pp", pp), ("dp", dp), ("tp", tp)])
                .unwrap();
            let what = format!("{kind} pp={pp} dp={dp} tp={tp} sp={sp}");
            let got = pipelined(&m, cfg3(sp), seed, &data, micro, false, Some(&want.starts));
            for s in 0..STEPS {
                let l = format!("{what} loss {s}");
                assert_close(&l, &[got.losses[s]], &[want.losses[s] as f64], TOL);
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
fn zero_under_a_pipeline_equals_adamw_bit_for_bit() {
    let mut rng = Rng::fresh("pipeline zero");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let m = shared_mesh(8)
        .with_axes(&[("pp", 2), ("dp", 2), ("tp", 2)])
        .unwrap();
    let plain = pipelined_quiet(&m, seed, &data, false);
    let zero = pipelined_quiet(&m, seed, &data, true);
    assert!(plain == zero, "ZeRO-1 gives AdamW's parameters bit for bit");
}

/// [`pipelined`]'s parameters, on a mesh other tests may share (its counts
/// are not checked).
fn pipelined_quiet(m: &Mesh, seed: u64, data: &(Vec<i32>, Vec<i32>), zero: bool) -> Named {
    let _counting = count_lock();
    pipelined(m, cfg3(false), seed, data, 2, zero, None).masters
}

#[test]
fn the_1f1b_schedule_holds_at_most_the_stages_ahead() {
    let m = shared_mesh(3).with_axes(&[("pp", 3)]).unwrap();
    let p = Pipeline::new(&m, "pp", 4).unwrap();
    use Work::{Backward as B, Forward as F};
    assert_eq!(
        p.schedule(0),
        [F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)]
    );
    assert_eq!(
        p.schedule(1),
        [F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)]
    );
    assert_eq!(
        p.schedule(2),
        [F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)]
    );
    // Fewer micro-batches than stages: all forwards, then all backwards.
    let p = Pipeline::new(&m, "pp", 1).unwrap();
    assert_eq!(p.schedule(0), [F(0), B(0)]);
    assert_eq!(p.layers(7, 0).unwrap(), 0..3);
    assert_eq!(p.layers(7, 2).unwrap(), 5..7);
}

#[test]
fn bad_pipeline_input_is_an_error() {
    let mut rng = Rng::fresh("pipeline errors");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let msg = |e: wgpu_tp::Error| e.to_string();
    let m = shared_mesh(4).with_axes(&[("pp", 2), ("dp", 2)]).unwrap();
    assert!(msg(Pipeline::new(&m, "pp", 0).unwrap_err()).contains("at least one"));
    assert!(msg(Pipeline::new(&m, "tp", 1).unwrap_err()).contains("\"tp\""));
    // Two layers do not split into four stages.
    let deep = shared_mesh(4).with_axes(&[("pp", 4), ("tp", 1)]).unwrap();
    let p4 = Pipeline::new(&deep, "pp", 1).unwrap();
    let g = &deep.axis_groups("tp").unwrap()[0];
    let e = CausalLm::stage(g, config(), seed, &p4, LoadOptions::default()).unwrap_err();
    assert!(msg(e).contains("2 layers cannot be split into 4 stages"));
    // A stage on a group that spans the pipeline axis.
    let line = deep.group_of(&["pp"], 0).unwrap();
    let e = CausalLm::stage(&line, cfg3(false).0, seed, &p4, LoadOptions::default()).unwrap_err();
    assert!(msg(e).contains("spans the \"pp\" axis"));
    // A batch that does not split into dp × micro-batches.
    let two = shared_mesh(2).with_axes(&[("pp", 2), ("tp", 1)]).unwrap();
    let p = Pipeline::new(&two, "pp", 4).unwrap();
    let mut built: Vec<CausalLm> = stages(&two, cfg2(), seed, &p);
    let mut refs: Vec<&mut dyn PipelineStage> = built
        .iter_mut()
        .map(|s| s as &mut dyn PipelineStage)
        .collect();
    let rows6 = (&data.0[..6 * SEQ], &data.1[..6 * SEQ]);
    let e = p
        .forward_backward(&mut refs, &[rows6, rows6], SEQ)
        .unwrap_err();
    assert!(msg(e).contains("multiple of data-parallel size × 4 micro-batches"));
    let e = p.forward_backward(&mut refs, &[rows6], SEQ).unwrap_err();
    assert!(msg(e).contains("one batch per stage"));
    // In one process, a stage whose previous stage is not given has nothing to receive.
    let rows4 = (&data.0[..4 * SEQ], &data.1[..4 * SEQ]);
    let e = p
        .forward_backward(&mut refs[1..], &[rows4], SEQ)
        .unwrap_err();
    let e = msg(e);
    assert!(e.contains("has sent rank 1 nothing"), "{e}");
    assert!(
        built
            .iter()
            .all(|s| s.named_parameters().iter().all(|(_, p)| p.grad().is_none())),
        "a refused step leaves no gradient"
    );
    // A step that fails midway leaves nothing queued for the next: stage 0
    // alone sends two micro-batches' activations, then waits for a gradient.
    let mut refs: Vec<&mut dyn PipelineStage> = built
        .iter_mut()
        .map(|s| s as &mut dyn PipelineStage)
        .collect();
    let e = p
        .forward_backward(&mut refs[..1], &[rows4], SEQ)
        .unwrap_err();
    assert!(msg(e).contains("has sent rank 0 nothing"));
    drop(refs);
    built.iter_mut().for_each(|s| s.zero_grad());
    let mut refs: Vec<&mut dyn PipelineStage> = built
        .iter_mut()
        .map(|s| s as &mut dyn PipelineStage)
        .collect();
    let again = p.forward_backward(&mut refs, &[rows4, rows4], SEQ).unwrap();
    let mut fresh: Vec<CausalLm> = stages(&two, cfg2(), seed, &p);
    let mut refs: Vec<&mut dyn PipelineStage> = fresh
        .iter_mut()
        .map(|s| s as &mut dyn PipelineStage)
        .collect();
    let clean = p.forward_backward(&mut refs, &[rows4, rows4], SEQ).unwrap();
    assert_eq!(again, clean, "the retried step is the clean step");
}

#[test]
fn stage_checkpoints_load_into_any_layout() {
    let mut rng = Rng::fresh("pipeline checkpoints");
    let (seed, other) = (rng.next_u64(), rng.next_u64());
    let dir = tempdir("stages");
    let build = |m: &Mesh, micro, seed| {
        let p = Pipeline::new(m, "pp", micro).unwrap();
        let stages: Vec<CausalLm> = stages(m, cfg3(false), seed, &p);
        (p, stages)
    };
    // (pp, dp, tp) = (2, 2, 2): one file per stage, from its first replica.
    let m = crate::util::mesh(8)
        .with_axes(&[("pp", 2), ("dp", 2), ("tp", 2)])
        .unwrap();
    let (p, saved) = build(&m, 1, seed);
    for s in &saved {
        p.save_stage(s, &dir).unwrap();
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "stage-00001-of-00002.safetensors",
            "stage-00002-of-00002.safetensors"
        ]
    );
    let want = merged(&saved, 2, 0, masters);
    // Into one rank's whole model.
    let mut whole = CausalLm::new(&crate::util::mesh(1), cfg3(false).0, other).unwrap();
    load_safetensors_dir(&mut whole, &dir).unwrap();
    assert!(
        masters(&whole) == want,
        "a whole model loads the stage files"
    );
    // Into (pp, tp) = (3, 2), shared device.
    let m3 = shared_mesh(6).with_axes(&[("pp", 3), ("tp", 2)]).unwrap();
    let (_, mut three) = build(&m3, 1, other);
    for s in &mut three {
        load_safetensors_dir(s, &dir).unwrap();
    }
    assert!(
        merged(&three, 1, 0, masters) == want,
        "three stages load two stages' files"
    );
    // A whole model's one file loads into stages.
    let one = tempdir("whole");
    save_safetensors(&whole, one.join("model.safetensors")).unwrap();
    let m2 = shared_mesh(4).with_axes(&[("pp", 2), ("tp", 2)]).unwrap();
    let (_, mut two) = build(&m2, 1, other);
    for s in &mut two {
        load_safetensors_dir(s, &one).unwrap();
    }
    assert!(merged(&two, 1, 0, masters) == want);
    // A directory without the tensors is an error that changes nothing.
    let empty = tempdir("empty");
    let before = masters(&two[0]);
    let e = load_safetensors_dir(&mut two[0], &empty)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no .safetensors file") && e.contains("wte.weight"),
        "{e}"
    );
    assert!(masters(&two[0]) == before);
    for d in [dir, one, empty] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A fresh empty directory under the system's temporary directory.
fn tempdir(what: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "wgpu-tp-{what}-{}-{:x}",
        std::process::id(),
        Rng::fresh(what).next_u64()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn pipelined_generation_equals_the_whole_model() {
    let mut rng = Rng::fresh("pipeline generation");
    // A strong penalty, so a small random model seldom repeats one token.
    let pick = Sampling::GreedyWithPenalty {
        repetition_penalty: 50.0,
    };
    // Some random models still repeat one token (a penalty cannot lift a
    // token above one whose logit is far higher), which would compare
    // little: draw models until one generates varied tokens.
    let mut tried = Vec::new();
    let (seed, prompt, whole, want) = loop {
        let seed = rng.next_u64();
        let prompt: Vec<i32> = (0..3).map(|_| rng.below(11) as i32).collect();
        let whole = CausalLm::new(&crate::util::mesh(1), cfg3(false).0, seed).unwrap();
        let want = whole.generate(&prompt, 4, pick).unwrap();
        let mut distinct = want.clone();
        distinct.sort();
        distinct.dedup();
        if distinct.len() >= 3 {
            break (seed, prompt, whole, want);
        }
        tried.push(want);
        assert!(
            tried.len() < 16,
            "no model of 16 varied its tokens: {tried:?}"
        );
    };
    // Sampling draws once per token, however many replicas decode.
    let draw = Sampling::TopK {
        k: 11,
        temperature: 0.02,
        seed,
    };
    let want_drawn = whole.generate(&prompt, 4, draw).unwrap();
    let layouts = [
        (crate::util::mesh(4), [2, 1, 2]),
        (shared_mesh(3), [3, 1, 1]),
        (shared_mesh(4), [2, 2, 1]),
    ];
    for (base, [pp, dp, tp]) in layouts {
        let m = base
            .with_axes(&[("pp", pp), ("dp", dp), ("tp", tp)])
            .unwrap();
        let p = Pipeline::new(&m, "pp", 1).unwrap();
        let stages: Vec<CausalLm> = stages(&m, cfg3(false), seed, &p);
        let refs: Vec<&dyn StageDecoder> = stages.iter().map(|s| s as &dyn StageDecoder).collect();
        let got = p.generate(&refs, &prompt, 4, pick).unwrap();
        let drawn = p.generate(&refs, &prompt, 4, draw).unwrap();
        assert_eq!(
            drawn, want_drawn,
            "pp={pp} dp={dp} tp={tp}: the sampled tokens"
        );
        assert_eq!(
            got, want,
            "pp={pp} dp={dp} tp={tp}: the tokens of the whole model"
        );
    }
}

#[test]
fn gradients_accumulate_over_steps_without_zeroing() {
    let mut rng = Rng::fresh("pipeline accumulation");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let m = shared_mesh(2).with_axes(&[("pp", 2), ("tp", 1)]).unwrap();
    // One micro-batch: a step's gradient is one backward's, so two steps'
    // sum is exactly twice it.
    let p = Pipeline::new(&m, "pp", 1).unwrap();
    let mut stages: Vec<CausalLm> = stages(&m, cfg2(), seed, &p);
    let rows = (&data.0[..4 * SEQ], &data.1[..4 * SEQ]);
    let mut run = || {
        let mut refs: Vec<&mut dyn PipelineStage> = stages
            .iter_mut()
            .map(|s| s as &mut dyn PipelineStage)
            .collect();
        p.forward_backward(&mut refs, &[rows, rows], SEQ).unwrap();
        stages.iter().map(|s| grads(s)).collect::<Vec<Named>>()
    };
    let once = run();
    let twice = run();
    for (one, two) in once.iter().zip(&twice) {
        for (name, g) in two {
            let want: Vec<f32> = one[name].iter().map(|v| v + v).collect();
            // The tied table included: each step's two copies are summed once.
            assert!(
                *g == want,
                "{name}: two steps hold twice one step's gradient"
            );
        }
    }
}

/// One stage per tensor-parallel group of `m`, in row-major order.
fn stages(m: &Mesh, (cfg, sp): Cfg, seed: u64, p: &Pipeline) -> Vec<CausalLm> {
    let opts = LoadOptions::default().sequence_parallel(sp);
    m.axis_groups("tp")
        .unwrap()
        .iter()
        .map(|g| CausalLm::stage(g, cfg.clone(), seed, p, opts).unwrap())
        .collect()
}

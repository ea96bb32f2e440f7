//! ZeRO-1 (`ZeroAdamW`): AdamW's moments and update sharded over the `dp`
//! axis give the parameters of unsharded AdamW bit for bit after 3 steps of
//! GPT replicas, with each rank holding its 1/dp slice of the moments and one
//! all-gather per parameter per dp group each step (docs/MATH.md §17).

use std::collections::BTreeMap;

use super::data_parallel::{Named, SEQ, STEPS, backward, batch, masters, replicas};
use crate::util::{Rng, count_lock, counting_mesh, counting_shared_mesh, shared_mesh};
use wgpu_tp::nn::{AdamW, DataParallel, Params, ZeroAdamW};
use wgpu_tp::shard::split_range;
use wgpu_tp::{Collective, Mesh};

/// Both optimisers' settings (ε as in data_parallel.rs).
const LR: f32 = 1e-2;
const EPS: f32 = 1e-4;

fn plain(m: &Mesh, seed: u64, data: &(Vec<i32>, Vec<i32>)) -> Vec<Named> {
    let ddp = DataParallel::new(m, "dp").unwrap();
    let mut reps = replicas(m, seed);
    let mut opts: Vec<AdamW> = reps.iter().map(|_| AdamW::new(LR)).collect();
    for o in &mut opts {
        o.eps = EPS;
    }
    for _ in 0..STEPS {
        backward(&ddp, &mut reps, data);
        for (gpt, opt) in reps.iter_mut().zip(&mut opts) {
            opt.step(gpt).unwrap();
            gpt.zero_grad();
        }
    }
    reps.iter().map(|r| masters(r)).collect()
}

#[test]
fn zero_1_gives_unsharded_adamw_bits_with_a_slice_of_the_moments_per_rank() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("zero-1");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let layouts = [
        ("host-staged", counting_mesh(4), 2, 2),
        ("host-staged", counting_mesh(4), 4, 1),
        ("shared-device", counting_shared_mesh(4), 2, 2),
        ("shared-device", shared_mesh(6), 3, 2),
    ];
    for (kind, base, dp, tp) in layouts {
        let m = base.with_axes(&[("dp", dp), ("tp", tp)]).unwrap();
        let what = format!("{kind} dp={dp} tp={tp}");
        let want = plain(&m, seed, &data);
        let ddp = DataParallel::new(&m, "dp").unwrap();
        let mut zero = ZeroAdamW::new(&ddp, LR);
        zero.eps = EPS;
        let mut reps = replicas(&m, seed);
        let n_params = reps[0].named_parameters().len() as u64;
        for _ in 0..STEPS {
            backward(&ddp, &mut reps, &data);
            m.axis_groups("dp")
                .unwrap()
                .iter()
                .for_each(Mesh::reset_comm_stats);
            let mut refs: Vec<&mut dyn Params> =
                reps.iter_mut().map(|r| r as &mut dyn Params).collect();
            zero.step(&mut refs).unwrap();
            let stats = m.axis_comm_stats("dp").unwrap();
            assert_eq!(stats.len(), 1, "{what}: only all-gathers");
            let gathers = stats.get(&Collective::AllGather).map_or(0, |c| c.calls);
            assert_eq!(
                gathers,
                n_params * tp as u64,
                "{what}: one per parameter per dp group"
            );
            reps.iter_mut().for_each(|r| r.zero_grad());
        }
        for (d, r) in reps.iter().enumerate() {
            assert!(
                masters(r) == want[d],
                "{what}: replica {d} equals unsharded AdamW bit for bit"
            );
        }
        // Each rank holds m and v for its slice of every parameter shard.
        let mut expect: BTreeMap<usize, u64> = BTreeMap::new();
        let mut unsharded: BTreeMap<usize, u64> = BTreeMap::new();
        for (d, (rep, tpm)) in reps.iter().zip(m.axis_groups("tp").unwrap()).enumerate() {
            for (_, p) in rep.named_parameters() {
                for (j, s) in p.value.shards().iter().enumerate() {
                    let root = tpm.root_rank(tpm.ranks()[j].index()).unwrap();
                    let slice = split_range(s.len(), dp, d).len() as u64;
                    *expect.entry(root).or_default() += 8 * slice;
                    *unsharded.entry(root).or_default() += 8 * s.len() as u64;
                }
            }
        }
        let got = zero.state_bytes();
        assert_eq!(got, expect, "{what}: state bytes per rank");
        for (rank, bytes) in &got {
            let full = unsharded[rank];
            assert!(
                *bytes * dp as u64 <= full + 8 * dp as u64 * n_params,
                "{what}: rank {rank} holds {bytes} of {full}"
            );
        }
    }
}

#[test]
fn zero_1_refuses_half_precision_weights_and_changes_nothing() {
    let mut rng = Rng::fresh("zero-1 refusal");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let m = crate::util::mesh(4)
        .with_axes(&[("dp", 2), ("tp", 2)])
        .unwrap();
    let ddp = DataParallel::new(&m, "dp").unwrap();
    let mut reps = replicas(&m, seed);
    reps[1].store_weights_as(wgpu_tp::DType::BF16).unwrap();
    for gpt in &reps {
        gpt.loss(&data.0[..SEQ], &data.1[..SEQ], SEQ)
            .unwrap()
            .backward()
            .unwrap();
    }
    let before = masters(&reps[0]);
    let mut zero = ZeroAdamW::new(&ddp, LR);
    let mut refs: Vec<&mut dyn Params> = reps.iter_mut().map(|r| r as &mut dyn Params).collect();
    let e = zero.step(&mut refs).unwrap_err().to_string();
    assert!(e.contains("bf16") && e.contains("f32"), "{e}");
    assert!(
        masters(&reps[0]) == before,
        "a refused step changes nothing"
    );
    assert!(zero.state_bytes().is_empty());
}

/// A replica trained on a (dp 2, tp 2) mesh saves a checkpoint that loads,
/// bit for bit, into the model on every other layout: (1, 4), (4, 1), one
/// rank, and a replica of (3, 2) on the shared device.
#[test]
fn checkpoints_move_between_layouts() {
    use wgpu_tp::nn::{from_safetensors_bytes, to_safetensors_bytes};
    let mut rng = Rng::fresh("layout checkpoints");
    let (seed, data) = (rng.next_u64(), batch(rng.next_u64()));
    let m = crate::util::mesh(4)
        .with_axes(&[("dp", 2), ("tp", 2)])
        .unwrap();
    let ddp = DataParallel::new(&m, "dp").unwrap();
    let mut reps = replicas(&m, seed);
    backward(&ddp, &mut reps, &data);
    let mut zero = ZeroAdamW::new(&ddp, LR);
    let mut refs: Vec<&mut dyn Params> = reps.iter_mut().map(|r| r as &mut dyn Params).collect();
    zero.step(&mut refs).unwrap();
    let bytes = to_safetensors_bytes(&reps[1]).unwrap();
    let want = masters(&reps[1]);
    let targets = [
        crate::util::mesh(4)
            .with_axes(&[("dp", 1), ("tp", 4)])
            .unwrap(),
        crate::util::mesh(4)
            .with_axes(&[("dp", 4), ("tp", 1)])
            .unwrap(),
        crate::util::mesh(1)
            .with_axes(&[("dp", 1), ("tp", 1)])
            .unwrap(),
        shared_mesh(6).with_axes(&[("dp", 3), ("tp", 2)]).unwrap(),
    ];
    for t in targets {
        for mut gpt in replicas(&t, seed ^ 1) {
            assert!(masters(&gpt) != want, "a fresh model differs");
            from_safetensors_bytes(&mut gpt, &bytes).unwrap();
            assert!(masters(&gpt) == want, "{:?}: loaded bit for bit", t.axes());
        }
    }
}

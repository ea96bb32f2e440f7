//! The shared-device transport (`Transport::SharedDevice`, every rank on one
//! wgpu device): results that are the same on every rank (all-gather,
//! all-reduce, broadcast, a ring step) are handed out as one buffer, per-rank
//! results never are, and inputs are left unchanged.

use crate::util::{WORLD_SIZES, meshes};
use wgpu_tp::LocalTensor;
use wgpu_tp::comm::{self, ReduceOp};

#[test]
fn shared_device_hands_replicated_results_out_as_one_buffer_p2_3_4_8() {
    // Same-on-every-rank results (all-gather, all-reduce, broadcast, a ring
    // step) share one buffer on a shared device and never on host-staged
    // meshes; per-rank results (reduce-scatter, scatter, all-to-all) never do.
    // Inputs stay unchanged, and the outputs keep their ranks.
    for &n in &WORLD_SIZES[1..] {
        for (name, m) in meshes(n) {
            let shared = m.transport() == wgpu_tp::Transport::SharedDevice;
            let data: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32 + 0.5; 4 * n]).collect();
            let shards: Vec<LocalTensor> = (0..n)
                .map(|r| m.ranks()[r].upload(&[n, 4], &data[r]).unwrap())
                .collect();
            let flags = |out: &[LocalTensor]| -> Vec<bool> {
                for (r, t) in out.iter().enumerate() {
                    assert_eq!(t.rank_index(), r, "{name} P={n}");
                }
                out.iter().map(|t| t.is_shared_across_ranks()).collect()
            };
            let what = |op: &str| format!("{op} on {name} P={n}");
            let ag = comm::all_gather(&m, &shards, 0).unwrap();
            assert_eq!(flags(&ag), vec![shared; n], "{}", what("all_gather"));
            let ar = comm::all_reduce(&m, &shards, ReduceOp::Sum).unwrap();
            assert_eq!(flags(&ar), vec![shared; n], "{}", what("all_reduce"));
            assert!(
                shards.iter().all(|s| !s.is_shared_across_ranks()),
                "{name} P={n}"
            );
            // A ring step hands each input itself to the next rank.
            let ring = comm::ring_shift(&m, &shards).unwrap();
            let moved: Vec<bool> = shards.iter().map(|s| s.is_shared_across_ranks()).collect();
            assert_eq!(moved, vec![shared; n], "{}", what("ring_shift input"));
            assert_eq!(flags(&ring), vec![shared; n], "{}", what("ring_shift"));
            for (r, t) in ring.iter().enumerate() {
                assert_eq!(
                    t.to_vec().unwrap(),
                    data[(r + n - 1) % n],
                    "{}",
                    what("ring")
                );
            }
            let rs = comm::reduce_scatter(&m, &shards, 0, ReduceOp::Sum).unwrap();
            assert_eq!(flags(&rs), vec![false; n], "{}", what("reduce_scatter"));
            let a2a = comm::all_to_all(&m, &shards, 0, 1).unwrap();
            assert_eq!(flags(&a2a), vec![false; n], "{}", what("all_to_all"));
            let src = m.ranks()[n - 1].upload(&[3], &[1.0, 2.0, 3.0]).unwrap();
            let bc = comm::broadcast(&m, &src, m.ranks()).unwrap();
            assert_eq!(flags(&bc), vec![shared; n], "{}", what("broadcast"));
            let sc = comm::scatter(&m, &src, m.ranks(), 0).unwrap();
            assert_eq!(flags(&sc), vec![false; n], "{}", what("scatter"));
            for (r, s) in shards.iter().enumerate() {
                assert_eq!(s.to_vec().unwrap(), data[r], "{}", what("input"));
            }
            // A shared result read through any rank is the whole answer.
            let sum: f32 = (0..n).map(|r| r as f32 + 0.5).sum();
            for t in &ar {
                assert_eq!(
                    t.to_vec().unwrap(),
                    vec![sum; 4 * n],
                    "{}",
                    what("all_reduce")
                );
            }
        }
    }
}

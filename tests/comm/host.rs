//! The host-staged transport (`Transport::HostStaged`, one wgpu device per
//! rank): collectives large enough for its pooled staging buffers and its
//! multi-threaded host work stay exact (checked on both transports).

use crate::util::{all, identical, meshes, words};
use wgpu_tp::LocalTensor;
use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::shard::split_range;

/// Tensors large enough for the host-staged transport's pooled MAP_WRITE
/// staging (>= 1 MiB per output) and its multi-threaded host work (>= 1 MiB
/// per call), on an odd length so thread ranges end mid-chunk; called twice so
/// the second call reuses the pooled staging buffers.
#[test]
fn large_collectives_use_pooled_staging_and_stay_exact() {
    let n = 4;
    let len = 5 * 65_536 + 13; // ~1.25 MiB per rank
    for (name, m) in meshes(n) {
        for round in 0..2 {
            let shards: Vec<LocalTensor> = (0..n)
                .map(|r| {
                    let x: Vec<f32> = (0..len)
                        .map(|i| ((i * 3 + r + round) % 11) as f32)
                        .collect();
                    m.rank(r).unwrap().upload(&[len], &x).unwrap()
                })
                .collect();
            let want: Vec<u32> = (0..len)
                .map(|i| {
                    (0..n)
                        .map(|r| ((i * 3 + r + round) % 11) as f32)
                        .sum::<f32>()
                        .to_bits()
                })
                .collect();
            let what = format!("{name} all_reduce round {round}");
            let out = comm::all_reduce(&m, &shards, ReduceOp::Sum).unwrap();
            assert_eq!(identical(&what, &out, &all(n)), want, "{what}");

            let what = format!("{name} reduce_scatter round {round}");
            let out = comm::reduce_scatter(&m, &shards, 0, ReduceOp::Sum).unwrap();
            let got = words(&out);
            assert_eq!(got.len(), n, "{what}");
            for (r, got) in got.iter().enumerate() {
                let range = split_range(len, n, r);
                assert_eq!(got, &want[range], "{what} rank {r}");
            }

            let what = format!("{name} all_gather round {round}");
            let out = comm::all_gather(&m, &shards, 0).unwrap();
            let mut cat = Vec::new();
            for w in words(&shards) {
                cat.extend(w);
            }
            assert_eq!(identical(&what, &out, &all(n)), cat, "{what}");
        }
    }
}

//! Collectives on shards stored in row blocks (devices with a 1 KiB binding
//! limit), both transports, P = 2, 3, 4, 8: all-reduce, broadcast and
//! reduce-scatter along dim 1 run block by block and equal the f64 sums;
//! the collectives whose pieces cross blocks refuse them with an error
//! naming the limit, and the mesh stays usable.

use crate::util::reference::{slice, widen};
use crate::util::{Rng, assert_close, limited_mesh};
use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::shard::split_range;
use wgpu_tp::{Error, LocalTensor};

const LIMIT: u64 = 1024;

#[test]
fn blocked_shards_all_reduce_broadcast_and_reduce_scatter_p2_3_4_8() {
    let mut rng = Rng::fresh("comm-blocks");
    let shape = [37usize, 13];
    let n = shape[0] * shape[1];
    for p in [2, 3, 4, 8] {
        for shared in [false, true] {
            let m = limited_mesh(p, LIMIT, shared);
            let what = format!("P={p} shared={shared}");
            let host: Vec<Vec<f32>> = (0..p).map(|_| rng.vec(n)).collect();
            let shards: Vec<LocalTensor> = m
                .ranks()
                .iter()
                .zip(&host)
                .map(|(r, x)| r.upload(&shape, x).unwrap())
                .collect();
            assert!(shards.iter().all(|s| s.is_blocked()));
            let want: Vec<f64> = (0..n)
                .map(|i| host.iter().map(|x| x[i] as f64).sum())
                .collect();
            let out = comm::all_reduce(&m, &shards, ReduceOp::Sum).unwrap();
            for (r, o) in out.iter().enumerate() {
                assert_eq!(o.rank_index(), r);
                assert!(o.is_blocked());
                assert_close(
                    &format!("{what} all_reduce rank {r}"),
                    &o.to_vec().unwrap(),
                    &want,
                    1e-6,
                );
            }
            let root = p - 1;
            let out = comm::broadcast(&m, &shards[root], m.ranks()).unwrap();
            for o in &out {
                assert_eq!(o.to_vec().unwrap(), host[root], "{what} broadcast");
            }
            let out = comm::reduce_scatter(&m, &shards, 1, ReduceOp::Sum).unwrap();
            for (r, o) in out.iter().enumerate() {
                let cols = split_range(shape[1], p, r);
                let w = slice(&want, &shape, 1, cols);
                assert_close(
                    &format!("{what} reduce_scatter rank {r}"),
                    &o.to_vec().unwrap(),
                    &w,
                    1e-6,
                );
            }
            for err in [
                comm::all_gather(&m, &shards, 0).unwrap_err(),
                comm::reduce_scatter(&m, &shards, 0, ReduceOp::Sum).unwrap_err(),
                comm::all_to_all(&m, &shards, 1, 0).unwrap_err(),
                comm::scatter(&m, &shards[0], m.ranks(), 0).unwrap_err(),
            ] {
                assert!(matches!(err, Error::TooLarge { .. }), "{what}: {err:?}");
                assert!(err.to_string().contains("max_storage_buffer_binding_size"));
            }
            // Still usable.
            let small: Vec<LocalTensor> = m
                .ranks()
                .iter()
                .map(|r| r.upload(&[3], &[1.0, 2.0, 3.0]).unwrap())
                .collect();
            let out = comm::all_reduce(&m, &small, ReduceOp::Sum).unwrap();
            let want = widen(&[p as f32, 2.0 * p as f32, 3.0 * p as f32]);
            assert_close(
                &format!("{what} after errors"),
                &out[0].to_vec().unwrap(),
                &want,
                0.0,
            );
        }
    }
}

//! DTensor placements and redistribution: every path of docs/MATH.md's
//! redistribution table ("Placements and redistribution") on every world size
//! and on both transports, with ragged sizes and ranks holding nothing; exact
//! partial sums and maxima; `from_shards` / `from_host` validation.

use crate::util::{Rng, WORLD_SIZES, check_placement, mesh, meshes};
use wgpu_tp::{DTensor, Placement, ReduceOp};

#[test]
#[allow(clippy::needless_range_loop)] // d is a dimension index, not only a position
fn redistribute_every_path_p1_2_3_4_8() {
    let mut rng = Rng::fresh("redistribute");
    let shape = [7usize, 3, 13];
    let n: usize = shape.iter().product();
    // Integer-valued data so sums are exact in any order.
    let data: Vec<f32> = (0..n).map(|_| rng.below(17) as f32 - 8.0).collect();
    for &p in WORLD_SIZES {
        for (_, m) in meshes(p) {
            let rep = DTensor::from_host(&m, &shape, &data, Placement::Replicate).unwrap();
            for d in 0..3 {
                let sh = rep.redistribute(Placement::Shard(d)).unwrap();
                check_placement(&sh, &data);
                assert_eq!(
                    sh.local(0).unwrap().shape()[d],
                    wgpu_tp::shard::split_range(shape[d], p, 0).len()
                );
                check_placement(&sh.redistribute(Placement::Replicate).unwrap(), &data);
                for e in 0..3 {
                    check_placement(&sh.redistribute(Placement::Shard(e)).unwrap(), &data);
                }
                let part = rep.redistribute(Placement::Partial(ReduceOp::Sum)).unwrap();
                check_placement(&part, &data);
                check_placement(&part.redistribute(Placement::Shard(d)).unwrap(), &data);
                check_placement(&part.redistribute(Placement::Replicate).unwrap(), &data);
            }
        }
    }
}

#[test]
fn partial_sum_and_max_reduce_exactly_p1_2_3_4_8() {
    for &p in WORLD_SIZES {
        let m = mesh(p);
        // Rank r holds r+1 everywhere.
        let shards = m
            .ranks()
            .iter()
            .map(|r| r.upload(&[5, 3], &[(r.index() + 1) as f32; 15]).unwrap())
            .collect();
        let x =
            DTensor::from_shards(&m, shards, &[5, 3], Placement::Partial(ReduceOp::Sum)).unwrap();
        let total = (p * (p + 1) / 2) as f32;
        check_placement(&x.redistribute(Placement::Replicate).unwrap(), &[total; 15]);
        let y = DTensor::from_shards(
            &m,
            x.shards().to_vec(),
            &[5, 3],
            Placement::Partial(ReduceOp::Max),
        )
        .unwrap();
        check_placement(
            &y.redistribute(Placement::Replicate).unwrap(),
            &[p as f32; 15],
        );
    }
}

#[test]
fn from_shards_and_from_host_validate() {
    let m = mesh(3);
    assert!(DTensor::from_host(&m, &[2, 2], &[0.0; 3], Placement::Replicate).is_err());
    assert!(DTensor::from_host(&m, &[2, 2], &[0.0; 4], Placement::Shard(2)).is_err());
    let x = DTensor::from_host(&m, &[4, 2], &[1.0; 8], Placement::Shard(0)).unwrap();
    // Wrong order of ranks, wrong shapes, wrong count.
    let mut swapped = x.shards().to_vec();
    swapped.swap(0, 1);
    assert!(DTensor::from_shards(&m, swapped, &[4, 2], Placement::Shard(0)).is_err());
    assert!(DTensor::from_shards(&m, x.shards().to_vec(), &[5, 2], Placement::Shard(0)).is_err());
    assert!(
        DTensor::from_shards(&m, x.shards()[..2].to_vec(), &[4, 2], Placement::Shard(0)).is_err()
    );
    let ids = DTensor::from_host_i32(&m, &[5], &[1, -2, 3, 4, 5], Placement::Shard(0)).unwrap();
    assert_eq!(ids.to_host_i32().unwrap(), vec![1, -2, 3, 4, 5]);
}

#[test]
fn local_takes_a_global_rank() {
    let m = mesh(3);
    let x = DTensor::from_host(&m, &[4, 2], &[1.0; 8], Placement::Shard(0)).unwrap();
    // In one process a global rank is also its position in shards().
    for (r, s) in x.shards().iter().enumerate() {
        assert_eq!(s.rank_index(), r);
        assert_eq!(x.local(r).unwrap().rank_index(), r);
    }
    assert!(x.local(3).is_err());
}

//! DTensor placements, redistribution and the conjugate mappings: every path
//! of MATH.md's redistribution table on every world size and on both
//! transports, with ragged sizes and ranks holding nothing; each mapping's
//! forward and backward does exactly the communication its table says.

use crate::util::{
    Rng, WORLD_SIZES, count_lock, counting_mesh, counting_shared_mesh, mesh, shared_mesh,
};
use wgpu_tp::kernels;
use wgpu_tp::{Collective, DTensor, Mapping, Mesh, Placement, ReduceOp};

fn meshes(p: usize) -> [Mesh; 2] {
    [mesh(p), shared_mesh(p)]
}

/// Host-side logical value of `x` under each placement's contract.
fn check_placement(x: &DTensor, want: &[f32]) {
    let p = x.mesh().size();
    let got = x.to_host().unwrap();
    assert_eq!(got, want, "logical value of {:?} on P={p}", x.placement());
}

#[test]
#[allow(clippy::needless_range_loop)] // d is a dimension index, not only a position
fn redistribute_every_path_p1_2_3_4_8() {
    let mut rng = Rng::fresh("redistribute");
    let shape = [7usize, 3, 13];
    let n: usize = shape.iter().product();
    // Integer-valued data so sums are exact in any order.
    let data: Vec<f32> = (0..n).map(|_| rng.below(17) as f32 - 8.0).collect();
    for &p in WORLD_SIZES {
        for m in meshes(p) {
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
fn mappings_forward_backward_and_comm() {
    let mut rng = Rng::fresh("mappings");
    let shape = [13usize, 11];
    let n = 13 * 11;
    let data: Vec<f32> = (0..n).map(|_| rng.below(9) as f32).collect();
    let _counting = count_lock();
    for &p in &[2usize, 3, 4, 8] {
        for m in [counting_mesh(p), counting_shared_mesh(p)] {
            let rep = DTensor::from_host(&m, &shape, &data, Placement::Replicate).unwrap();
            let sum =
                DTensor::from_host(&m, &shape, &data, Placement::Partial(ReduceOp::Sum)).unwrap();
            let sh = DTensor::from_host(&m, &shape, &data, Placement::Shard(1)).unwrap();
            let count = |f: &dyn Fn() -> DTensor, kind: Option<Collective>| {
                m.reset_comm_stats();
                let out = f();
                let stats = m.comm_stats();
                match kind {
                    None => assert!(stats.is_empty(), "expected no communication, got {stats:?}"),
                    Some(k) => {
                        assert_eq!(stats.len(), 1, "{stats:?}");
                        assert_eq!(stats[&k].calls, 1);
                    }
                }
                out
            };
            // f: identity forward, all-reduce backward.
            let y = count(&|| Mapping::CopyToParallel.forward(&rep).unwrap(), None);
            check_placement(&y, &data);
            let dx = count(
                &|| Mapping::CopyToParallel.backward(&sum).unwrap(),
                Some(Collective::AllReduce),
            );
            check_placement(&dx, &data);
            // g: all-reduce forward, identity backward (not an all-reduce!).
            let y = count(
                &|| Mapping::ReduceFromParallel.forward(&sum).unwrap(),
                Some(Collective::AllReduce),
            );
            check_placement(&y, &data);
            let dx = count(
                &|| Mapping::ReduceFromParallel.backward(&rep).unwrap(),
                None,
            );
            assert_eq!(dx.placement(), Placement::Replicate);
            // scatter / gather.
            let y = count(
                &|| Mapping::ScatterToParallel(1).forward(&rep).unwrap(),
                None,
            );
            assert_eq!(y.placement(), Placement::Shard(1));
            let dx = count(
                &|| Mapping::ScatterToParallel(1).backward(&sh).unwrap(),
                Some(Collective::AllGather),
            );
            check_placement(&dx, &data);
            let y = count(
                &|| Mapping::GatherFromParallel(1).forward(&sh).unwrap(),
                Some(Collective::AllGather),
            );
            check_placement(&y, &data);
            let dx = count(
                &|| Mapping::GatherFromParallel(1).backward(&rep).unwrap(),
                None,
            );
            assert_eq!(dx.placement(), Placement::Shard(1));
            // Sequence parallel pair.
            let y = count(
                &|| Mapping::ReduceScatterToParallel(0).forward(&sum).unwrap(),
                Some(Collective::ReduceScatter),
            );
            check_placement(&y, &data);
            let sh0 = DTensor::from_host(&m, &shape, &data, Placement::Shard(0)).unwrap();
            let dx = count(
                &|| Mapping::ReduceScatterToParallel(0).backward(&sh0).unwrap(),
                Some(Collective::AllGather),
            );
            check_placement(&dx, &data);
            let y = count(
                &|| Mapping::AllGatherToParallel(0).forward(&sh0).unwrap(),
                Some(Collective::AllGather),
            );
            check_placement(&y, &data);
            let dx = count(
                &|| Mapping::AllGatherToParallel(0).backward(&sum).unwrap(),
                Some(Collective::ReduceScatter),
            );
            check_placement(&dx, &data);
            // Wrong input placement is an error, not a silent wrong answer.
            assert!(Mapping::ReduceFromParallel.forward(&rep).is_err());
            assert!(Mapping::CopyToParallel.backward(&rep).is_err());
        }
    }
}

#[test]
fn layout_kernels_narrow_and_concat() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let shape = [3usize, 5, 7];
    let data: Vec<f32> = (0..105).map(|v| v as f32).collect();
    let x = r.upload(&shape, &data).unwrap();
    for dim in 0..3 {
        let d = shape[dim];
        let a = kernels::narrow(&x, dim, 0, 2).unwrap();
        let b = kernels::narrow(&x, dim, 2, d - 2).unwrap();
        let e = kernels::narrow(&x, dim, 1, 0).unwrap();
        assert_eq!(a.shape()[dim], 2);
        let whole = kernels::concat(&[&a, &e, &b], dim).unwrap();
        assert_eq!(
            whole.to_vec().unwrap(),
            data,
            "narrow+concat round trip on dim {dim}"
        );
        let want: Vec<f32> = wgpu_tp::tensor::host_narrow(&data, &shape, dim, 2..d);
        assert_eq!(b.to_vec().unwrap(), want);
    }
    assert!(kernels::narrow(&x, 3, 0, 1).is_err());
    assert!(kernels::narrow(&x, 1, 4, 2).is_err());
}

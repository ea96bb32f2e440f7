//! The conjugate mappings (Megatron's f/g, scatter/gather and the
//! sequence-parallel pair): each one's forward and backward give the right
//! logical value and do exactly the communication of docs/MATH.md's table
//! ("The conjugate mappings"), on both transports; a wrong input placement is
//! an error; on the tape, a mapping's VJP is its backward.

use crate::util::{Rng, assert_only, check_placement, count_lock, counting_meshes};
use wgpu_tp::{Collective, DTensor, Mapping, Placement, ReduceOp};

const SUM: Placement = Placement::Partial(ReduceOp::Sum);

#[test]
fn mappings_forward_backward_and_comm() {
    let mut rng = Rng::fresh("mappings");
    let shape = [13usize, 11];
    let n = 13 * 11;
    let data: Vec<f32> = (0..n).map(|_| rng.below(9) as f32).collect();
    let _counting = count_lock();
    for &p in &[2usize, 3, 4, 8] {
        for (transport, m) in counting_meshes(p) {
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
                    Some(k) => assert_only(&stats, k, 1, &format!("P={p}, {transport}")),
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

/// On the tape a mapping's VJP is its backward: x's gradient after
/// `forward(x).backward_with(dy)` is `backward(dy)`, placed like x, with
/// exactly the conjugate collective (none for g and the gather's slice).
#[test]
fn a_taped_mapping_backpropagates_through_its_conjugate() {
    let mut rng = Rng::fresh("mappings_tape");
    let shape = [13usize, 11];
    let data: Vec<f32> = (0..13 * 11).map(|_| rng.below(9) as f32).collect();
    let _counting = count_lock();
    let cases = [
        (
            Mapping::CopyToParallel,
            Placement::Replicate,
            Some(Collective::AllReduce),
        ),
        (Mapping::ReduceFromParallel, SUM, None),
        (
            Mapping::ScatterToParallel(1),
            Placement::Replicate,
            Some(Collective::AllGather),
        ),
        (Mapping::GatherFromParallel(1), Placement::Shard(1), None),
        (
            Mapping::ReduceScatterToParallel(0),
            SUM,
            Some(Collective::AllGather),
        ),
        (
            Mapping::AllGatherToParallel(0),
            Placement::Shard(0),
            Some(Collective::ReduceScatter),
        ),
    ];
    for &p in &[2usize, 3, 4] {
        for (transport, m) in counting_meshes(p) {
            for (map, xp, conjugate) in cases {
                let what = format!("{map:?} P={p} {transport}");
                let x = DTensor::from_host(&m, &shape, &data, xp)
                    .unwrap()
                    .requires_grad();
                let y = map.forward(&x).unwrap();
                assert!(y.is_tracked(), "{what}");
                // f and the sequence-parallel gather get partial gradients
                // (each rank's share of a replicated value's uses).
                let dy_place = match (map, y.placement()) {
                    (Mapping::CopyToParallel | Mapping::AllGatherToParallel(_), _) => SUM,
                    (_, Placement::Partial(_)) => Placement::Replicate,
                    (_, yp) => yp,
                };
                let dy = DTensor::from_host(&m, &shape, &data, dy_place).unwrap();
                // The gradient the untaped backward gives, on the same dy.
                let want = map.backward(&dy).unwrap().to_host().unwrap();
                m.reset_comm_stats();
                y.backward_with(&dy).unwrap();
                let stats = m.comm_stats();
                match conjugate {
                    None => assert!(stats.is_empty(), "{what}: {stats:?}"),
                    Some(k) => assert_only(&stats, k, 1, &what),
                }
                let g = x.grad().unwrap();
                assert_eq!(g.placement(), x.placement(), "{what}");
                assert_eq!(g.to_host().unwrap(), want, "{what}");
            }
        }
    }
}

//! Collectives on both transports (host-staged: one device per rank;
//! shared-device: all ranks on one device) for world sizes 1, 2, 3, 4, 8:
//! exact integer-valued results, random data against an f64 host reference,
//! uneven splits and empty ranks, 3-D tensors along every dim, subgroups,
//! i32 tensors, and bad inputs.

// Rank loops index several per-rank arrays (outputs, downloads, ranges) at once.
#![allow(clippy::needless_range_loop)]

use crate::util::reference::{all_to_all, slice, with_dim};
use crate::util::{
    Rng, WORLD_SIZES, all, assert_close, f32_bits, i32_bits, identical, mesh, meshes, shard_f32,
    shared_mesh, words,
};
use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::shard::{split_range, split_sizes};
use wgpu_tp::{DType, Error, LocalTensor};

/// A 3-D shape with `size` along `dim` and small odd sizes elsewhere.
fn shape3(dim: usize, size: usize) -> Vec<usize> {
    with_dim(&[3, 2, 5], dim, size)
}

#[test]
fn all_reduce_is_exact_on_integer_values_p1_2_3_4_8() {
    for &n in WORLD_SIZES {
        for (name, m) in meshes(n) {
            for &len in &[1usize, 7, 13, 17, 1000] {
                // Rank r holds r + 1 everywhere: the sum is n(n+1)/2, the max n.
                let f: Vec<LocalTensor> = (0..n)
                    .map(|r| {
                        m.ranks()[r]
                            .upload(&[len], &vec![(r + 1) as f32; len])
                            .unwrap()
                    })
                    .collect();
                let i: Vec<LocalTensor> = (0..n)
                    .map(|r| {
                        m.ranks()[r]
                            .upload_i32(&[len], &vec![(r + 1) as i32; len])
                            .unwrap()
                    })
                    .collect();
                let sum = (n * (n + 1) / 2) as f32;
                let out = comm::all_reduce(&m, &f, ReduceOp::Sum).unwrap();
                let w = identical("all_reduce f32 sum", &out, &all(n));
                assert_eq!(w, f32_bits(&vec![sum; len]), "{name} P={n} len={len}");
                let out = comm::all_reduce(&m, &f, ReduceOp::Max).unwrap();
                let w = identical("all_reduce f32 max", &out, &all(n));
                assert_eq!(w, f32_bits(&vec![n as f32; len]), "{name} P={n} len={len}");
                let out = comm::all_reduce(&m, &i, ReduceOp::Sum).unwrap();
                let w = identical("all_reduce i32 sum", &out, &all(n));
                assert_eq!(
                    w,
                    i32_bits(&vec![sum as i32; len]),
                    "{name} P={n} len={len}"
                );
                let out = comm::all_reduce(&m, &i, ReduceOp::Max).unwrap();
                assert_eq!(out[0].dtype(), DType::I32);
                let w = identical("all_reduce i32 max", &out, &all(n));
                assert_eq!(w, i32_bits(&vec![n as i32; len]), "{name} P={n} len={len}");
            }
            eprintln!(
                "[comm] all_reduce exact: P={n} on {name} ({})",
                m.adapter_summary()
            );
        }
    }
}

#[test]
fn all_reduce_random_matches_f64_and_both_transports_agree_p1_2_3_4_8() {
    let mut rng = Rng::fresh("all_reduce random");
    for &n in WORLD_SIZES {
        let shape = [13usize, 17];
        let len = 13 * 17;
        let data: Vec<Vec<f32>> = (0..n).map(|_| rng.vec(len)).collect();
        let mut per_transport = Vec::new();
        for (name, m) in meshes(n) {
            let shards: Vec<LocalTensor> = (0..n)
                .map(|r| m.ranks()[r].upload(&shape, &data[r]).unwrap())
                .collect();
            let out = comm::all_reduce(&m, &shards, ReduceOp::Sum).unwrap();
            assert_eq!(out[n - 1].shape(), &shape);
            let w = identical("all_reduce sum", &out, &all(n));
            let got: Vec<f32> = w.iter().map(|&b| f32::from_bits(b)).collect();
            let want: Vec<f64> = (0..len)
                .map(|k| data.iter().map(|d| d[k] as f64).sum())
                .collect();
            assert_close(&format!("all_reduce sum {name} P={n}"), &got, &want, 1e-6);
            // Fixed order acc = x0 + x1 + ...: the exact f32 result is known.
            let serial: Vec<f32> = (0..len)
                .map(|k| data[1..].iter().fold(data[0][k], |a, d| a + d[k]))
                .collect();
            assert_eq!(
                w,
                f32_bits(&serial),
                "{name} P={n}: not the fixed rank order"
            );
            let out = comm::all_reduce(&m, &shards, ReduceOp::Max).unwrap();
            let w = identical("all_reduce max", &out, &all(n));
            let want: Vec<f32> = (0..len)
                .map(|k| data.iter().map(|d| d[k]).fold(f32::NEG_INFINITY, f32::max))
                .collect();
            assert_eq!(w, f32_bits(&want), "all_reduce max {name} P={n}");
            per_transport.push(serial);
        }
        assert_eq!(per_transport[0], per_transport[1]);
    }
}

#[test]
fn all_gather_uneven_empty_and_every_dim_of_3d_p1_2_3_4_8() {
    let mut rng = Rng::fresh("all_gather");
    for &n in WORLD_SIZES {
        for (name, m) in meshes(n) {
            for dim in 0..3 {
                // n - 1 along the dim leaves the last rank with nothing.
                for size in [7, 13, 17, n.saturating_sub(1)] {
                    let shape = shape3(dim, size);
                    let x = rng.vec(shape.iter().product());
                    let shards = shard_f32(&m, &x, &shape, dim, &all(n));
                    let out = comm::all_gather(&m, &shards, dim).unwrap();
                    assert_eq!(out[0].shape(), &shape[..]);
                    let w = identical("all_gather", &out, &all(n));
                    assert_eq!(
                        w,
                        f32_bits(&x),
                        "all_gather {name} P={n} dim={dim} size={size}"
                    );
                }
            }
            // Sizes that do not follow the split rule (any size, including 0).
            let sizes: Vec<usize> = (0..n).map(|r| (r * 2 + 1) % 3).collect();
            let shards: Vec<LocalTensor> = (0..n)
                .map(|r| {
                    let v: Vec<i32> = (0..sizes[r] * 2).map(|k| (100 * r + k) as i32).collect();
                    m.ranks()[r].upload_i32(&[2, sizes[r]], &v).unwrap()
                })
                .collect();
            let out = comm::all_gather(&m, &shards, 1).unwrap();
            let total: usize = sizes.iter().sum();
            assert_eq!(out[0].shape(), &[2, total]);
            let mut want = Vec::new();
            for row in 0..2 {
                for r in 0..n {
                    for k in 0..sizes[r] {
                        want.push((100 * r + row * sizes[r] + k) as u32);
                    }
                }
            }
            assert_eq!(
                identical("all_gather i32", &out, &all(n)),
                want,
                "{name} P={n}"
            );
            eprintln!(
                "[comm] all_gather dims 0..3, sizes 7/13/17/{}: P={n} on {name}",
                n.saturating_sub(1)
            );
        }
    }
}

#[test]
fn reduce_scatter_every_dim_uneven_sum_and_max_p1_2_3_4_8() {
    let mut rng = Rng::fresh("reduce_scatter");
    for &n in WORLD_SIZES {
        for (name, m) in meshes(n) {
            for dim in 0..3 {
                for size in [7, 13, n.saturating_sub(1)] {
                    let shape = shape3(dim, size);
                    let len: usize = shape.iter().product();
                    let data: Vec<Vec<f32>> = (0..n).map(|_| rng.vec(len)).collect();
                    let shards: Vec<LocalTensor> = (0..n)
                        .map(|r| m.ranks()[r].upload(&shape, &data[r]).unwrap())
                        .collect();
                    let sum: Vec<f64> = (0..len)
                        .map(|k| data.iter().map(|d| d[k] as f64).sum())
                        .collect();
                    let max: Vec<f32> = (0..len)
                        .map(|k| data.iter().map(|d| d[k]).fold(f32::NEG_INFINITY, f32::max))
                        .collect();
                    let out_sum = comm::reduce_scatter(&m, &shards, dim, ReduceOp::Sum).unwrap();
                    let out_max = comm::reduce_scatter(&m, &shards, dim, ReduceOp::Max).unwrap();
                    let (ws, wm) = (words(&out_sum), words(&out_max));
                    for r in 0..n {
                        let range = split_range(size, n, r);
                        let what =
                            format!("reduce_scatter {name} P={n} dim={dim} size={size} rank {r}");
                        assert_eq!(out_sum[r].rank_index(), r);
                        assert_eq!(
                            out_sum[r].shape(),
                            &with_dim(&shape, dim, range.len())[..],
                            "{what}"
                        );
                        let got: Vec<f32> = ws[r].iter().map(|&b| f32::from_bits(b)).collect();
                        assert_close(&what, &got, &slice(&sum, &shape, dim, range.clone()), 1e-6);
                        assert_eq!(
                            wm[r],
                            f32_bits(&slice(&max, &shape, dim, range)),
                            "{what} max"
                        );
                    }
                }
            }
            // Exact: rank r holds r + 1 everywhere.
            let shards: Vec<LocalTensor> = (0..n)
                .map(|r| {
                    m.ranks()[r]
                        .upload_i32(&[17, 2], &[(r + 1) as i32; 34])
                        .unwrap()
                })
                .collect();
            let out = comm::reduce_scatter(&m, &shards, 0, ReduceOp::Sum).unwrap();
            let w = words(&out);
            for r in 0..n {
                let rows = split_sizes(17, n)[r];
                assert_eq!(
                    w[r],
                    vec![(n * (n + 1) / 2) as u32; rows * 2],
                    "{name} P={n}"
                );
            }
            eprintln!("[comm] reduce_scatter dims 0..3 sum/max: P={n} on {name}");
        }
    }
}

#[test]
fn broadcast_from_non_zero_root_and_scatter_p1_2_3_4_8() {
    let mut rng = Rng::fresh("broadcast/scatter");
    for &n in WORLD_SIZES {
        for (name, m) in meshes(n) {
            for root in [n - 1, n / 2] {
                let x = rng.vec(13 * 3);
                let src = m.ranks()[root].upload(&[13, 3], &x).unwrap();
                let out = comm::broadcast(&m, &src, m.ranks()).unwrap();
                assert_eq!(out[0].shape(), &[13, 3]);
                let w = identical("broadcast", &out, &all(n));
                assert_eq!(w, f32_bits(&x), "broadcast {name} P={n} root={root}");
                let ids: Vec<i32> = (0..7).map(|k| k * 1000 - 3).collect();
                let src = m.ranks()[root].upload_i32(&[7], &ids).unwrap();
                let out = comm::broadcast(&m, &src, m.ranks()).unwrap();
                assert_eq!(identical("broadcast i32", &out, &all(n)), i32_bits(&ids));
                assert!(out.iter().all(|t| t.dtype() == DType::I32));

                for dim in 0..3 {
                    for size in [7, 17, n.saturating_sub(1)] {
                        let shape = shape3(dim, size);
                        let x = rng.vec(shape.iter().product());
                        let src = m.ranks()[root].upload(&shape, &x).unwrap();
                        let out = comm::scatter(&m, &src, m.ranks(), dim).unwrap();
                        let w = words(&out);
                        for r in 0..n {
                            let range = split_range(size, n, r);
                            assert_eq!(out[r].rank_index(), r);
                            assert_eq!(out[r].shape(), &with_dim(&shape, dim, range.len())[..]);
                            assert_eq!(
                                w[r],
                                f32_bits(&slice(&x, &shape, dim, range)),
                                "scatter {name} P={n} root={root} dim={dim} size={size} rank {r}"
                            );
                        }
                    }
                }
            }
            eprintln!("[comm] broadcast + scatter from non-zero roots: P={n} on {name}");
        }
    }
}

#[test]
fn all_to_all_turns_shard_d_into_shard_e_p1_2_3_4_8() {
    let mut rng = Rng::fresh("all_to_all");
    for &n in WORLD_SIZES {
        for (name, m) in meshes(n) {
            for (d, e) in [(0, 1), (1, 0), (0, 2), (2, 1), (1, 1)] {
                let shape = [7usize, 13, 3];
                let x = rng.vec(shape.iter().product());
                let shards = shard_f32(&m, &x, &shape, d, &all(n));
                let out = comm::all_to_all(&m, &shards, e, d).unwrap();
                let w = words(&out);
                let want = all_to_all(&x, &shape, d, e, n);
                for j in 0..n {
                    let what = format!("all_to_all {name} P={n} Shard({d})->Shard({e}) rank {j}");
                    assert_eq!(out[j].rank_index(), j);
                    assert_eq!(out[j].shape(), &want[j].0[..], "{what}");
                    assert_eq!(w[j], f32_bits(&want[j].1), "{what}");
                    if d != e {
                        // The point of it: rank j now holds slice j along e.
                        let r = split_range(shape[e], n, j);
                        assert_eq!(w[j], f32_bits(&slice(&x, &shape, e, r)), "{what}");
                    }
                }
            }
            eprintln!("[comm] all_to_all Shard(d)->Shard(e): P={n} on {name}");
        }
    }
}

#[test]
fn subgroups_use_only_their_ranks() {
    for (name, m) in meshes(4) {
        let r = m.ranks();
        // Ranks [1, 3]: values 2 and 4.
        let shards = vec![
            r[1].upload(&[3, 2], &[2.0; 6]).unwrap(),
            r[3].upload(&[3, 2], &[4.0; 6]).unwrap(),
        ];
        let out = comm::all_reduce(&m, &shards, ReduceOp::Sum).unwrap();
        assert_eq!(
            identical("subgroup all_reduce", &out, &[1, 3]),
            f32_bits(&[6.0; 6]),
            "{name}"
        );
        let out = comm::all_gather(&m, &shards, 0).unwrap();
        assert_eq!(out[0].shape(), &[6, 2]);
        let mut want = vec![2.0; 6];
        want.extend([4.0; 6]);
        assert_eq!(
            identical("subgroup all_gather", &out, &[1, 3]),
            f32_bits(&want)
        );
        let out = comm::reduce_scatter(&m, &shards, 0, ReduceOp::Max).unwrap();
        assert_eq!((out[0].shape(), out[1].shape()), (&[2, 2][..], &[1, 2][..]));
        assert_eq!(words(&out), vec![f32_bits(&[4.0; 4]), f32_bits(&[4.0; 2])]);
        let out = comm::all_to_all(&m, &shards, 1, 0).unwrap();
        assert_eq!(out[1].shape(), &[6, 1]);
        let src = r[3].upload_i32(&[5], &[1, -2, 3, -4, 5]).unwrap();
        let group = [r[1].clone(), r[3].clone()];
        let out = comm::broadcast(&m, &src, &group).unwrap();
        assert_eq!(
            identical("subgroup broadcast", &out, &[1, 3]),
            i32_bits(&[1, -2, 3, -4, 5])
        );
        let out = comm::scatter(&m, &src, &group, 0).unwrap();
        assert_eq!(words(&out), vec![i32_bits(&[1, -2, 3]), i32_bits(&[-4, 5])]);
        assert_eq!((out[0].rank_index(), out[1].rank_index()), (1, 3));
        // Order is the caller's: [3, 0, 2] gathers 3's shard first.
        let shards: Vec<LocalTensor> = [3usize, 0, 2]
            .iter()
            .map(|&k| r[k].upload_i32(&[1], &[k as i32]).unwrap())
            .collect();
        let out = comm::all_gather(&m, &shards, 0).unwrap();
        assert_eq!(
            identical("subgroup [3,0,2]", &out, &[3, 0, 2]),
            i32_bits(&[3, 0, 2])
        );
        // A group of one is a no-op that still returns the data.
        let out = comm::all_reduce(&m, &shards[..1], ReduceOp::Sum).unwrap();
        assert_eq!(identical("group of one", &out, &[3]), i32_bits(&[3]));
        eprintln!("[comm] subgroups [1,3] and [3,0,2] of 4 on {name}");
    }
}

#[test]
fn bad_inputs_give_errors_and_the_mesh_keeps_working() {
    for (name, m) in meshes(4) {
        let other = mesh(2);
        let foreign_shared = shared_mesh(2);
        let r = m.ranks();
        let a = r[0].upload(&[2, 3], &[1.0; 6]).unwrap();
        let b = r[1].upload(&[2, 3], &[2.0; 6]).unwrap();
        let wide = r[1].upload(&[2, 4], &[2.0; 8]).unwrap();
        let ints = r[1].upload_i32(&[2, 3], &[2; 6]).unwrap();
        let a_again = r[0].upload(&[2, 3], &[3.0; 6]).unwrap();
        let from_other = other.ranks()[1].upload(&[2, 3], &[1.0; 6]).unwrap();
        let from_shared = foreign_shared.ranks()[1]
            .upload(&[2, 3], &[1.0; 6])
            .unwrap();
        let is =
            |res: Result<Vec<LocalTensor>, Error>, what: &str, ok: fn(&Error) -> bool| match res {
                Err(e) => {
                    assert!(ok(&e), "{name} {what}: wrong error {e:?}");
                    eprintln!("[comm] {name} {what}: {e}");
                }
                Ok(_) => panic!("{name} {what}: expected an error"),
            };
        let shape = |e: &Error| matches!(e, Error::ShapeMismatch { .. });
        let dtype = |e: &Error| matches!(e, Error::DTypeMismatch { .. });
        let invalid = |e: &Error| matches!(e, Error::InvalidArgument { .. });
        let range = |e: &Error| {
            matches!(
                e,
                Error::OutOfRange {
                    what: "dim" | "split_dim" | "concat_dim",
                    ..
                }
            )
        };

        is(
            comm::all_reduce(&m, &[a.clone(), wide.clone()], ReduceOp::Sum),
            "all_reduce shapes",
            shape,
        );
        is(
            comm::reduce_scatter(&m, &[a.clone(), wide.clone()], 0, ReduceOp::Sum),
            "reduce_scatter shapes",
            shape,
        );
        is(
            comm::all_gather(&m, &[a.clone(), wide.clone()], 0),
            "all_gather off-dim shapes",
            shape,
        );
        let flat = r[1].upload(&[6], &[0.0; 6]).unwrap();
        is(
            comm::all_gather(&m, &[a.clone(), flat], 0),
            "all_gather ndim",
            shape,
        );
        is(
            comm::all_to_all(&m, &[a.clone(), wide.clone()], 0, 0),
            "all_to_all shapes",
            shape,
        );
        is(
            comm::all_reduce(&m, &[a.clone(), ints.clone()], ReduceOp::Sum),
            "dtypes",
            dtype,
        );
        is(
            comm::all_gather(&m, &[a.clone(), ints.clone()], 1),
            "gather dtypes",
            dtype,
        );
        is(
            comm::all_reduce(&m, &[a.clone(), a_again.clone()], ReduceOp::Sum),
            "duplicate ranks",
            invalid,
        );
        is(
            comm::all_gather(&m, &[a.clone(), b.clone()], 2),
            "gather dim",
            range,
        );
        is(
            comm::reduce_scatter(&m, &[a.clone(), b.clone()], 5, ReduceOp::Max),
            "reduce_scatter dim",
            range,
        );
        is(comm::scatter(&m, &a, r, 2), "scatter dim", range);
        is(
            comm::all_to_all(&m, &[a.clone(), b.clone()], 2, 0),
            "all_to_all split_dim",
            range,
        );
        is(
            comm::all_to_all(&m, &[a.clone(), b.clone()], 0, 7),
            "all_to_all concat_dim",
            range,
        );
        is(
            comm::all_reduce(&m, &[a.clone(), from_other.clone()], ReduceOp::Sum),
            "tensor from another mesh",
            invalid,
        );
        is(
            comm::all_reduce(&m, &[a.clone(), from_shared.clone()], ReduceOp::Sum),
            "tensor from a shared mesh",
            invalid,
        );
        is(
            comm::broadcast(&m, &from_other, r),
            "broadcast foreign source",
            invalid,
        );
        is(
            comm::broadcast(&m, &a, other.ranks()),
            "broadcast foreign ranks",
            invalid,
        );
        is(
            comm::broadcast(&m, &a, &r[1..]),
            "broadcast root not in group",
            invalid,
        );
        is(
            comm::scatter(&m, &a, &[r[0].clone(), r[0].clone()], 0),
            "scatter duplicate ranks",
            invalid,
        );
        is(
            comm::all_reduce(&m, &[], ReduceOp::Sum),
            "no tensors",
            invalid,
        );
        let scalar = r[0].upload(&[], &[1.0]).unwrap();
        is(
            comm::all_gather(&m, &[scalar], 0),
            "gather of a 0-d tensor",
            range,
        );

        // Nothing was lost: the inputs and the mesh still work.
        let out = comm::all_reduce(&m, &[a.clone(), b.clone()], ReduceOp::Sum).unwrap();
        assert_eq!(
            identical("after errors", &out, &[0, 1]),
            f32_bits(&[3.0; 6]),
            "{name}"
        );
        assert_eq!(a_again.to_vec().unwrap(), vec![3.0; 6]);
        assert_eq!(from_other.to_vec().unwrap(), vec![1.0; 6]);
    }
}

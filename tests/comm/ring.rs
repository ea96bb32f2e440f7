//! The ring step `ring_shift` / `RingShift` (rank i's tensor moves to rank
//! i + 1 mod P) on both transports: ragged and empty tensors, i32, the
//! two-phase form with work recorded in between, and bad groups.

use crate::util::{mesh, meshes, shared_mesh};
use wgpu_tp::comm::{RingShift, ring_shift};

#[test]
fn ring_shift_moves_each_tensor_one_hop_on_both_transports() {
    for p in [1, 2, 3, 4] {
        for (kind, m) in meshes(p) {
            // Ragged rows per rank, including an empty one.
            let shards: Vec<_> = m
                .ranks()
                .iter()
                .map(|r| {
                    let rows = r.index() % 3;
                    let v: Vec<f32> = (0..rows * 2)
                        .map(|i| (100 * r.index() + i) as f32)
                        .collect();
                    r.upload(&[rows, 2], &v).unwrap()
                })
                .collect();
            let before: Vec<Vec<f32>> = shards.iter().map(|s| s.to_vec().unwrap()).collect();
            let out = ring_shift(&m, &shards).unwrap();
            for (i, o) in out.iter().enumerate() {
                let from = (i + p - 1) % p;
                assert_eq!(o.rank_index(), i, "{kind} P={p}");
                assert_eq!(o.shape(), shards[from].shape(), "{kind} P={p}");
                assert_eq!(o.to_vec().unwrap(), before[from], "{kind} P={p}: rank {i}");
            }
            // i32, and the two-phase form with work recorded in between.
            let ids: Vec<_> = m
                .ranks()
                .iter()
                .map(|r| r.upload_i32(&[3], &[r.index() as i32; 3]).unwrap())
                .collect();
            let shift = RingShift::start(&m, &ids).unwrap();
            let busy: Vec<_> = shards
                .iter()
                .map(|s| wgpu_tp::kernels::scale(s, 2.0).unwrap())
                .collect();
            let got = shift.finish().unwrap();
            for (i, g) in got.iter().enumerate() {
                assert_eq!(g.to_vec_i32().unwrap(), vec![((i + p - 1) % p) as i32; 3]);
            }
            drop(busy);
        }
    }
}

#[test]
fn ring_shift_rejects_bad_groups() {
    let m = mesh(2);
    let other = shared_mesh(2);
    assert!(ring_shift(&m, &[]).is_err(), "empty group");
    let a = m.ranks()[0].upload(&[2], &[1.0, 2.0]).unwrap();
    assert!(
        ring_shift(&m, &[a.clone(), a.clone()]).is_err(),
        "rank twice"
    );
    let b = other.ranks()[1].upload(&[2], &[1.0, 2.0]).unwrap();
    assert!(ring_shift(&m, &[a.clone(), b]).is_err(), "foreign tensor");
    let c = m.ranks()[1].upload_i32(&[2], &[1, 2]).unwrap();
    assert!(ring_shift(&m, &[a, c]).is_err(), "mixed dtypes");
}

//! `DTensor::matmul` with `transpose_w` past one storage binding, as a GPT's
//! tied head runs it: `h` `[T, K]` `Replicate` times each rank's vocab rows
//! of a table `[V, K]` `Shard(0)` stored in row blocks, giving logits stored
//! in token-row blocks. Logits and the tape's `dh`, `dE` (through blocked
//! `dlogits`) against f64 and the same product on unlimited devices, P = 1,
//! 2, 3; `dE` keeps the table's blocks. A bias with a blocked weight is
//! refused.

use crate::util::reference::gemm;
use crate::util::{Rng, assert_close, limited_mesh, mesh};
use wgpu_tp::{DTensor, MatmulOptions, Placement};

/// Bytes per binding: every shard of the table and the logits are blocked.
const LIMIT: u64 = 48 * 1024;
const VOCAB: usize = 773;
/// Rows of 64 elements: the GEMM's padded packs of a block fit one binding.
const K: usize = 64;
/// Logits `[50, ⌈773/3⌉]` pass 48 KiB at P = 3.
const T: usize = 50;
const TOL: f64 = 1e-5;

/// `(logits, dh, dE)` of the tied head on `m`, all on the host.
fn head(m: &wgpu_tp::Mesh, h: &[f32], e: &[f32], dl: &[f32], blocked: bool) -> [Vec<f32>; 3] {
    let hd = DTensor::from_host(m, &[T, K], h, Placement::Replicate)
        .unwrap()
        .requires_grad();
    let ed = DTensor::from_host(m, &[VOCAB, K], e, Placement::Shard(0))
        .unwrap()
        .requires_grad();
    let y = hd.matmul(&ed, true).unwrap();
    assert_eq!(y.placement(), Placement::Shard(1));
    let dld = DTensor::from_host(m, &[T, VOCAB], dl, Placement::Shard(1)).unwrap();
    for (what, t) in [("table", &ed), ("logits", &y), ("dlogits", &dld)] {
        let all = t.shards().iter().all(|s| s.is_blocked());
        assert_eq!(all, blocked, "{what} blocked on P={}", m.size());
    }
    y.backward_with(&dld).unwrap();
    let de = ed.grad().unwrap();
    for (s, e) in de.shards().iter().zip(ed.shards()) {
        assert_eq!(
            s.block_row_starts(),
            e.block_row_starts(),
            "dE keeps E's blocks"
        );
    }
    [
        y.to_host().unwrap(),
        hd.grad().unwrap().to_host().unwrap(),
        de.to_host().unwrap(),
    ]
}

#[test]
fn tied_head_past_one_binding_equals_f64_and_unlimited_devices_p1_2_3() {
    let mut rng = Rng::fresh("tied_head_blocked");
    let (h, e, dl) = (rng.vec(T * K), rng.vec(VOCAB * K), rng.vec(T * VOCAB));
    let want = [
        gemm(&h, &e, T, VOCAB, K, false, true),
        gemm(&dl, &e, T, K, VOCAB, false, false),
        gemm(&dl, &h, VOCAB, K, T, true, false),
    ];
    for p in [1, 2, 3] {
        let got = head(&limited_mesh(p, LIMIT, p > 1), &h, &e, &dl, true);
        let plain = head(&mesh(p), &h, &e, &dl, false);
        for (i, what) in ["logits", "dh", "dE"].iter().enumerate() {
            assert_close(&format!("P={p} {what}"), &got[i], &want[i], TOL);
            let plain64: Vec<f64> = plain[i].iter().map(|&v| v as f64).collect();
            assert_close(
                &format!("P={p} {what} vs unlimited"),
                &got[i],
                &plain64,
                TOL,
            );
        }
    }
}

#[test]
fn a_bias_with_a_blocked_weight_is_refused() {
    let m = limited_mesh(1, LIMIT, false);
    let h = DTensor::from_host(&m, &[2, K], &[0.5; 2 * K], Placement::Replicate).unwrap();
    let e = DTensor::from_host(&m, &[VOCAB, K], &vec![0.5; VOCAB * K], Placement::Replicate);
    let b = DTensor::from_host(&m, &[VOCAB], &vec![0.5; VOCAB], Placement::Replicate).unwrap();
    let opts = MatmulOptions {
        transpose_w: true,
        ..Default::default()
    };
    let e = e.unwrap();
    assert!(h.linear(&e, Some(&b), opts).is_err());
    assert!(h.matmul(&e, true).is_ok(), "usable after the error");
}

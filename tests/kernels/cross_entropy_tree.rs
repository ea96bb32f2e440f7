//! The cross-entropy row reductions in both forms (`RowsReduce`): an
//! invocation per row (CPU adapters' choice) and a workgroup per row with a
//! tree (GPUs' choice), forced here on whatever adapter runs the suite,
//! against f64 on padded shards, rows narrower and wider than a workgroup.
//! The max is exact, so both forms give its bits; the sums are within f32
//! rounding of f64.

use crate::util::{Rng, assert_close, mesh};
use wgpu_tp::kernels::{self, RowsReduce, VocabShard};

#[test]
fn tree_and_serial_row_reductions_match_f64_and_the_max_bit_for_bit() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("ce_tree");
    // (T, Vr, start, valid_vocab): padding inside the shard, none, a shard
    // wholly in padding, rows of 1..4 workgroups and ragged ends.
    for &(t_rows, vr, start, valid) in &[
        (7usize, 13usize, 5usize, 14usize),
        (13, 17, 34, 40),
        (3, 9, 9, 9),
        (5, 1000, 0, 997),
        (17, 600, 300, 1000),
        (2, 1031, 0, 1031),
    ] {
        let shard = VocabShard {
            start,
            valid_vocab: valid,
        };
        let vc = valid.saturating_sub(start).min(vr);
        let mut z: Vec<f32> = rng.vec(t_rows * vr).iter().map(|x| 6.0 * x).collect();
        for row in 0..t_rows {
            for j in vc..vr {
                z[row * vr + j] = 1e3; // padding must not leak into anything
            }
        }
        let tz = r.upload(&[t_rows, vr], &z).unwrap();
        let max_ref: Vec<f64> = (0..t_rows)
            .map(|row| {
                (0..vc)
                    .map(|j| z[row * vr + j] as f64)
                    .fold(-3.4e38, f64::max)
            })
            .collect();
        let sum_ref: Vec<f64> = (0..t_rows)
            .map(|row| (0..vc).map(|j| z[row * vr + j] as f64).sum())
            .collect();
        let gmax: Vec<f32> = max_ref
            .iter()
            .map(|&x| if vc == 0 { 2.5 } else { x as f32 + 0.5 })
            .collect();
        let tm = r.upload(&[t_rows], &gmax).unwrap();
        let sexp_ref: Vec<f64> = (0..t_rows)
            .map(|row| {
                (0..vc)
                    .map(|j| (z[row * vr + j] as f64 - gmax[row] as f64).exp())
                    .sum()
            })
            .collect();
        let what = |w: &str, reduce: RowsReduce| {
            format!("{w} {reduce:?} {t_rows}x{vr} start {start} valid {valid}")
        };
        let mut maxes = Vec::new();
        for reduce in [RowsReduce::Serial, RowsReduce::Tree] {
            let got = kernels::row_max_with(&tz, shard, reduce)
                .unwrap()
                .to_vec()
                .unwrap();
            assert_close(&what("row_max", reduce), &got, &max_ref, 1e-6);
            maxes.push(got);
            let got = kernels::row_sum_with(&tz, shard, reduce)
                .unwrap()
                .to_vec()
                .unwrap();
            assert_close(&what("row_sum", reduce), &got, &sum_ref, 1e-5);
            let got = kernels::row_sum_exp_with(&tz, &tm, shard, reduce)
                .unwrap()
                .to_vec()
                .unwrap();
            assert_close(&what("row_sum_exp", reduce), &got, &sexp_ref, 1e-5);
        }
        assert_eq!(
            maxes[0],
            maxes[1],
            "{}",
            what("row_max bits", RowsReduce::Tree)
        );
    }
}

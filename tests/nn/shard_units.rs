//! Linear layers whose features are split in whole units (attention heads):
//! `shard_unit = head_dim` keeps whole heads on a rank, the first
//! `heads % P` ranks take one more and a rank may hold none (3 heads on 4
//! ranks). The fused QKV column (stride 3) and the output row layer equal the
//! f64 reference on every world size, forward and backward, with the plain
//! layers' communication.

use crate::util::reference::{gemm, linear, sum_rows, widen};
use crate::util::{Rng, WORLD_SIZES, assert_close, count_lock, counting_mesh};
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, RowParallelConfig, RowParallelLinear,
};
use wgpu_tp::shard::split_range;
use wgpu_tp::{Collective, DTensor, Placement};

const TOL: f64 = 1e-5;

/// (tokens, hidden, heads, head_dim): 3 heads leave rank 3 of 4 and ranks
/// 3.. of 8 without heads.
const SIZES: &[(usize, usize, usize, usize)] = &[(5, 7, 3, 4), (3, 6, 5, 2)];

/// Master column of each logical output column of a stride-3 head-split
/// column layer: rank by rank, its heads of q, then of k, then of v.
fn qkv_order(heads: usize, d: usize, p: usize) -> Vec<usize> {
    let mut order = Vec::new();
    for r in 0..p {
        for block in 0..3 {
            for h in split_range(heads, p, r) {
                order.extend((0..d).map(|i| block * heads * d + h * d + i));
            }
        }
    }
    order
}

#[test]
fn fused_qkv_column_keeps_whole_heads_p1_2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("qkv_units");
    for &(t, hidden, heads, d) in SIZES {
        let out = 3 * heads * d;
        let (w, b, x) = (rng.vec(out * hidden), rng.vec(out), rng.vec(t * hidden));
        let y_ref = linear(&x, &w, Some(&b), t, hidden, out);
        for &p in WORLD_SIZES {
            let m = counting_mesh(p);
            let mut cfg = ColumnParallelConfig::new(hidden, out);
            (cfg.stride, cfg.shard_unit) = (3, d);
            let layer = ColumnParallelLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host(&m, &[t, hidden], &x, Placement::Replicate)
                .unwrap()
                .requires_grad();
            let y = layer.forward(&xd).unwrap();
            let what = format!("qkv (P={p}, {heads} heads of {d})");
            assert_eq!(y.placement(), Placement::Shard(1), "{what}");
            for r in 0..p {
                let local_heads = split_range(heads, p, r).len();
                assert_eq!(
                    y.shards()[r].shape(),
                    [t, 3 * local_heads * d],
                    "{what} rank {r}"
                );
            }
            let order = qkv_order(heads, d, p);
            let want: Vec<f64> = (0..t)
                .flat_map(|i| order.iter().map(move |&j| (i, j)))
                .map(|(i, j)| y_ref[i * out + j])
                .collect();
            let yv = y.to_host().unwrap();
            assert_close(&format!("{what} y"), &yv, &want, TOL);
            // dy = y: the master-order gradients need no permutation.
            m.reset_comm_stats();
            y.backward_with(&y.detach()).unwrap();
            let dx = xd.grad().unwrap();
            if p > 1 {
                assert_eq!(
                    m.comm_calls(Collective::AllReduce),
                    1,
                    "{what}: dx all-reduce"
                );
            }
            let y32: Vec<f32> = y_ref.iter().map(|&v| v as f32).collect();
            let dx_ref = gemm(&y32, &w, t, hidden, out, false, false);
            assert_close(&format!("{what} dx"), &dx.to_host().unwrap(), &dx_ref, TOL);
            let dw_ref = gemm(&y32, &x, out, hidden, t, true, false);
            let dw = layer.weight.master_grad().unwrap().unwrap();
            assert_close(&format!("{what} dW"), &dw, &dw_ref, TOL);
            let db = layer.bias.as_ref().unwrap().master_grad().unwrap().unwrap();
            assert_close(&format!("{what} db"), &db, &sum_rows(&y32, t, out), TOL);
            assert_eq!(
                layer.master_weight().unwrap(),
                w,
                "{what}: master round trip"
            );
        }
    }
}

#[test]
fn head_split_row_layer_matches_reference_p1_2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("row_units");
    for &(t, hidden, heads, d) in SIZES {
        let inp = heads * d;
        let (w, b, x, dy) = (
            rng.vec(hidden * inp),
            rng.vec(hidden),
            rng.vec(t * inp),
            rng.vec(t * hidden),
        );
        for &p in WORLD_SIZES {
            let m = counting_mesh(p);
            let mut cfg = RowParallelConfig::new(inp, hidden);
            cfg.shard_unit = d;
            let layer = RowParallelLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host_in_units(&m, &[t, inp], &x, Placement::Shard(1), d)
                .unwrap()
                .requires_grad();
            assert_eq!(xd.shard_unit(), d);
            m.reset_comm_stats();
            let y = layer.forward(&xd).unwrap();
            let what = format!("row (P={p}, {heads} heads of {d})");
            if p > 1 {
                assert_eq!(m.comm_calls(Collective::AllReduce), 1, "{what}: forward");
            }
            let y_ref = linear(&x, &w, Some(&b), t, inp, hidden);
            assert_close(&format!("{what} y"), &y.to_host().unwrap(), &y_ref, TOL);
            let dyd = DTensor::from_host(&m, &[t, hidden], &dy, Placement::Replicate).unwrap();
            m.reset_comm_stats();
            y.backward_with(&dyd).unwrap();
            let dx = xd.grad().unwrap();
            assert_eq!(
                m.comm_stats().len(),
                0,
                "{what}: backward communicates nothing"
            );
            assert_eq!(dx.shard_unit(), if p > 1 { d } else { dx.shard_unit() });
            let dx_ref = gemm(&dy, &w, t, inp, hidden, false, false);
            assert_close(&format!("{what} dx"), &dx.to_host().unwrap(), &dx_ref, TOL);
            let dw = layer.weight.master_grad().unwrap().unwrap();
            let dw_ref = gemm(&dy, &x, hidden, inp, t, true, false);
            assert_close(&format!("{what} dW"), &dw, &dw_ref, TOL);
            let db = layer.bias.as_ref().unwrap().master_grad().unwrap().unwrap();
            assert_close(
                &format!("{what} db"),
                &db,
                &widen(&sum_rows_f32(&dy, t, hidden)),
                TOL,
            );
        }
    }
}

fn sum_rows_f32(x: &[f32], m: usize, n: usize) -> Vec<f32> {
    sum_rows(x, m, n).iter().map(|&v| v as f32).collect()
}

#[test]
fn head_split_layers_reject_what_they_cannot_slice() {
    // Its row forward all-reduces on the counting mesh: hold the lock so a
    // counting test running alongside sees only its own calls.
    let _counting = count_lock();
    let m = counting_mesh(4);
    let (heads, d, hidden) = (3, 4, 5);
    let w = vec![0.5; 3 * heads * d * hidden];
    let mut cfg = ColumnParallelConfig::new(hidden, 3 * heads * d);
    (cfg.stride, cfg.shard_unit, cfg.gather_output) = (3, d, true);
    let err = ColumnParallelLinear::from_master(&m, cfg, &w, Some(&[0.0; 36])).unwrap_err();
    assert!(err.to_string().contains("gather_output"), "{err}");
    let mut cfg = ColumnParallelConfig::new(hidden, 3 * heads * d);
    (cfg.stride, cfg.shard_unit) = (3, 5);
    let err = ColumnParallelLinear::from_master(&m, cfg, &w, Some(&[0.0; 36])).unwrap_err();
    assert!(err.to_string().contains("multiple"), "{err}");
    // A row layer fed an input split plainly rather than by heads.
    let mut cfg = RowParallelConfig::new(heads * d, hidden);
    (cfg.shard_unit, cfg.bias) = (d, false);
    let wr = vec![0.5; hidden * heads * d];
    let row = RowParallelLinear::from_master(&m, cfg, &wr, None).unwrap();
    let x = DTensor::from_host(&m, &[2, heads * d], &[1.0; 24], Placement::Shard(1)).unwrap();
    let err = row.forward(&x).unwrap_err();
    assert!(err.to_string().contains("line up"), "{err}");
    // The layer still works after the error.
    let x = DTensor::from_host_in_units(&m, &[2, heads * d], &[1.0; 24], Placement::Shard(1), d)
        .unwrap();
    let y = row.forward(&x).unwrap().to_host().unwrap();
    assert_close("row after error", &y, &[6.0; 10].map(f64::from), 1e-6);
}

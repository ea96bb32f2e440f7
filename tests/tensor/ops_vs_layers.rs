//! The tensor operations written as the linear layers use them give the
//! layers' results bit for bit, for every world size and ragged sizes (some
//! ranks hold nothing at P = 8): column forward `x.matmul(W, true).add_row(b)`,
//! row forward `x.matmul(W, true)` in f32, all-reduced, then `add_row(b)`;
//! and the layers' taped backward gives the explicit pieces' bits (`dx`,
//! `db`).

use crate::util::{Rng, WORLD_SIZES, mesh, words};
use wgpu_tp::nn::{
    ColumnParallelConfig, ColumnParallelLinear, RowParallelConfig, RowParallelLinear,
};
use wgpu_tp::{DTensor, DType, MatmulOptions, Placement};

/// Sizes (tokens, in, out): ragged, and one where some ranks hold nothing at P = 8.
const SIZES: &[(usize, usize, usize)] = &[(7, 13, 17), (5, 3, 6)];

/// Every shard's bits equal.
#[track_caller]
fn same_bits(what: &str, a: &DTensor, b: &DTensor) {
    assert_eq!(a.placement(), b.placement(), "{what}: placement");
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    assert_eq!(words(a.shards()), words(b.shards()), "{what}: bits");
}

#[test]
fn column_layer_equals_matmul_then_add_row_bit_for_bit_p1_2_3_4_8() {
    let mut rng = Rng::fresh("ops_vs_column");
    for &(t, inp, out) in SIZES {
        let (w, b) = (rng.vec(out * inp), rng.vec(out));
        let (x, dy) = (rng.vec(t * inp), rng.vec(t * out));
        for &p in WORLD_SIZES {
            let m = mesh(p);
            let what = format!("column P={p} {t}x{inp}x{out}");
            let cfg = ColumnParallelConfig::new(inp, out);
            let layer = ColumnParallelLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host(&m, &[t, inp], &x, Placement::Replicate)
                .unwrap()
                .requires_grad();
            let y = layer.forward(&xd).unwrap();
            let wv = &layer.weight.value.detach();
            let bv = &layer.bias.as_ref().unwrap().value.detach();
            let xd_plain = &xd.detach();
            let ops = xd_plain.matmul(wv, true).unwrap().add_row(bv).unwrap();
            same_bits(&format!("{what}: y"), &y, &ops);
            // Backward: dx = all-reduce(dy_r · W_r), db_r = Σ_rows dy_r.
            let dyd = DTensor::from_host(&m, &[t, out], &dy, Placement::Shard(1)).unwrap();
            y.backward_with(&dyd).unwrap();
            let dx = xd.grad().unwrap();
            let ops_dx = dyd.matmul(wv, false).unwrap();
            let ops_dx = ops_dx.redistribute(Placement::Replicate).unwrap();
            same_bits(&format!("{what}: dx"), &dx, &ops_dx);
            let db = layer.bias.as_ref().unwrap().grad().unwrap();
            same_bits(&format!("{what}: db"), &db, &dyd.sum_rows().unwrap());
        }
    }
}

#[test]
fn row_layer_equals_matmul_reduce_add_row_bit_for_bit_p1_2_3_4_8() {
    let mut rng = Rng::fresh("ops_vs_row");
    for &(t, inp, out) in SIZES {
        let (w, b) = (rng.vec(out * inp), rng.vec(out));
        let (x, dy) = (rng.vec(t * inp), rng.vec(t * out));
        for &p in WORLD_SIZES {
            let m = mesh(p);
            let what = format!("row P={p} {t}x{inp}x{out}");
            let cfg = RowParallelConfig::new(inp, out);
            let layer = RowParallelLinear::from_master(&m, cfg, &w, Some(&b)).unwrap();
            let xd = DTensor::from_host(&m, &[t, inp], &x, Placement::Shard(1))
                .unwrap()
                .requires_grad();
            let y = layer.forward(&xd).unwrap();
            let wv = &layer.weight.value.detach();
            let bv = &layer.bias.as_ref().unwrap().value.detach();
            let xd_plain = &xd.detach();
            let opts = MatmulOptions {
                transpose_w: true,
                out_dtype: Some(DType::F32),
            };
            let z = xd_plain.matmul_with(wv, opts).unwrap();
            let ops = z.redistribute(Placement::Replicate).unwrap();
            let ops = ops.add_row(bv).unwrap();
            same_bits(&format!("{what}: y"), &y, &ops);
            // Backward: dx_r = dy · W_r (Shard(1)), db = Σ_rows dy (replicated).
            let dyd = DTensor::from_host(&m, &[t, out], &dy, Placement::Replicate).unwrap();
            y.backward_with(&dyd).unwrap();
            let dx = xd.grad().unwrap();
            same_bits(&format!("{what}: dx"), &dx, &dyd.matmul(wv, false).unwrap());
            let db = layer.bias.as_ref().unwrap().grad().unwrap();
            same_bits(&format!("{what}: db"), &db, &dyd.sum_rows().unwrap());
        }
    }
}

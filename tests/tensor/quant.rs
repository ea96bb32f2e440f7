//! Quantized weights as DTensors at every world size, both transports:
//! column parallel (rows split in any units), row parallel (K split in
//! whole blocks, the first ranks one more, some ranks none), replicated;
//! against f64 on the host's dequantized weights (1e-5 norm-wise). The
//! tape carries gradients to the input of a quantized product and leaves
//! the weight without one; a row-parallel layer re-splits an input split
//! by heads to the weight's blocks.

use crate::util::reference::gemm;
use crate::util::{Rng, WORLD_SIZES, assert_close, meshes};
use wgpu_tp::nn::{Parameter, RowParallelConfig, RowParallelLinear};
use wgpu_tp::quant::{QuantType, dequantize_rows, quantize_rows};
use wgpu_tp::{DTensor, Placement};

const TOL: f64 = 1e-5;

#[test]
fn quantized_products_shard_like_f32_ones_p1_2_3_4_8() {
    let mut rng = Rng::fresh("quant_dtensor");
    // K of 5 blocks: at P = 8 three ranks hold none of a row-parallel K.
    for (q, t, n, blocks) in [(QuantType::Q8_0, 7, 13, 5), (QuantType::Q4K, 3, 17, 5)] {
        let k = blocks * q.block_len();
        let (x, w) = (rng.vec(t * k), rng.vec(n * k));
        let wb = quantize_rows(q, &w, n, k).unwrap();
        let wf = dequantize_rows(q, &wb, n, k).unwrap();
        let want = gemm(&x, &wf, t, n, k, false, true);
        let bl = q.block_len();
        for &p in WORLD_SIZES {
            for (transport, m) in meshes(p) {
                let what = format!("{q} {transport} P={p}");
                for (xp, wp, unit) in [
                    (Placement::Replicate, Placement::Shard(0), 1),
                    (Placement::Replicate, Placement::Replicate, 1),
                    (Placement::Shard(1), Placement::Shard(1), bl),
                ] {
                    let wd = DTensor::from_quant_blocks(&m, &[n, k], q, &wb, wp, unit).unwrap();
                    assert_eq!(wd.to_host().unwrap(), wf, "{what} {wp:?} read back");
                    let xd = DTensor::from_host(&m, &[t, k], &x, Placement::Replicate).unwrap();
                    let xd = xd.redistribute_in_units(xp, unit).unwrap();
                    let y = xd.matmul(&wd, true).unwrap();
                    let y = y.redistribute(Placement::Replicate).unwrap();
                    assert_close(&format!("{what} {wp:?}"), &y.to_host().unwrap(), &want, TOL);
                }
                // Row parallel in units that are not whole blocks: refused.
                let bad =
                    DTensor::from_quant_blocks(&m, &[n, k], q, &wb, Placement::Shard(1), bl / 2);
                assert_eq!(bad.is_err(), p > 1, "{what}");
            }
        }
    }
}

#[test]
fn gradients_reach_the_input_of_a_quantized_product_not_the_weight_p1_2_3_4_8() {
    let mut rng = Rng::fresh("quant_grad");
    let q = QuantType::Q4_0;
    let (t, n, k) = (5, 11, 96);
    let (x, w, dy) = (rng.vec(t * k), rng.vec(n * k), rng.vec(t * n));
    let wb = quantize_rows(q, &w, n, k).unwrap();
    let wf = dequantize_rows(q, &wb, n, k).unwrap();
    let want_dx = gemm(&dy, &wf, t, k, n, false, false);
    for &p in WORLD_SIZES {
        for (transport, m) in meshes(p) {
            let what = format!("{transport} P={p}");
            let wd =
                DTensor::from_quant_blocks(&m, &[n, k], q, &wb, Placement::Shard(0), 1).unwrap();
            let mut param =
                Parameter::from_master(&m, &[n, k], &w, Placement::Shard(0), 1).unwrap();
            param.load_quant_master(q, &wb).unwrap();
            for w in [wd, param.value.clone()] {
                let xd = DTensor::from_host(&m, &[t, k], &x, Placement::Replicate)
                    .unwrap()
                    .requires_grad();
                let y = xd.matmul(&w, true).unwrap();
                let dyd = DTensor::from_host(&m, &[t, n], &dy, Placement::Replicate)
                    .unwrap()
                    .redistribute(Placement::Shard(1))
                    .unwrap();
                y.backward_with(&dyd).unwrap();
                let dx = xd
                    .grad()
                    .unwrap()
                    .redistribute(Placement::Replicate)
                    .unwrap();
                assert_close(&format!("{what} dx"), &dx.to_host().unwrap(), &want_dx, TOL);
            }
            assert!(
                param.grad().is_none(),
                "{what}: a quantized weight has no gradient"
            );
        }
    }
}

/// o_proj's input is split by heads (64 columns); a Q4_K weight splits its
/// K in blocks of 256 (4 heads): the layer re-splits its input.
#[test]
fn row_parallel_layers_re_split_inputs_to_whole_blocks_p1_2_3_4_8() {
    let mut rng = Rng::fresh("quant_row_layer");
    let (heads, d, out, t) = (12, 64, 48, 3);
    let k = heads * d;
    let (x, w) = (rng.vec(t * k), rng.vec(out * k));
    for q in [QuantType::Q4K, QuantType::Q8_0] {
        let wb = quantize_rows(q, &w, out, k).unwrap();
        let wf = dequantize_rows(q, &wb, out, k).unwrap();
        let want = gemm(&x, &wf, t, out, k, false, true);
        for &p in WORLD_SIZES {
            for (transport, m) in meshes(p) {
                let mut c = RowParallelConfig::new(k, out);
                (c.bias, c.shard_unit) = (false, d);
                let mut layer = RowParallelLinear::from_master(&m, c, &w, None).unwrap();
                layer.weight.load_quant_master(q, &wb).unwrap();
                let xd = DTensor::from_host(&m, &[t, k], &x, Placement::Replicate)
                    .unwrap()
                    .redistribute_in_units(Placement::Shard(1), d)
                    .unwrap();
                let y = layer.forward(&xd).unwrap();
                assert_close(
                    &format!("{q} {transport} P={p}"),
                    &y.to_host().unwrap(),
                    &want,
                    TOL,
                );
            }
        }
    }
}

//! Every fixture case against the reference tools' bytes and floats.

use wgpu_tp::quant::{QuantType, dequantize, dequantize_rows, quantize_rows};

use super::{assert_same_blocks, assert_same_floats, bytes, cases, floats};

#[test]
fn quantize_rows_matches_the_references() {
    for (case, rows, k) in cases() {
        let x = floats(&format!("{case}/input.f32"));
        assert_eq!(x.len(), rows * k, "{case}: input length");
        for q in QuantType::ALL {
            let got = quantize_rows(q, &x, rows, k).unwrap();
            let want = bytes(&format!("{case}/{q}.q"));
            assert_same_blocks(&format!("{case} {q}"), q, &got, &want);
        }
    }
}

#[test]
fn dequantize_rows_matches_gguf_py() {
    for (case, rows, k) in cases() {
        for q in QuantType::ALL {
            let blocks = bytes(&format!("{case}/{q}.q"));
            let got = dequantize_rows(q, &blocks, rows, k).unwrap();
            let want = floats(&format!("{case}/{q}.f32"));
            assert_same_floats(&format!("{case} {q}"), &got, &want);
        }
    }
}

/// Random bytes reach every bit pattern: odd scale and minimum bytes,
/// infinite and NaN f16 scales, all high bits.
#[test]
fn dequantize_random_blocks_matches_gguf_py() {
    for q in QuantType::ALL {
        let blocks = bytes(&format!("random/{q}.q"));
        let want = floats(&format!("random/{q}.f32"));
        assert!(!blocks.is_empty() && blocks.len().is_multiple_of(q.block_bytes()));
        let mut got = vec![0.0; want.len()];
        dequantize(q, &blocks, &mut got).unwrap();
        assert_same_floats(&format!("random {q}"), &got, &want);
    }
}

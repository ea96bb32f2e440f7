//! Bad input is an error that says what was expected, never a panic.

use wgpu_tp::quant::{
    QuantType, bf16_to_f32, dequantize, dequantize_rows, f16_to_f32, quantize, quantize_rows,
};

/// The error's message, which must mention every one of `words`.
#[track_caller]
fn message<T: std::fmt::Debug>(r: wgpu_tp::Result<T>, words: &[&str]) {
    let e = r.expect_err("expected an error").to_string();
    for w in words {
        assert!(e.contains(w), "{e:?} does not mention {w:?}");
    }
}

#[test]
fn quantize_needs_whole_blocks() {
    message(quantize(QuantType::Q4_0, &[0.5; 33]), &["33", "32", "q4_0"]);
    message(quantize(QuantType::Q6K, &[0.5; 255]), &["255", "256"]);
    assert_eq!(quantize(QuantType::Q8_0, &[]).unwrap(), Vec::<u8>::new());
}

#[test]
fn quantize_rows_needs_rows_times_k_values() {
    message(
        quantize_rows(QuantType::Q8_0, &[0.0; 10], 3, 4),
        &["3 rows of 4", "10"],
    );
    message(
        quantize_rows(QuantType::Q8_0, &[0.0; 10], usize::MAX, 2),
        &["rows"],
    );
    // Empty shapes are empty tensors.
    assert_eq!(
        quantize_rows(QuantType::Q4K, &[], 5, 0).unwrap(),
        Vec::<u8>::new()
    );
    assert_eq!(
        quantize_rows(QuantType::Q4K, &[], 0, 300).unwrap(),
        Vec::<u8>::new()
    );
    // A ragged row still takes a whole block.
    assert_eq!(
        quantize_rows(QuantType::Q5K, &[1.0], 1, 1).unwrap().len(),
        176
    );
}

#[test]
fn non_finite_weights_are_refused() {
    for q in QuantType::ALL {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = vec![0.25; 512];
            x[300] = bad;
            message(
                quantize(q, &x),
                &[&q.to_string(), "weight 300", "NaN and infinity"],
            );
        }
    }
    // In a later row of a tensor split over threads, the index is global.
    let mut x = vec![0.1; 64 * 4096];
    x[63 * 4096 + 7] = f32::NAN;
    message(
        quantize_rows(QuantType::Q8_0, &x, 64, 4096),
        &["weight 258055"],
    );
}

#[test]
fn dequantize_needs_whole_blocks_and_room() {
    let mut out = vec![0.0; 64];
    message(
        dequantize(QuantType::Q8_0, &[0; 35], &mut out),
        &["35", "34", "q8_0"],
    );
    message(
        dequantize(QuantType::Q8_0, &[0; 34], &mut out),
        &["32", "64"],
    );
    message(
        dequantize(QuantType::Q4K, &[0; 144], &mut out),
        &["256", "64"],
    );
    dequantize(QuantType::Q8_0, &[0; 68], &mut out).unwrap();
    dequantize(QuantType::Q8_0, &[], &mut []).unwrap();
}

#[test]
fn dequantize_rows_needs_the_rows_bytes() {
    // 2 rows of 40 Q4_0 weights: 2 blocks (36 bytes) a row.
    message(
        dequantize_rows(QuantType::Q4_0, &[0; 70], 2, 40),
        &["2 rows of 40", "36", "70"],
    );
    message(
        dequantize_rows(QuantType::Q4_0, &[0; 72], usize::MAX, 40),
        &["rows"],
    );
    assert_eq!(
        dequantize_rows(QuantType::Q4_0, &[0; 72], 2, 40)
            .unwrap()
            .len(),
        80
    );
    assert!(
        dequantize_rows(QuantType::Q6K, &[], 0, 256)
            .unwrap()
            .is_empty()
    );
    assert!(
        dequantize_rows(QuantType::Q6K, &[], 7, 0)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn half_floats_convert_exactly() {
    let mut out = [0.0; 3];
    f16_to_f32(&[0x00, 0x3c, 0x00, 0xfc, 0x01, 0x00], &mut out).unwrap();
    assert_eq!(out, [1.0, f32::NEG_INFINITY, 2f32.powi(-24)]);
    bf16_to_f32(&[0x80, 0x3f, 0x00, 0x80, 0x49, 0x40], &mut out).unwrap();
    assert_eq!(
        out.map(f32::to_bits),
        [0x3f80_0000, 0x8000_0000, 0x4049_0000]
    );
    message(f16_to_f32(&[0; 5], &mut out), &["5 bytes", "3 values"]);
    message(bf16_to_f32(&[0; 8], &mut out), &["8 bytes", "3 values"]);
}

//! Large tensors are split over threads by rows (or blocks); the bytes and
//! floats must be those of one row at a time.

use wgpu_tp::quant::{QuantType, dequantize, dequantize_rows, quantize, quantize_rows};

use crate::util::Rng;

#[test]
fn split_rows_equal_one_row_at_a_time() {
    let mut rng = Rng::fresh("quant_split_rows");
    // Ragged rows: 37.5 blocks of 32, 4.7 of 256; many chunks of work.
    let (rows, k) = (96, 1200);
    let x: Vec<f32> = rng.vec(rows * k).iter().map(|v| v * v * v * 0.05).collect();
    for q in QuantType::ALL {
        let all = quantize_rows(q, &x, rows, k).unwrap();
        let row_bytes = q.bytes_for(1, k);
        assert_eq!(all.len(), rows * row_bytes);
        for (r, got) in all.chunks(row_bytes).enumerate() {
            let one = quantize_rows(q, &x[r * k..(r + 1) * k], 1, k).unwrap();
            assert_eq!(got, &one[..], "{q}: row {r}");
        }
        let deq = dequantize_rows(q, &all, rows, k).unwrap();
        for (r, got) in deq.chunks(k).enumerate() {
            let one = dequantize_rows(q, &all[r * row_bytes..(r + 1) * row_bytes], 1, k).unwrap();
            assert_eq!(got, &one[..], "{q}: dequantized row {r}");
        }
    }
}

#[test]
fn flat_blocks_equal_rows_of_whole_blocks() {
    let x = Rng::fresh("quant_flat_blocks").vec(256 * 300);
    for q in QuantType::ALL {
        let flat = quantize(q, &x).unwrap();
        assert_eq!(flat, quantize_rows(q, &x, 300, 256).unwrap(), "{q}");
        let mut deq = vec![0.0; x.len()];
        dequantize(q, &flat, &mut deq).unwrap();
        assert_eq!(deq, dequantize_rows(q, &flat, 300, 256).unwrap(), "{q}");
        // Dequantized weights are close to the originals.
        let err = x
            .iter()
            .zip(&deq)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(err < 0.5, "{q}: max error {err}");
    }
}

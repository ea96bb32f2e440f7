//! `src/quant/`: host quantization and dequantization against the reference
//! tools, bit for bit. The fixtures (`tests/fixtures/quant/`) come from
//! `make_quant_fixtures.py`: gguf-py 0.19.0 for Q8_0, Q4_0, Q4_1, Q5_0,
//! Q5_1 and every dequantization, ggml's compiled `quantize_row_*_ref` for
//! the K-quants.
//! - `reference`: every fixture case (weight-like, heavy-tailed, offset,
//!   zero, tiny, huge, ragged and signed-zero rows) quantized and
//!   dequantized, and blocks of random bytes dequantized;
//! - `bulk`: hashes of 2^18 weights' bytes and floats, regenerated here;
//! - `golden`: the SHA-256-checked golden vectors of the GGUF notes §2.8,
//!   and the -0 scale of a Q4_0 block of zeros;
//! - `threads`: rows split over threads give the bytes of one row at a time;
//! - `errors`: wrong lengths and non-finite weights are errors, not panics.

mod bulk;
mod errors;
mod golden;
mod reference;
mod threads;

use std::path::PathBuf;

use wgpu_tp::quant::QuantType;

/// The fixture folder.
fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quant")
}

/// A fixture file's bytes.
fn bytes(rel: &str) -> Vec<u8> {
    let path = fixtures().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fixture file of little-endian f32s.
fn floats(rel: &str) -> Vec<f32> {
    bytes(rel)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// One case of `manifest.json`: its name, rows and row length.
fn cases() -> Vec<(String, usize, usize)> {
    let text = String::from_utf8(bytes("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let n = |key: &str| c[key].as_u64().unwrap() as usize;
            (c["name"].as_str().unwrap().to_string(), n("rows"), n("k"))
        })
        .collect()
}

/// Bit-equal floats, any NaN equal to any NaN (its payload and sign follow
/// the CPU's default NaN, which differs between x86 and ARM).
#[track_caller]
fn assert_same_floats(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad = got
        .iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()));
    if let Some(i) = bad {
        panic!("{what}: value {i} is {:e}, want {:e}", got[i], want[i]);
    }
}

/// Bit-equal blocks, naming the first differing block and byte.
#[track_caller]
fn assert_same_blocks(what: &str, q: QuantType, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let b = i / q.block_bytes();
        let range = b * q.block_bytes()..(b + 1) * q.block_bytes();
        panic!(
            "{what}: block {b} differs at byte {}:\n got  {:02x?}\n want {:02x?}",
            i % q.block_bytes(),
            &got[range.clone()],
            &want[range]
        );
    }
}

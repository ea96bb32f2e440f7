//! Many blocks without committing them: `make_quant_fixtures.py` hashed
//! (FNV-1a 64) each type's reference bytes and gguf-py's dequantized
//! floats for 2^18 weights that this file regenerates with the same
//! generator and f32 operations. Fusing the multiply-add of one K-quant
//! sum changes a few blocks in a thousand (0.4% of Q4_K's, 0.9% of
//! Q6_K's, measured): too rare for the small cases to show, while these
//! are 1024 blocks of each K-quant and 8192 of each other type.

use wgpu_tp::quant::{QuantType, dequantize_rows, quantize_rows};

use super::bytes;
use crate::util::Rng;

/// The script's `bulk_input`: draw i makes weight i, draw n + j the kind
/// and power-of-two scale of sub-block j.
fn bulk_input(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::seeded(seed);
    let w: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
    let sub: Vec<u64> = (0..n / 32).map(|_| rng.next_u64()).collect();
    w.iter()
        .enumerate()
        .map(|(i, &w)| {
            let s = sub[i / 32];
            let u = (w >> 40) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0;
            let scale = 2f32.powi(((s >> 8) % 17) as i32 - 12);
            let cube = u * u * u;
            match s % 4 {
                0 => cube * scale,
                1 => cube.abs() * scale + scale,
                2 if (w >> 8) & 1 == 0 => cube * scale,
                2 => 0.0,
                _ => (u * 8.0).floor() / 8.0 * scale,
            }
        })
        .collect()
}

fn fnv1a64(data: impl IntoIterator<Item = u8>) -> String {
    let h = data.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{h:016x}")
}

#[test]
fn bulk_hashes_match_the_references() {
    let text = String::from_utf8(bytes("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let bulk = &manifest["bulk"];
    let n = bulk["weights"].as_u64().unwrap() as usize;
    let k = bulk["k"].as_u64().unwrap() as usize;
    let x = bulk_input(n, bulk["seed"].as_u64().unwrap());
    for q in QuantType::ALL {
        let want = &bulk["fnv1a64"][q.to_string()];
        let blocks = quantize_rows(q, &x, n / k, k).unwrap();
        assert_eq!(
            fnv1a64(blocks.iter().copied()),
            want["quantized"],
            "{q} bytes"
        );
        let deq = dequantize_rows(q, &blocks, n / k, k).unwrap();
        let deq_bytes = deq.iter().flat_map(|v| v.to_le_bytes());
        assert_eq!(fnv1a64(deq_bytes), want["dequantized"], "{q} dequantized");
    }
}

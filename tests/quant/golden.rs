//! The golden vectors of the GGUF notes (§2.8): one row of 1024 weights
//! quantized with every type. `make_quant_fixtures.py` checked the SHA-256
//! of the reference's bytes and floats against the notes before writing
//! them as case `golden`; here the input is rebuilt from its formula and
//! the crate must give those bytes and floats.

use wgpu_tp::quant::{QuantType, dequantize, quantize};

use super::{assert_same_blocks, assert_same_floats, bytes, floats};

/// `x[i] = ((i*37 % 101) - 50) / 64 * (1 + i/256)`, then `x[0..32] = 0`.
fn golden_input() -> Vec<f32> {
    let mut x: Vec<f32> = (0..1024)
        .map(|i: i32| (i * 37 % 101 - 50) as f32 / 64.0 * (1 + i / 256) as f32)
        .collect();
    x[..32].fill(0.0);
    x
}

#[test]
fn golden_vectors() {
    let x = golden_input();
    assert_eq!(x, floats("golden/input.f32"));
    for q in QuantType::ALL {
        let got = quantize(q, &x).unwrap();
        let want = bytes(&format!("golden/{q}.q"));
        assert_eq!(got.len(), q.bytes_for(1, 1024));
        assert_same_blocks(&format!("golden {q}"), q, &got, &want);
        let mut deq = vec![0.0; 1024];
        dequantize(q, &got, &mut deq).unwrap();
        assert_same_floats(
            &format!("golden {q}"),
            &deq,
            &floats(&format!("golden/{q}.f32")),
        );
    }
}

/// The single blocks the notes spell out in hex.
#[test]
fn golden_blocks() {
    let x = golden_input();
    let hex = |q: QuantType, block: usize| -> String {
        let b = quantize(q, &x).unwrap();
        let n = q.block_bytes();
        b[block * n..(block + 1) * n]
            .iter()
            .map(|v| format!("{v:02x}"))
            .collect()
    };
    assert_eq!(
        hex(QuantType::Q8_0, 1),
        "2c1e3c96f656b0106fca2984e3439efd5db71777d1318beb4ba50565bf1f7fd93993"
    );
    assert_eq!(
        hex(QuantType::Q4_0, 1),
        "20ae740fb953fd9731eb852fca640ea842fd"
    );
    assert_eq!(hex(QuantType::Q8_0, 0), "00".repeat(34));
    // A block of zeros: d = 0.0 / -8.0 = -0.0 (0x8000), every nibble 8.
    assert_eq!(hex(QuantType::Q4_0, 0), format!("0080{}", "88".repeat(16)));
    assert_eq!(
        hex(QuantType::Q4K, 0),
        "de162b22c0fffffcc0fdfefecfdcfffea01060c02080d040900050b01070c03080e040a00060b02070d03090e050a010268ce248ad0459b0157bd1379ce348ae046ac0267bd2379df359be156ac1268c9df359be157ac1268ce248ad0459b0157bd1379ce348ae046ac0267bd2379df3156ac1268cd2489df459b0157bc1378ce348ae046ab0267bd2379de359ae156a"
    );
}

//! The vec4 entries (`shaders/attention_vec4.wgsl`), operands in buffers
//! and in textures, give the scalar entries' bits: forward, backward and
//! cached decoding of grouped-query problems whose sizes let every product
//! take them, run once each way. The integration tests in
//! `tests/kernels/{attention,gqa}.rs` check the default choice against f64.

use super::entries::{Entries, FORCE, RUNS};
use super::{
    AttentionShape, HeadGroups, attention_backward_gqa, attention_decode_gqa, attention_forward_gqa,
};
use crate::Mesh;
use crate::device::{LocalTensor, Rank};

/// A fixed pseudo-random fill in [-2, 2) (no crate RNG at this layer).
pub(super) fn fill(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// A tensor's values as bits.
pub(super) fn bits(t: &LocalTensor) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|x| x.to_bits()).collect()
}

type Case = (usize, usize, usize, usize, usize, usize);

/// Every output of forward, backward and two decoding steps, as bits, with
/// the products on `entries` where they fit; and how many products ran on
/// the scalar, buffer and texture entries.
fn run(r: &Rank, (b, t, h, kv, d, w): Case, entries: Entries) -> (Vec<Vec<u32>>, [usize; 3]) {
    FORCE.with(|c| c.set(Some(entries)));
    RUNS.with(|c| c.set([0; 3]));
    let g = HeadGroups {
        group: h / kv,
        q_start: 0,
        kv_start: 0,
        kv_heads: kv,
        window: w,
        softcap: 0.0,
    };
    let up = |cols: usize, seed| r.upload(&[b * t, cols], &fill(b * t * cols, seed)).unwrap();
    let (q, k, v, d_out) = (up(h * d, 1), up(kv * d, 2), up(kv * d, 3), up(h * d, 4));
    let s = AttentionShape::new(b, t, h, d);
    let f = attention_forward_gqa(&q, &k, &v, s, g, None).unwrap();
    let grads = attention_backward_gqa(&q, &k, &v, &f.probs, &d_out, s, g, None).unwrap();
    let mut out = vec![bits(&f.out), bits(&f.probs)];
    out.extend(grads.iter().map(bits));
    // A prefill of t positions, then one more token: 4 keys per 4 rows.
    let step = AttentionShape::new(b, 1, h, d);
    let one = |cols: usize, seed| r.upload(&[b, cols], &fill(b * cols, seed)).unwrap();
    let pre = attention_decode_gqa(&q, &k, &v, None, s, g).unwrap();
    let (q1, k1, v1) = (one(h * d, 5), one(kv * d, 6), one(kv * d, 7));
    let next = attention_decode_gqa(&q1, &k1, &v1, Some(&pre.cache), step, g).unwrap();
    out.extend([bits(&pre.out), bits(&next.out), bits(&next.cache)]);
    FORCE.with(|c| c.set(None));
    (out, RUNS.with(|c| c.get()))
}

#[test]
fn vec4_entries_give_the_scalar_entries_bits() {
    let mesh = Mesh::simulated(1).unwrap();
    let r = &mesh.ranks()[0];
    mesh.set_poison(true);
    // (batch, seq, heads, kv_heads, head_dim, window)
    let cases = [
        (2, 8, 3, 3, 8, 0),    // multi-head
        (1, 12, 4, 2, 4, 3),   // group 2, window 3
        (2, 16, 6, 2, 12, 0),  // group 3
        (1, 4, 2, 1, 8, 1),    // multi-query, window 1
        (1, 264, 1, 1, 72, 0), // two blocks of keys, two of elements
    ];
    for case in cases {
        let (scalar, runs) = run(r, case, Entries::Scalar);
        assert_eq!(
            runs[1] + runs[2],
            0,
            "{case:?}: scalar runs took the vec4 entries"
        );
        // Forward 2, backward 4, the prefill 2; the next token's t + 1 keys
        // are not a multiple of 4.
        let kinds = [(Entries::Buffers, 1), (Entries::Textures, 2)];
        for (entries, at) in kinds {
            if entries == Entries::Textures && !r.device().is_cpu() {
                continue;
            }
            let (vec4, runs) = run(r, case, entries);
            assert_eq!(runs[at], 8, "{case:?}: products on the {entries:?} entries");
            for (n, (a, b)) in scalar.iter().zip(&vec4).enumerate() {
                let finite = a.iter().all(|&x| f32::from_bits(x).is_finite());
                assert!(finite, "{case:?}: output {n} not finite");
                assert_eq!(a, b, "{case:?}: output {n} differs, scalar and {entries:?}");
            }
        }
    }
    mesh.set_poison(false);
}

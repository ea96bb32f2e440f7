//! The fused decoding step (`decode_one.rs`) gives the separate kernels'
//! bits: the output and the grown cache of token after token, past a
//! prefill of ragged length, for multi-head, grouped and windowed problems,
//! with and without the rotation of q and k (`rotary_pair` apart). The
//! integration tests in `tests/kernels/{attention,gqa}.rs` check decoding
//! against f64 and the forward pass.

use super::decode_one::{RUNS, UNFUSED};
use super::vec4_check::{bits, fill};
use super::{AttentionShape, HeadGroups, attention_decode_gqa, attention_decode_gqa_rotary};
use crate::Mesh;
use crate::device::{LocalTensor, Rank};

/// (batch, prefill, heads, kv_heads, head_dim, window, q_start)
type Case = (usize, usize, usize, usize, usize, usize, usize);

/// The outputs and caches, as bits, of a prefill and `steps` one-token
/// steps, fused or not, rotating q and k first or not; and how many steps
/// ran fused.
fn run(r: &Rank, c: Case, steps: usize, (unfused, rotate): (bool, bool)) -> (Vec<Vec<u32>>, usize) {
    let (b, t, h, kv, d, w, q0) = c;
    UNFUSED.with(|u| u.set(unfused));
    RUNS.with(|n| n.set(0));
    // More key/value heads than query heads: the rest are held, unread.
    let group = (h / kv).max(1);
    let g = HeadGroups {
        group,
        q_start: q0,
        kv_start: q0 / group,
        kv_heads: kv,
        window: w,
        softcap: 0.0,
    };
    let up =
        |rows: usize, cols: usize, seed| r.upload(&[rows, cols], &fill(rows * cols, seed)).unwrap();
    let pre = AttentionShape::new(b, t, h, d);
    let (q, k, v) = (
        up(b * t, h * d, 1),
        up(b * t, kv * d, 2),
        up(b * t, kv * d, 3),
    );
    // Tables in [-2, 2): any values rotate alike in both paths.
    let step =
        |[q, k, v]: [&LocalTensor; 3], cache: Option<&LocalTensor>, s: AttentionShape, seed| {
            if !rotate {
                return attention_decode_gqa(q, k, v, cache, s, g).unwrap();
            }
            let (cos, sin) = (up(s.seq, d / 2, seed), up(s.seq, d / 2, seed + 1));
            attention_decode_gqa_rotary([q, k, v], cache, s, g, (&cos, &sin)).unwrap()
        };
    let mut dec = step([&q, &k, &v], None, pre, 90);
    let mut out = vec![bits(&dec.out)];
    let one = AttentionShape::new(b, 1, h, d);
    for s in 0..steps as u64 {
        let (q, k, v) = (
            up(b, h * d, 10 + 3 * s),
            up(b, kv * d, 11 + 3 * s),
            up(b, kv * d, 12 + 3 * s),
        );
        dec = step([&q, &k, &v], Some(&dec.cache), one, 100 + 2 * s);
        out.extend([bits(&dec.out), bits(&dec.cache)]);
    }
    UNFUSED.with(|u| u.set(false));
    (out, RUNS.with(|n| n.get()))
}

#[test]
fn fused_decoding_gives_the_separate_kernels_bits() {
    let mesh = Mesh::simulated(1).unwrap();
    let r = &mesh.ranks()[0];
    mesh.set_poison(true);
    let cases = [
        (1, 7, 3, 3, 8, 0, 0),   // multi-head, ragged prefill
        (3, 13, 4, 2, 12, 0, 0), // batch 3, group 2; not rotated fused (D/2 odd vec4s)
        (2, 5, 6, 2, 16, 3, 0),  // group 3, window 3
        (1, 17, 2, 1, 16, 0, 2), // multi-query, a later rank's heads
        (2, 5, 1, 3, 8, 0, 0),   // key/value heads no query head reads
        (1, 70, 1, 1, 72, 0, 0), // more keys than lanes
        (2, 3, 1, 1, 256, 5, 0), // as many vec4s of a head as lanes, window 5
        (1, 3, 2, 2, 264, 0, 0), // a head too long: the separate kernels
    ];
    let steps = 6;
    for case in cases {
        let d = case.4;
        for rotate in [false, true] {
            let what = format!("{case:?} rotate {rotate}");
            let (unfused, runs) = run(r, case, steps, (true, rotate));
            assert_eq!(runs, 0, "{what}: the unfused run took the fused kernel");
            let (fused, runs) = run(r, case, steps, (false, rotate));
            // Not on GPUs (the separate kernels' tiles run in parallel there).
            let takes =
                !r.device().is_gpu() && d <= 256 && d.is_multiple_of(if rotate { 8 } else { 4 });
            assert_eq!(runs, if takes { steps } else { 0 }, "{what}: steps fused");
            for (n, (a, b)) in unfused.iter().zip(&fused).enumerate() {
                let finite = a.iter().all(|&x| f32::from_bits(x).is_finite());
                assert!(finite, "{what}: output {n} not finite");
                assert_eq!(a, b, "{what}: output {n} differs, unfused and fused");
            }
        }
    }
    mesh.set_poison(false);
}

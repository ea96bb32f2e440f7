//! Dropout on the attention probabilities (`kernels::attention_forward_with`,
//! `attention_backward_with`): against the f64 reference under the mask the
//! dropout kernel draws, and the same numbers whichever way the heads are
//! split (the mask is keyed on the global head index).

use super::attention::{at, reference_backward_masked, reference_masked, up, widen};
use crate::util::{Rng, assert_close, mesh};
use wgpu_tp::kernels::{self, AttentionShape, HeadWindow, PhiloxKey, ProbsDropout};

/// Columns of heads `h0..h1` of every block of a fused `[B·T, 3·H·D]` tensor.
fn sub_heads(x: &[f32], s: &AttentionShape, h0: usize, h1: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for row in 0..s.batch * s.seq {
        let (b, t) = (row / s.seq, row % s.seq);
        for blk in 0..3 {
            for h in h0..h1 {
                for e in 0..s.head_dim {
                    out.push(x[at(s, blk, b, h, t, e)]);
                }
            }
        }
    }
    out
}

/// Columns of heads `h0..h1` of a `[B·T, H·D]` tensor.
fn head_cols(x: &[f32], s: &AttentionShape, h0: usize, h1: usize) -> Vec<f32> {
    let hd = s.heads * s.head_dim;
    x.chunks(hd)
        .flat_map(|r| r[h0 * s.head_dim..h1 * s.head_dim].to_vec())
        .collect()
}

#[test]
fn probability_dropout_matches_f64_and_ignores_the_head_split() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("attention_dropout");
    let (p, heads) = (0.3f32, 3);
    let s = AttentionShape::new(2, 13, heads, 5);
    let key = PhiloxKey {
        seed: rng.next_u64(),
        step: 3,
        layer: 7,
    };
    let drop = |start| ProbsDropout {
        p,
        key,
        heads: HeadWindow {
            start,
            total: heads,
        },
    };
    let [rows, w] = s.qkv_shape();
    let qkv = rng.vec(rows * w);
    let d_out = rng.vec(rows * heads * s.head_dim);
    // The mask the kernel draws over the logical [B, heads, T, T] tensor.
    let n: usize = s.probs_shape().iter().product();
    let ones = up(r, &s.probs_shape(), &vec![1.0; n]);
    let mask = widen(
        &kernels::dropout(&ones, p, key, None)
            .unwrap()
            .to_vec()
            .unwrap(),
    );
    let kept = mask.iter().filter(|&&v| v != 0.0).count();
    assert!(kept > n / 2 && kept < n, "a real mask: {kept} of {n} kept");

    let tq = up(r, &[rows, w], &qkv);
    let td = up(r, &s.out_shape(), &d_out);
    let fwd = kernels::attention_forward_with(&tq, s, Some(drop(0))).unwrap();
    let want = reference_masked(&widen(&qkv), &s, Some(&mask));
    let out = fwd.out.to_vec().unwrap();
    assert_close("dropped attention out", &out, &want.out, 1e-5);
    assert_close(
        "undropped probs",
        &fwd.probs.to_vec().unwrap(),
        &want.probs,
        1e-5,
    );
    let g = kernels::attention_backward_with(&tq, &fwd.probs, &td, s, Some(drop(0)))
        .unwrap()
        .to_vec()
        .unwrap();
    let want_g =
        reference_backward_masked(&widen(&qkv), &want.probs, &widen(&d_out), &s, Some(&mask));
    assert_close("dropped attention d_qkv", &g, &want_g, 1e-5);
    // Without dropout the output differs: the mask is really applied.
    let plain = kernels::attention_forward(&tq, s)
        .unwrap()
        .out
        .to_vec()
        .unwrap();
    assert!(plain != out);

    // Heads split [0, 2) | [2, 3), each with its window: the whole's columns.
    for (h0, h1) in [(0, 2), (2, 3)] {
        let sub = AttentionShape::new(s.batch, s.seq, h1 - h0, s.head_dim);
        let q = up(r, &sub.qkv_shape(), &sub_heads(&qkv, &s, h0, h1));
        let dy = up(r, &sub.out_shape(), &head_cols(&d_out, &s, h0, h1));
        let f = kernels::attention_forward_with(&q, sub, Some(drop(h0))).unwrap();
        assert!(
            f.out.to_vec().unwrap() == head_cols(&out, &s, h0, h1),
            "heads {h0}..{h1}: output differs from the unsplit heads"
        );
        let gs = kernels::attention_backward_with(&q, &f.probs, &dy, sub, Some(drop(h0)))
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(
            gs == sub_heads(&g, &s, h0, h1),
            "heads {h0}..{h1}: gradient differs from the unsplit heads"
        );
    }
}

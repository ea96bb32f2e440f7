//! Asserts: norm-wise and element-wise tolerance against f64, bit-exact
//! comparisons of rank-local results, exact communication counts.

use wgpu_tp::{Collective, CommStats, DTensor, LocalTensor};

use super::reference::LinearGrads;

/// ‖got − want‖ / ‖want‖ (absolute when ‖want‖ is tiny), in f64.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let mut num = 0.0;
    let mut den = 0.0;
    for (g, w) in got.iter().zip(want) {
        assert!(
            g.is_finite(),
            "non-finite output {g} (an unwritten, poisoned element?)"
        );
        num += (*g as f64 - w) * (*g as f64 - w);
        den += w * w;
    }
    num.sqrt()
        / den
            .sqrt()
            .max(1e-30)
            .max(if den == 0.0 { 1.0 } else { 0.0 })
}

/// Assert norm-wise relative error ≤ tol, and element-wise |g − w| ≤ tol_abs + 1e-3·|w|.
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    let e = rel_err(got, want);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
    assert_elementwise(what, got, want);
}

/// [`assert_close`] for a sum of products whose result may cancel: the
/// norm-wise error is taken relative to max(‖want‖, 1e-2·‖scale‖), `scale`
/// being the same sums over absolute values (|A|·|B| + |bias| + …), which
/// bounds f32's rounding in any summation order. With random signs ‖want‖
/// is at least about ‖scale‖/√K, so the floor only acts where terms cancel
/// (a 1×1×1 product with bias and accumulate failed 1e-5 once that way).
#[track_caller]
pub fn assert_close_cancelling(what: &str, got: &[f32], want: &[f64], scale: &[f64], tol: f64) {
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    for g in got {
        assert!(
            g.is_finite(),
            "{what}: non-finite output {g} (an unwritten, poisoned element?)"
        );
    }
    let diff = norm(&mut got.iter().zip(want).map(|(g, w)| *g as f64 - w));
    let den = norm(&mut want.iter().copied()).max(1e-2 * norm(&mut scale.iter().copied()));
    let e = diff / den.max(1e-30);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
    assert_elementwise(what, got, want);
}

/// |g − w| ≤ 1e-4 + 1e-3·|w| for every element.
#[track_caller]
fn assert_elementwise(what: &str, got: &[f32], want: &[f64]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (*g as f64 - w).abs();
        assert!(
            d <= 1e-4 + 1e-3 * w.abs(),
            "{what}: element {i}: got {g}, want {w} (diff {d:.3e})"
        );
    }
}

/// The bf16 values of `x` rounded to nearest, ties to even (as the crate's
/// host and device narrowing round).
pub fn round_bf16(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| wgpu_tp::half::bf16::from_f32(v).to_f32())
        .collect()
}

/// The f16 values of `x` rounded to nearest (the host's reference rounding).
pub fn round_f16(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| wgpu_tp::half::f16::from_f32(v).to_f32())
        .collect()
}

/// f16's unit roundoff, 2^-11: one rounding to f16 moves a value by at most
/// this much relative to it (normal range).
pub const F16_ROUNDOFF: f64 = 1.0 / 2048.0;

/// For results stored as f16 after f32 arithmetic: norm-wise relative error
/// ≤ 2·[`F16_ROUNDOFF`], and element-wise |g − w| ≤ 2u·|w| plus a floor of
/// 1e-5·max|w| (cancellation in the f32 sums; f16 subnormals).
#[track_caller]
pub fn assert_close_f16(what: &str, got: &[f32], want: &[f64]) {
    let e = rel_err(got, want);
    assert!(
        e <= 2.0 * F16_ROUNDOFF,
        "{what}: relative error {e:.3e} > 2^-10 (f16)"
    );
    let floor = 1e-5 * want.iter().fold(0.0f64, |a, w| a.max(w.abs())) + 6e-8;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (*g as f64 - w).abs();
        assert!(
            d <= 2.0 * F16_ROUNDOFF * w.abs() + floor,
            "{what}: element {i}: got {g}, want {w} (diff {d:.3e})"
        );
    }
}

/// For chains of f16 stores (each a rounding that can move the next stage by
/// an f16 step): norm-wise ≤ 4·2⁻¹¹, element-wise within 4·2⁻¹¹ of |w| plus
/// 4·2⁻¹¹ of max|w|.
#[track_caller]
pub fn assert_close_f16_chain(what: &str, got: &[f32], want: &[f64]) {
    let u = F16_ROUNDOFF;
    let e = rel_err(got, want);
    assert!(e <= 4.0 * u, "{what}: relative error {e:.3e} > 2^-9");
    let max = want.iter().fold(0.0f64, |a, w| a.max(w.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (*g as f64 - w).abs();
        assert!(
            d <= 4.0 * u * (w.abs() + max),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// Raw words of every tensor (one download for all).
pub fn words(ts: &[LocalTensor]) -> Vec<Vec<u32>> {
    let refs: Vec<&LocalTensor> = ts.iter().collect();
    wgpu_tp::download_many(&refs)
        .unwrap()
        .iter()
        .map(|b| bytemuck::pod_collect_to_vec(b))
        .collect()
}

/// The bit patterns of f32 values, for exact comparisons with [`words`].
pub fn f32_bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// The bit patterns of i32 values, for exact comparisons with [`words`].
pub fn i32_bits(x: &[i32]) -> Vec<u32> {
    x.iter().map(|&v| v as u32).collect()
}

/// Outputs sit on the expected ranks and hold identical bytes; returns them.
#[track_caller]
pub fn identical(what: &str, out: &[LocalTensor], ranks: &[usize]) -> Vec<u32> {
    let got: Vec<usize> = out.iter().map(LocalTensor::rank_index).collect();
    assert_eq!(got, ranks, "{what}: output ranks");
    let w = words(out);
    for (i, x) in w.iter().enumerate() {
        assert_eq!(
            x, &w[0],
            "{what}: rank {} differs from rank {}",
            ranks[i], ranks[0]
        );
    }
    w[0].clone()
}

/// `stats` holds `calls` calls of `kind` and no other collective.
#[track_caller]
pub fn assert_only(stats: &CommStats, kind: Collective, calls: u64, what: &str) {
    assert_eq!(
        stats.len(),
        1,
        "{what}: expected only {calls} × {kind:?}, got {stats:?}"
    );
    assert_eq!(
        stats.get(&kind).map(|c| c.calls),
        Some(calls),
        "{what}: {stats:?}"
    );
}

/// The logical (host) value of `x` under its placement's contract is `want`, exactly.
#[track_caller]
pub fn check_placement(x: &DTensor, want: &[f32]) {
    let p = x.mesh().size();
    let got = x.to_host().unwrap();
    assert_eq!(got, want, "logical value of {:?} on P={p}", x.placement());
}

/// A linear layer's host results `[y, dx, dW, db]` (see `util::linear_results`)
/// each within `tol` of `want`, by [`assert_close`].
#[track_caller]
pub fn assert_linear_close(what: &str, got: &[Vec<f32>; 4], want: &LinearGrads, tol: f64) {
    let want = [&want.y, &want.dx, &want.dw, &want.db];
    for ((name, got), want) in ["y", "dx", "dW", "db"].iter().zip(got).zip(want) {
        assert_close(&format!("{what}: {name}"), got, want, tol);
    }
}

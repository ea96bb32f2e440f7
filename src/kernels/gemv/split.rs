//! The small-M GEMM's split-K entry for GPUs (`gemv_nk_split`,
//! `shaders/gemv_split.wgsl`, `B [N, K]`): a team of `TEAM` (32) invocations
//! per column of C splits K with coalesced loads and adds its lanes by a
//! tree in workgroup memory. Its bits depend on `TEAM` (32) only (fixed), not
//! on the measured columns per workgroup; they differ from the serial
//! entries' (another order of sums) within the GEMM's tolerance. Ranks
//! agree as long as they choose alike: `device::tune` keeps one choice per
//! adapter and driver in a process.

use super::{GEMV_MAX_ROWS, Knob, gemv_into};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};

/// The entry's name in the composed GEMV module.
pub(super) const ENTRY: &str = "gemv_nk_split";

/// Invocations per column of C (the shader's `TEAM`): a warp on NVIDIA and
/// Apple, half a wave64 on AMD. Changing it changes the bits.
pub(super) const TEAM: usize = 32;

/// The split entry's knob, `c`: `c` columns, `32·c` invocations a
/// workgroup. Every `c` computes the same bits.
pub const SPLIT_CANDIDATES: [usize; 3] = [2, 4, 8];

/// `c` where nothing was measured: 64 invocations, so a product of a few
/// hundred columns still spreads over a hundred or more workgroups.
pub(super) const GUESS: usize = 2;

/// `a·bᵀ` for `a` `[M, K]` (`M ≤` [`GEMV_MAX_ROWS`]) and `b` `[N, K]` (f32,
/// or bf16 / f16 beside an f32 `a`; f16 `a` and `b` alike) by the split
/// entry with knob `c` (one of [`SPLIT_CANDIDATES`]), whatever the adapter:
/// for tests and benches. The output is freshly allocated (poisoned where
/// the device poisons), the kernel writes every element.
pub fn gemv_split_with_candidate(
    a: &LocalTensor,
    b: &LocalTensor,
    (bias, acc): (Option<&LocalTensor>, Option<&LocalTensor>),
    c: usize,
) -> Result<LocalTensor> {
    const OP: &str = "gemv_split_with_candidate";
    let ([m, k], [n, kb]) = (a.shape(), b.shape()) else {
        return Err(Error::shape(OP, "a [M, K], b [N, K]", a.shape()));
    };
    let (m, k, n) = (*m, *k, *n);
    if *kb != k || !SPLIT_CANDIDATES.contains(&c) || !(1..=GEMV_MAX_ROWS).contains(&m) {
        return Err(Error::invalid(
            OP,
            format!(
                "b {:?} must be [N, K = {k}], M 1..={GEMV_MAX_ROWS}, c one of {SPLIT_CANDIDATES:?}",
                b.shape()
            ),
        ));
    }
    a.same_rank(OP, b)?;
    let (ad, bd) = (a.dtype(), b.dtype());
    let narrow_b = ad == DType::F32 && matches!(bd, DType::BF16 | DType::F16);
    if !matches!(ad, DType::F32 | DType::F16) || (bd != ad && !narrow_b) {
        return Err(Error::invalid(
            OP,
            format!("A {ad} and B {bd}: f32 or f16 alike, or A f32 and B bf16 or f16"),
        ));
    }
    for (t, shape) in [(bias, [1, n]), (acc, [m, n])] {
        if let Some(t) = t {
            t.expect_dtype(OP, DType::F32)?;
            a.same_rank(OP, t)?;
            if t.len() != shape[0] * shape[1] {
                return Err(Error::shape(OP, &shape[..], t.shape()));
            }
        }
    }
    let out = a.rank().alloc(OP, &[m, n], ad)?;
    gemv_into(
        a,
        b,
        true,
        (bias, acc, None, None),
        &out,
        (m, n, k),
        (Some(Knob::Split(c)), false),
    )?;
    Ok(out)
}

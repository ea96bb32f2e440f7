//! Small-M GEMM (`shaders/gemv.wgsl`): `C = act(A·op(B) (+ bias) (+ accumulate))
//! (⊙ multiply)`
//! for A `[M, K]` with `M ≤ 8`, reading B (a weight, `[N, K]` or `[K, N]`)
//! where it is stored. A decoding step multiplies one token by every weight:
//! its time is streaming the weights once, and the general kernels' packs
//! stream each weight twice more per product. The
//! GEMM ([`super::gemm()`]) picks this kernel for `M ≤` [`GEMV_MAX_ROWS`].
//!
//! Each invocation owns four columns of C and every row, so a weight element
//! is loaded once for all rows; operands whose rows are whole vec4s are bound
//! as `array<vec4<…>>` (lavapipe loads storage lane by lane, so a vec4 per
//! load is several times fewer loads). Rows are rounded up to 1, 2, 4 or 8
//! (an override constant): four pipelines per layout at most.
//!
//! On GPUs an invocation per four columns is too few in flight and its
//! loads are not coalesced: there the split-K entry (`split`,
//! `shaders/gemv_split.wgsl`, `B [N, K]`) is measured beside it and guessed.
//! On CPU adapters a weight read again (decoding) is kept as a texture and
//! read by the texture entries (`texture`, the same bits), measured beside
//! the buffer entry (where the driver's guess takes none, weights of 32 MiB
//! or more only) and guessed.
//!
//! On CPU adapters several products share a dispatch where nothing is
//! recorded: `group` (up to four products, such as the ranks' shards of a
//! layer on one device) and `pair` (up to four pairs of weights of one
//! input read in one pass: two layers' weights of one shape, or a gated
//! MLP's gate and up).
//!
//! Files: `knobs.rs` (limits, knobs, bindings, uniform), `run.rs` (one
//! product recorded, its knob measured or forced), `split.rs` and
//! `texture.rs` (the GPU and CPU entries), `group.rs` and `pair.rs` (shared
//! dispatches), `sources.rs`, `loads.rs` and `*_source.rs` (the WGSL). This
//! file holds the entry points that force a knob, for tests and benches.

pub(crate) mod group;
mod group_source;
mod knobs;
pub(crate) mod loads;
pub(crate) mod pair;
mod pair_source;
mod run;
mod sources;
pub mod split;
mod texture;

pub use self::knobs::{CANDIDATES, GEMV_MAX_ROWS};
use self::knobs::{GEMV_MAX_ROWS as MAX_ROWS, Knob};
pub(crate) use self::run::gemv_into;
pub(crate) use self::sources::gemv_sources;
pub use self::split::SPLIT_CANDIDATES;
pub use self::texture::{TEXTURE_CANDIDATES, texture_by_default};
use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};

/// `a·bᵀ` (`b` `[N, K]`; `[K, N]` without `trans_b`) for `a` `[M, K]`,
/// `M ≤` [`GEMV_MAX_ROWS`], by the small-M kernel with knob `c` (one of
/// [`CANDIDATES`]). Every `c` computes the same bits (the tests check it),
/// so the measured choice (`device::tune`) changes only speed.
pub fn gemv_with_candidate(
    a: &LocalTensor,
    b: &LocalTensor,
    trans_b: bool,
    c: usize,
) -> Result<LocalTensor> {
    const OP: &str = "gemv_with_candidate";
    let ([m, k], [r, cols]) = (a.shape(), b.shape()) else {
        return Err(Error::shape(OP, "a [M, K], b 2-D", a.shape()));
    };
    let (m, k, n) = (*m, *k, if trans_b { *r } else { *cols });
    if (if trans_b { *cols } else { *r }) != k || !CANDIDATES.contains(&c) {
        return Err(Error::invalid(
            OP,
            format!(
                "b {:?} must match a's K = {k}, c one of {CANDIDATES:?}",
                b.shape()
            ),
        ));
    }
    a.same_rank(OP, b)?;
    // As the GEMM takes them: A and B alike, or f32 A and a bf16 / f16 B.
    let (ad, bd) = (a.dtype(), b.dtype());
    let narrow_b = ad == DType::F32 && matches!(bd, DType::BF16 | DType::F16);
    if !matches!(ad, DType::F32 | DType::F16) || (bd != ad && !narrow_b) {
        return Err(Error::invalid(
            OP,
            format!(
                "A {ad} and B {bd}: A and B must be f32 or f16 alike, or A f32 and B bf16 or f16"
            ),
        ));
    }
    let out = a.rank().zeros(&[m, n], a.dtype())?;
    gemv_into(
        a,
        b,
        trans_b,
        (None, None, None, None),
        &out,
        (m, n, k),
        (Some(Knob::Serial(c)), false),
    )?;
    Ok(out)
}

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
    if *kb != k || !SPLIT_CANDIDATES.contains(&c) || !(1..=MAX_ROWS).contains(&m) {
        return Err(Error::invalid(
            OP,
            format!(
                "b {:?} must be [N, K = {k}], M 1..={MAX_ROWS}, c one of {SPLIT_CANDIDATES:?}",
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

/// `a·bᵀ` (`b` `[N, K]`, f32 or bf16) for f32 `a` `[M, K]` by the texture
/// entries with knob `(columns, workgroup size)` (one of
/// [`TEXTURE_CANDIDATES`]), the weight copied into a texture for this call
/// if none is kept: the entries the automatic choice takes for a weight
/// read again on CPU adapters. The bits equal
/// [`gemv_with_candidate`]'s.
/// An error where they cannot take the product (B not f32 or bf16, or in
/// row blocks; K not a multiple of 4, or 8 for bf16; more of A than 64
/// KiB; a weight past one texture; a device without read-only storage
/// textures or 64 KiB bindings). The result starts as NaN (anything the
/// kernel did not write shows).
pub fn gemv_texture_with(
    a: &LocalTensor,
    b: &LocalTensor,
    knob: (usize, usize),
) -> Result<LocalTensor> {
    const OP: &str = "gemv_texture_with";
    let ([m, k], [n, kb]) = (a.shape(), b.shape()) else {
        return Err(Error::invalid(
            OP,
            format!(
                "a must be [M, K] and b [N, K], got a {:?} and b {:?}",
                a.shape(),
                b.shape()
            ),
        ));
    };
    let most = a.device().limits().max_compute_invocations_per_workgroup as usize;
    if kb != k || a.dtype() != DType::F32 {
        return Err(Error::invalid(
            OP,
            format!(
                "a must be f32 [M, K] and b [N, K] with the same K, got a {} {:?} and b {:?}",
                a.dtype(),
                a.shape(),
                b.shape()
            ),
        ));
    }
    if !TEXTURE_CANDIDATES.contains(&knob) || knob.1 > most {
        return Err(Error::invalid(
            OP,
            format!(
                "the knob must be one of {TEXTURE_CANDIDATES:?} with at most {most} invocations, got {knob:?}"
            ),
        ));
    }
    a.same_rank(OP, b)?;
    // Poisoned: an element the kernel did not write reads NaN.
    let out = a.rank().filled(&[*m, *n], DType::F32, f32::NAN.to_bits())?;
    let (none, mnk) = ((None, None, None, None), (*m, *n, *k));
    gemv_into(
        a,
        b,
        true,
        none,
        &out,
        mnk,
        (Some(Knob::Texture(knob)), false),
    )?;
    Ok(out)
}

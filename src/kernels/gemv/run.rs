//! Recording one small-M product ([`gemv_into`]): its binding and entry,
//! the kept weight texture on CPU adapters, and the knob, measured per
//! shape class ([`candidate`]) or forced by a caller.

use super::knobs::{
    BINDINGS, Binding, CANDIDATES, GEMV_MAX_ROWS, GUESS, Knob, Params, TUNE_MIN_WEIGHTS,
};
use super::sources::program;
use super::split::{self, SPLIT_CANDIDATES};
use super::texture::{self, TEXTURE_CANDIDATES};
use crate::device::{Device, Dispatch, KernelSpec, LocalTensor, tune};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;

/// Record `out = act(a·op(b) (+ bias) (+ acc)) (⊙ mul)`: `a` `[M, K]` (1 ≤ M ≤
/// [`GEMV_MAX_ROWS`], K ≥ 1), `b` `[N, K]` when `trans_b` else `[K, N]`,
/// `out` `[M, N]` already allocated; operands checked by the caller (the
/// GEMM) for shapes, dtypes (A and B alike, or A f32 and B a weight kept in
/// bf16 or f16; bias, acc and mul f32) and rank; acc and mul share a
/// binding, so at most one of them.
/// `knob`: the variant to use (else measured or guessed, [`candidate`]).
pub(crate) fn gemv_into(
    a: &LocalTensor,
    b: &LocalTensor,
    trans_b: bool,
    (bias, acc, act, mul): (
        Option<&LocalTensor>,
        Option<&LocalTensor>,
        Option<Activation>,
        Option<&LocalTensor>,
    ),
    out: &LocalTensor,
    (m, n, k): (usize, usize, usize),
    (knob, cache_b): (Option<Knob>, bool),
) -> Result<()> {
    const OP: &str = "gemv";
    if acc.is_some() && mul.is_some() {
        return Err(Error::invalid(
            OP,
            "acc and mul share a binding: one of them",
        ));
    }
    if !(1..=GEMV_MAX_ROWS).contains(&m) || k == 0 || n == 0 {
        return Err(Error::invalid(
            OP,
            format!(
                "the small-M kernel takes 1..={GEMV_MAX_ROWS} rows and K, N ≥ 1, got M {m}, N {n}, K {k}"
            ),
        ));
    }
    let binding = match (trans_b, k % 4 == 0, n % 4 == 0) {
        (true, true, _) if k % 8 == 0 && b.dtype() == DType::BF16 => Binding::Bf16Vec8,
        (true, true, _) => Binding::BothVec4,
        (false, _, true) => Binding::BVec4,
        _ => Binding::Scalar,
    };
    let (family, source) = program((a.dtype(), b.dtype(), out.dtype()), binding);
    let entry = match (trans_b, binding) {
        (true, Binding::Bf16Vec8) => "gemv_nk8",
        (true, _) => "gemv_nk",
        (false, _) => "gemv_kn",
    };
    let act = match act {
        None => 0,
        Some(Activation::Gelu) => 1,
        Some(Activation::Silu) => 2,
        Some(Activation::Relu) => 3,
    };
    let flags = bias.is_some() as u32
        | (acc.is_some() as u32) << 1
        | act << 2
        | (mul.is_some() as u32) << 4;
    // A weight read again is kept as a texture on CPU adapters.
    let forced = matches!(knob, Some(Knob::Texture(_)));
    let rows = m.next_power_of_two();
    // Not where measurement already chose the buffer for this class: its
    // texture would be memory for nothing.
    // A texture (one more copy of the weight) where measurement chose one,
    // or will measure one now, else where the driver's guess takes one.
    let wanted = || {
        let class = class_name(family, entry, (rows, n, k), " texture");
        match tune::known_choice(a.device(), &class) {
            Some(choice) => choice.starts_with("texture"),
            None => {
                let bytes = n.saturating_mul(k).saturating_mul(b.dtype().size_bytes());
                (bytes >= texture::TEXTURE_MIN_BYTES && tune::can_measure())
                    || texture::texture_by_default(a.device())
            }
        }
    };
    let auto = knob.is_none() && cache_b && a.device().is_cpu();
    let tex = if forced || (auto && wanted()) {
        texture::weight_texture(a, b, trans_b, out.dtype(), (m, n, k), forced)?
    } else {
        None
    };
    let record = |knob: Knob| {
        let (bias, acc) = (bias.unwrap_or(a), acc.or(mul));
        let params = |groups: usize| Params {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            flags,
            groups: groups as u32,
            shift: 0,
            _pad: [0; 2],
        };
        let (entry, wg, groups) = match (knob, &tex) {
            (Knob::Serial(c), _) => (entry, 16 * c, n.div_ceil(4).div_ceil(16 * c)),
            (Knob::Split(c), _) => (split::ENTRY, split::TEAM * c, n.div_ceil(c)),
            (Knob::Texture(cw), Some(tex)) => {
                let buffers = [bias, acc.unwrap_or(a), out];
                return texture::record(a, (tex, b.dtype()), buffers, params(0), rows, cw);
            }
            (Knob::Texture(_), None) => {
                return Err(Error::invalid(
                    OP,
                    "internal: a texture knob without a texture (please report this)",
                ));
            }
        };
        let constants = vec![("ROWS", rows as f64), ("WG", wg as f64)];
        let spec = KernelSpec::new(family, source, BINDINGS, entry).with_constants(constants);
        // Absent bias / acc bind `a` and `b` in their place; the flags keep them unread.
        Dispatch {
            spec: &spec,
            params: bytemuck::bytes_of(&params(groups)),
            buffers: &[a, b, bias, acc.unwrap_or(b), out],
            workgroups: groups as u64,
        }
        .record(a.device())
    };
    match knob {
        Some(Knob::Split(_)) if !trans_b => {
            Err(Error::invalid(OP, "the split kernel reads B [N, K] only"))
        }
        Some(knob) => record(knob),
        None => {
            let textured = tex.is_some();
            let chosen = candidate(a.device(), family, entry, (rows, n, k), textured, &record)?;
            // Measured slower than the buffer: its texture is memory for nothing.
            if textured && matches!(chosen, Knob::Serial(_)) {
                texture::drop_texture(b, a.device());
            }
            record(chosen)
        }
    }
}

/// The variant for this product: measured per shape class (layout, rows,
/// and N and K rounded up to powers of two) where the product is large
/// enough to matter, else guessed. On GPUs `B [N, K]` products also measure
/// the split entry (their classes end in `split`, so choices cached before
/// it existed are not reused) and guess it; on CPU adapters a weight with a
/// kept texture (`textured`) measures the texture knobs beside the buffer
/// kernel's guess (classes ending in `texture`) and guesses a texture knob,
/// others the buffer kernel's workgroup sizes.
fn candidate(
    device: &Device,
    family: &str,
    entry: &str,
    (rows, n, k): (usize, usize, usize),
    textured: bool,
    record: &dyn Fn(Knob) -> Result<()>,
) -> Result<Knob> {
    let split = entry != "gemv_kn" && device.is_gpu();
    let guess = if textured {
        Knob::Texture(texture::GUESS)
    } else if split {
        Knob::Split(split::GUESS)
    } else {
        Knob::Serial(GUESS)
    };
    if n.saturating_mul(k) < TUNE_MIN_WEIGHTS {
        return Ok(guess);
    }
    let most = device.limits().max_compute_invocations_per_workgroup as usize;
    // On a GPU only split-K knobs are measured: they all give one set of
    // bits, so processes measuring apart (MPI) still compute alike; the
    // family itself follows the adapter type, which every rank sees alike.
    // A kept texture: its knobs and the buffer's guess, all one set of bits.
    let knobs: Vec<Knob> = if textured {
        TEXTURE_CANDIDATES
            .into_iter()
            .filter(|&(_, wg)| wg <= most)
            .map(Knob::Texture)
            .chain([Knob::Serial(GUESS)])
            .collect()
    } else if split {
        SPLIT_CANDIDATES
            .into_iter()
            .filter(|&c| split::TEAM * c <= most)
            .map(Knob::Split)
            .collect()
    } else {
        CANDIDATES
            .into_iter()
            .filter(|&c| 16 * c <= most)
            .map(Knob::Serial)
            .collect()
    };
    let names: Vec<String> = knobs
        .iter()
        .map(|k| match k {
            Knob::Serial(c) => format!("wg {}", 16 * c),
            Knob::Split(c) => format!("split wg {}", split::TEAM * c),
            Knob::Texture((c, wg)) => format!("texture cols {c} wg {wg}"),
        })
        .collect();
    let suffix = if textured {
        " texture"
    } else if split {
        " split"
    } else {
        ""
    };
    let class = class_name(family, entry, (rows, n, k), suffix);
    // A texture is one more copy of the weight in memory: it must save
    // TEXTURE_MARGIN of the buffer kernel's time to be kept.
    let cost = |i: usize| match knobs[i] {
        Knob::Texture(_) => 1.0 / (1.0 - texture::TEXTURE_MARGIN),
        _ => 1.0,
    };
    let chosen = tune::choose(device, &class, &names, cost, |i| record(knobs[i]))?;
    Ok(chosen.map_or(guess, |i| knobs[i]))
}

/// The shape class measured for a product: layout, rows, and N and K
/// rounded up to powers of two; `suffix` names the candidates' set.
fn class_name(
    family: &str,
    entry: &str,
    (rows, n, k): (usize, usize, usize),
    suffix: &str,
) -> String {
    format!(
        "{family} {entry} rows {rows} n {} k {}{suffix}",
        n.next_power_of_two(),
        k.next_power_of_two(),
    )
}

//! The small-M GEMM reading its weight from a texture (`shaders/gemv_texture.wgsl`),
//! on CPU adapters. Mesa's gallivm (lavapipe, llvmpipe) loads a storage
//! buffer lane by lane, with a bounds check per lane, but fetches a texel
//! per lane at once and reads a uniform at one address once: the weight as
//! a texture and A as a uniform stream the weight about twice as fast
//! (BENCHMARKS round 27). The texture is a copy of the weight, so it is
//! made from a weight's second product between writes (decoding) and kept
//! with it: one more copy of each weight in device memory (the host's),
//! as the GEMM's kept packs are, made only while the host keeps 1 GiB
//! available beyond it. `WGPU_TP_GEMV_TEXTURE=0` turns it off.
//!
//! The entries add each column's dot products in the buffer entries'
//! order: the same bits as `gemv_nk` (f32) and `gemv_nk8` (bf16).

use super::{Knob, gemv_into};
use crate::device::{
    Access, Device, KernelSpec, LocalTensor, copy_region, host_available, storage_textures_work,
};
use crate::element::DType;
use crate::error::{Error, Result};

/// vec4s of A the uniform binding holds (64 KiB, WebGPU's default limit).
pub(super) const A_VEC4S: usize = 4096;

/// The texture knob: columns an invocation owns, with its workgroup size.
pub const TEXTURE_CANDIDATES: [(usize, usize); 3] = [(2, 64), (4, 32), (4, 64)];

/// The knob where nothing was measured: the fastest at GPT-2's layer
/// shapes on lavapipe, one row and eight (BENCHMARKS round 27).
pub(super) const GUESS: (usize, usize) = (4, 32);

/// Texels a texture row: 2^11, or the device's side if smaller.
fn shift(device: &Device) -> u32 {
    let side = device.limits().max_texture_dimension_2d.max(1);
    (31 - side.leading_zeros()).min(11)
}

/// Why the texture entries cannot take `a·bᵀ`, or `None` when they can:
/// f32 A and C, B `[N, K]` f32 (K a multiple of 4) or bf16 (of 8), A
/// within the uniform binding, the texture within the device's sides.
fn unfit(
    a: &LocalTensor,
    b: &LocalTensor,
    trans_b: bool,
    out: DType,
    (m, n, k): (usize, usize, usize),
) -> Option<String> {
    let device = a.device();
    let format = match b.dtype() {
        DType::F32 if k % 4 == 0 => wgpu::TextureFormat::Rgba32Float,
        DType::BF16 if k % 8 == 0 => wgpu::TextureFormat::Rgba32Uint,
        _ => return Some("B must be f32 with K a multiple of 4 or bf16 with K of 8".into()),
    };
    let texels = (n * k * b.dtype().size_bytes()).div_ceil(16);
    let side = device.limits().max_texture_dimension_2d as usize;
    let reasons = [
        (!trans_b, "B must be [N, K]"),
        (
            a.dtype() != DType::F32 || out != DType::F32,
            "A and C must be f32",
        ),
        (m * k / 4 > A_VEC4S, "A must fit 64 KiB"),
        (
            device.limits().max_uniform_buffer_binding_size < 16 * A_VEC4S as u64
                || device.limits().max_storage_buffer_binding_size < 16 * A_VEC4S as u64,
            "the device's uniform and storage bindings must hold 64 KiB",
        ),
        (
            !storage_textures_work(device, format),
            "the device must read storage textures",
        ),
        (b.is_blocked(), "B must be one buffer"),
        (
            texels.div_ceil(1 << shift(device)) > side,
            "B must fit one texture",
        ),
    ];
    reasons
        .iter()
        .find(|(bad, _)| *bad)
        .map(|(_, why)| why.to_string())
}

/// Whether the automatic choice may use textures (on by default).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("WGPU_TP_GEMV_TEXTURE").map_or(true, |v| v != "0"))
}

/// `b`'s texture for this product: kept with `b` from its second product
/// between writes on CPU adapters (`None` before, elsewhere, or where the
/// entries cannot take it); with `force`, made for this call if need be,
/// and an error where the entries cannot take it.
pub(super) fn weight_texture(
    a: &LocalTensor,
    b: &LocalTensor,
    trans_b: bool,
    out: DType,
    mnk: (usize, usize, usize),
    force: bool,
) -> Result<Option<wgpu::TextureView>> {
    const OP: &str = "gemv";
    if let Some(why) = unfit(a, b, trans_b, out, mnk) {
        return if force {
            Err(Error::invalid(
                OP,
                format!("the texture GEMV cannot take this product: {why}"),
            ))
        } else {
            Ok(None)
        };
    }
    let shift = shift(a.device());
    let key = format!("gemv texture {shift} {:?} {:?}", b.shape(), b.dtype());
    if force {
        return b.derived(key, || b.to_flat_texture(OP, shift)).map(Some);
    }
    if !a.device().is_cpu() || !enabled() {
        return Ok(None);
    }
    // A CPU adapter's textures are host memory: made only while the host
    // keeps RESERVE available beyond it, else this weight keeps reading its
    // buffer (decided once, until it is written).
    let make = || {
        let bytes = b.byte_len();
        let room = host_available().is_none_or(|free| free >= bytes.saturating_add(RESERVE));
        room.then(|| b.to_flat_texture(OP, shift)).transpose()
    };
    Ok(b.derived_if_reused(key, make)?.flatten())
}

/// Host memory a kept texture leaves available (1 GiB).
const RESERVE: u64 = 1 << 30;

/// The program of the texture entries for `weight` (f32 or bf16).
fn program(weight: DType) -> (&'static str, &'static str) {
    const F32: &str = "alias COut = f32;
@group(0) @binding(2) var bt: texture_storage_2d<rgba32float, read>;
fn texel(i: u32) -> vec4<u32> { return bitcast<vec4<u32>>(textureLoad(bt, at(i))); }
";
    const BF16: &str = "alias COut = f32;
@group(0) @binding(2) var bt: texture_storage_2d<rgba32uint, read>;
fn texel(i: u32) -> vec4<u32> { return textureLoad(bt, at(i)); }
";
    static SOURCES: std::sync::OnceLock<[&'static str; 2]> = std::sync::OnceLock::new();
    let sources = SOURCES.get_or_init(|| {
        [F32, BF16].map(|head| {
            let s = format!(
                "{head}{}{}",
                include_str!("../../../shaders/gemv_header.wgsl"),
                include_str!("../../../shaders/gemv_texture.wgsl")
            );
            &*Box::leak(s.into_boxed_str())
        })
    });
    match weight {
        DType::BF16 => ("gemv_tex_bf16", sources[1]),
        _ => ("gemv_tex_f32", sources[0]),
    }
}

/// Both texture programs, as (name, source): for validation tests.
pub(super) fn texture_sources() -> Vec<(&'static str, &'static str)> {
    vec![program(DType::F32), program(DType::BF16)]
}

/// A as a uniform, B as a texture of `format`, then bias, acc and C.
const fn bindings(format: wgpu::TextureFormat) -> [Access; 5] {
    [
        Access::Uniform,
        Access::StorageTexture(format),
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ]
}

/// Record the texture entry with knob `(cols, wg)`: A copied into a
/// uniform, B from `tex`; `buffers` are bias, acc (or mul) and C, as
/// `gemv_into` binds them; `params` its parameters, with `groups` and
/// `shift` set here.
pub(super) fn record(
    a: &LocalTensor,
    (tex, weight): (&wgpu::TextureView, DType),
    [bias, acc, out]: [&LocalTensor; 3],
    params: super::Params,
    rows: usize,
    (cols, wg): (usize, usize),
) -> Result<()> {
    const OP: &str = "gemv";
    let (family, source) = program(weight);
    let entry = if weight == DType::BF16 {
        "gemv_tex8"
    } else {
        "gemv_tex"
    };
    const F32_BINDINGS: [Access; 5] = bindings(wgpu::TextureFormat::Rgba32Float);
    const BF16_BINDINGS: [Access; 5] = bindings(wgpu::TextureFormat::Rgba32Uint);
    let bindings: &'static [Access] = if weight == DType::BF16 {
        &BF16_BINDINGS
    } else {
        &F32_BINDINGS
    };
    let x = a.rank().alloc(OP, &[4 * A_VEC4S], DType::F32)?;
    copy_region(a, 0, &x, 0, a.len())?;
    let groups = (params.n as usize).div_ceil(cols).div_ceil(wg);
    let params = super::Params {
        groups: groups as u32,
        shift: shift(a.device()),
        ..params
    };
    let constants = vec![
        ("ROWS", rows as f64),
        ("WG", wg as f64),
        ("COLS", cols as f64),
    ];
    let spec = KernelSpec::new(family, source, bindings, entry).with_constants(constants);
    crate::device::Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[&x, bias, acc, out],
        workgroups: groups as u64,
    }
    .record_with_textures(a.device(), &[tex])
}

/// `a·bᵀ` (`b` `[N, K]`, f32 or bf16) for f32 `a` `[M, K]` by the texture
/// entries with knob `(columns, workgroup size)` (one of
/// [`TEXTURE_CANDIDATES`]), the weight copied into a texture for this call
/// if none is kept: the entries the automatic choice takes for a weight
/// read again on CPU adapters. The bits equal
/// [`gemv_with_candidate`](super::gemv_with_candidate)'s.
/// An error where they cannot take the product (K not a multiple of 4, or
/// 8 for bf16; more of A than 64 KiB; a device without read-only storage
/// textures).
pub fn gemv_texture_with(
    a: &LocalTensor,
    b: &LocalTensor,
    knob: (usize, usize),
) -> Result<LocalTensor> {
    const OP: &str = "gemv_texture_with";
    let ([m, k], [n, kb]) = (a.shape(), b.shape()) else {
        return Err(Error::shape(OP, "a [M, K], b [N, K]", b.shape()));
    };
    if kb != k || !TEXTURE_CANDIDATES.contains(&knob) || a.dtype() != DType::F32 {
        return Err(Error::invalid(
            OP,
            format!(
                "a f32 [M, K] and b [N, K = {k}], got b {:?}; knob one of {TEXTURE_CANDIDATES:?}",
                b.shape()
            ),
        ));
    }
    a.same_rank(OP, b)?;
    let out = a.rank().zeros(&[*m, *n], DType::F32)?;
    let (none, mnk) = ((None, None, None, None), (*m, *n, *k));
    gemv_into(a, b, true, none, &out, mnk, Some(Knob::Texture(knob)))?;
    Ok(out)
}

//! The small-M GEMM reading its weight from a texture, on CPU adapters:
//! Mesa's gallivm (lavapipe, llvmpipe) loads a storage buffer lane by lane,
//! with a bounds check per lane, but fetches a texel per lane at once and
//! reads a uniform at one address once: the weight as a texture and A as a
//! uniform take 0.3–0.7× the buffer kernel's time on GL llvmpipe 22.3 and
//! 0.6–1.2× on lavapipe 25 (BENCHMARKS round 27). The texture is a copy of
//! the weight, so it is made from a weight's second product between writes
//! (decoding), where the pack cache keeps the GEMM's copies
//! (`GemmOptions::weight`), and kept with it, made only while the host keeps 1 GiB
//! available beyond the textures kept. Measurement keeps it where it saves
//! 10 % of the buffer kernel's time (lavapipe: weights from
//! `TEXTURE_MIN_BYTES`); unmeasured, GL llvmpipe takes it, others do not
//! ([`texture_by_default`]). `WGPU_TP_GEMV_TEXTURE=off` (or
//! `WGPU_TP_PACK_CACHE=off`; the settings' `gemv_texture`, `pack_cache`)
//! turns it off.
//!
//! The texels are `rgba32uint` for f32 and bf16 weights alike (bits, not
//! values: nothing on the way can flush or canonicalise a float), and the
//! entries add each column's dot products in the buffer entries' order:
//! the same bits as `gemv_nk` (f32) and `gemv_nk8` (bf16).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::knobs::Params;
use crate::device::{
    Access, Device, KernelSpec, LocalTensor, copy_region, flat_texture_shift, host_available,
    settings, storage_textures_work,
};
use crate::element::DType;
use crate::error::{Error, Result};

/// vec4s of A the uniform binding holds (64 KiB, WebGPU's default limit).
pub(super) const A_VEC4S: usize = 4096;

/// The texture knob: columns an invocation owns, with its workgroup size.
pub const TEXTURE_CANDIDATES: [(usize, usize); 3] = [(2, 64), (4, 32), (4, 64)];

/// The knob where nothing was measured: four columns were the fastest or
/// near it at most of GPT-2's layer shapes, one row and eight, on both
/// CPU drivers (BENCHMARKS round 27).
pub(super) const GUESS: (usize, usize) = (4, 32);

/// Whether the small-M GEMM keeps a texture of a weight read again on
/// `device` where measurement has not chosen: on GL llvmpipe, whose buffer
/// loads the texture beats 1.5–3×; not on other CPU adapters (lavapipe
/// gains 0–20 %: BENCHMARKS round 27) nor on GPUs. `WGPU_TP_GEMV_TEXTURE=on`
/// (the settings' `gemv_texture`) takes it on every CPU adapter, `off`
/// nowhere (nor measures it).
pub fn texture_by_default(device: &Device) -> bool {
    device.is_cpu()
        && settings::current()
            .gemv_texture
            .unwrap_or(device.adapter_info().backend == wgpu::Backend::Gl)
}

/// Bytes a weight must hold to be measured for a texture where the guess
/// takes none (lavapipe): smaller ones won alone, lost in tokens (round 34).
pub(super) const TEXTURE_MIN_BYTES: usize = 32 << 20;

/// The share of the buffer kernel's time a texture knob must save to be
/// chosen by measurement: what a copy of the weight in memory must buy.
pub(super) const TEXTURE_MARGIN: f64 = 0.1;

/// Texels a texture row.
fn shift(device: &Device) -> u32 {
    flat_texture_shift(device)
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
    match b.dtype() {
        DType::F32 if k % 4 != 0 => return Some("f32 B needs K a multiple of 4".into()),
        DType::BF16 if k % 8 != 0 => return Some("bf16 B needs K a multiple of 8".into()),
        DType::F32 | DType::BF16 => {}
        d => return Some(format!("B must be f32 or bf16, not {d}")),
    }
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
            !storage_textures_work(device, wgpu::TextureFormat::Rgba32Uint),
            "the device must read rgba32uint storage textures",
        ),
        (b.is_blocked(), "B must be one buffer"),
        // Rows of 16 texels or more: a copy's rows are 256-byte multiples.
        (
            shift(device) < 4 || texels.div_ceil(1 << shift(device)) > side,
            "B must fit one texture of the device's sides",
        ),
    ];
    reasons
        .iter()
        .find(|(bad, _)| *bad)
        .map(|(_, why)| why.to_string())
}

/// Whether the automatic choice may keep textures: on unless the settings
/// turn them or the pack cache off (`WGPU_TP_GEMV_TEXTURE=off`,
/// `WGPU_TP_PACK_CACHE=off`).
fn enabled() -> bool {
    let s = settings::current();
    s.gemv_texture != Some(false) && s.pack_cache
}

/// Bytes of weight textures kept by this process: the memory check counts
/// them as taken (the copies of one token's weights are made before any
/// is resident).
static KEPT_BYTES: AtomicU64 = AtomicU64::new(0);

/// A weight's texture, its bytes counted in [`KEPT_BYTES`] while it lives.
pub(super) struct WeightTexture {
    pub(super) view: wgpu::TextureView,
    bytes: u64,
}

impl WeightTexture {
    fn make(b: &LocalTensor, shift: u32) -> Result<Arc<WeightTexture>> {
        let view = b.to_flat_texture("gemv", shift)?;
        let bytes = b.byte_len();
        #[cfg(test)]
        tests::MADE.fetch_add(1, Ordering::AcqRel);
        KEPT_BYTES.fetch_add(bytes, Ordering::AcqRel);
        Ok(Arc::new(WeightTexture { view, bytes }))
    }
}

impl Drop for WeightTexture {
    fn drop(&mut self) {
        KEPT_BYTES.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The key `b`'s texture is kept under: its bytes, not its view's shape
/// (every view of the buffer has the same texture).
fn key(b: &LocalTensor, shift: u32) -> String {
    format!("gemv texture {shift} {} {}", b.dtype(), b.byte_len())
}

/// Forget `b`'s kept texture (measurement chose the buffer kernel).
pub(super) fn drop_texture(b: &LocalTensor, device: &Device) {
    b.forget_derived(&key(b, shift(device)));
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
) -> Result<Option<Arc<WeightTexture>>> {
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
    let key = key(b, shift);
    if force {
        // The kept one if there is one (the automatic path's), else one for
        // this call, kept from the second as any derived operand.
        let kept = b.derived(key, || WeightTexture::make(b, shift).map(Some))?;
        return kept
            .map_or_else(|| WeightTexture::make(b, shift), Ok)
            .map(Some);
    }
    if !a.device().is_cpu() || !enabled() {
        return Ok(None);
    }
    // A CPU adapter's textures are host memory: made only while the host
    // keeps RESERVE available beyond the textures kept, else this weight
    // keeps reading its buffer (decided once, until it is written).
    let make = || {
        let needed = (b.byte_len())
            .saturating_add(KEPT_BYTES.load(Ordering::Acquire))
            .saturating_add(RESERVE);
        let room = host_available().is_none_or(|free| free >= needed);
        room.then(|| WeightTexture::make(b, shift)).transpose()
    };
    Ok(b.derived_if_reused(key, make)?.flatten())
}

/// Host memory a kept texture leaves available (1 GiB).
const RESERVE: u64 = 1 << 30;

/// The texture entries' program (f32 and bf16 weights alike).
fn program() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        format!(
            "alias COut = f32;\n{}{}{}",
            include_str!("../../../shaders/gemv_params.wgsl"),
            include_str!("../../../shaders/gemv_header.wgsl"),
            include_str!("../../../shaders/gemv_texture.wgsl")
        )
    })
}

/// The texture program, as (name, source): for validation tests.
pub(super) fn texture_sources() -> Vec<(&'static str, &'static str)> {
    vec![(FAMILY, program())]
}

/// The texture entries' pipeline family, also the f32 entry's name.
const FAMILY: &str = "gemv_tex";

/// A as a uniform, B as an `rgba32uint` texture, then bias, acc and C.
const BINDINGS: &[Access] = &[
    Access::Uniform,
    Access::StorageTexture(wgpu::TextureFormat::Rgba32Uint),
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];

/// Record the texture entry with knob `(cols, wg)`: A copied into a
/// uniform, B from `tex` (f32 or bf16, as `weight`); `buffers` are bias,
/// acc (or mul) and C, as `gemv_into` binds them; `params` its parameters,
/// with `groups` and `shift` set here.
pub(super) fn record(
    a: &LocalTensor,
    (tex, weight): (&WeightTexture, DType),
    [bias, acc, out]: [&LocalTensor; 3],
    params: Params,
    rows: usize,
    (cols, wg): (usize, usize),
) -> Result<()> {
    const OP: &str = "gemv";
    let entry = [FAMILY, "gemv_tex8"][usize::from(weight == DType::BF16)];
    let x = a.rank().alloc(OP, &[4 * A_VEC4S], DType::F32)?;
    copy_region(a, 0, &x, 0, a.len())?;
    let groups = (params.n as usize).div_ceil(cols).div_ceil(wg);
    let params = Params {
        groups: groups as u32,
        shift: shift(a.device()),
        ..params
    };
    let constants = vec![
        ("ROWS", rows as f64),
        ("WG", wg as f64),
        ("COLS", cols as f64),
    ];
    let spec = KernelSpec::new(FAMILY, program(), BINDINGS, entry).with_constants(constants);
    crate::device::Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[&x, bias, acc, out],
        workgroups: groups as u64,
    }
    .record_with_textures(a.device(), &[&tex.view])
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::device::tune;
    use crate::kernels::{GemmOptions, gemm};
    use crate::{DType, Mesh, Tuning};

    /// Weight textures made by this test binary.
    pub(super) static MADE: AtomicUsize = AtomicUsize::new(0);

    /// A texture class whose measurement chose the buffer kernel makes no
    /// texture of a weight read again; one that chose a texture knob makes
    /// one and keeps it (so the first check can fail).
    #[test]
    fn a_class_measured_for_the_buffer_keeps_no_texture() {
        let mesh = Mesh::simulated(1).unwrap();
        let r = &mesh.ranks()[0];
        if !r.device().is_cpu() {
            return;
        }
        crate::set_tuning(Tuning {
            enabled: true,
            dir: None,
            budget: std::time::Duration::ZERO,
        });
        let opts = GemmOptions::new().trans_b(true).weight(true);
        let k = 512;
        let a = r.upload(&[1, k], &vec![0.5; k]).unwrap();
        for (n, choice, kept) in [(3001usize, "wg 32", 0), (5001, "texture cols 4 wg 32", 1)] {
            let class = format!(
                "gemv_{0}_to_{0}_ab4 gemv_nk rows 1 n {1} k {k} texture",
                DType::F32,
                n.next_power_of_two()
            );
            tune::remember(r.device(), &class, choice);
            let b = r.upload(&[n, k], &vec![0.25; n * k]).unwrap();
            let made = MADE.load(Ordering::Acquire);
            for _ in 0..3 {
                let c = gemm(&a, &b, opts).unwrap();
                assert_eq!(c.to_vec().unwrap(), vec![64.0; n], "{class}");
            }
            assert_eq!(b.derived_count(), kept, "{class} chose {choice}");
            let made = MADE.load(Ordering::Acquire) - made;
            assert_eq!(made, kept, "{class} chose {choice}: textures made");
        }
    }
}

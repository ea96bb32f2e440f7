//! The texture path: the register kernel reading A and B from RGBA
//! textures they are copied (or packed, or blocked) into, on CPU adapters;
//! see the module docs of `gemm/` for which operands take which layout.

use super::kept::of_b;
use super::options::{GemmOptions, GemmVariant};
use super::params::{Params, gemm_bindings};
use super::precision::Precision;
use super::tile::{BLOCKED_TEXELS, Reads, Stored, Tile, column_blocks_pay, small_product};
use crate::device::{
    Access, Dispatch, KernelSpec, LocalTensor, storage_textures_work, texel_format,
    texture_row_align,
};
use crate::element::DType;
use crate::error::Result;
use crate::kernels::transpose::{pack, pack_blocks, pack_column_blocks};

/// The register kernel reading A and B from sampled textures.
const TEXTURE_BINDINGS: &[Access] = &gemm_bindings(Access::Texture);

/// The register kernel reading A and B from f32 storage textures.
const STORAGE_TEXTURE_BINDINGS_F32: &[Access] =
    &gemm_bindings(Access::StorageTexture(wgpu::TextureFormat::Rgba32Float));

/// The register kernel reading A and B from f16 storage textures.
const STORAGE_TEXTURE_BINDINGS_F16: &[Access] =
    &gemm_bindings(Access::StorageTexture(wgpu::TextureFormat::Rgba16Float));

/// How a texture variant binds A and B on `a`'s device: storage textures
/// where asked for, or by default on CPU adapters (lavapipe and GL
/// llvmpipe, where their loads are cheaper than sampled fetches), if the
/// device can bind two of them.
pub(super) fn texture_reads(a: &LocalTensor, variant: GemmVariant) -> Result<Reads> {
    let device = a.device();
    let storage = match variant {
        GemmVariant::SampledTexture => false,
        GemmVariant::StorageTexture => true,
        _ => device.is_cpu(),
    };
    let format = texel_format("gemm", a.dtype())?;
    Ok(if storage && storage_textures_work(device, format) {
        Reads::StorageTextures
    } else {
        Reads::Textures
    })
}

/// The register kernel reading A and B from textures (`reads`), recorded
/// into `out`; `false` (nothing recorded) where K is 0 or an operand is
/// larger than the device's textures.
#[allow(clippy::too_many_arguments)]
pub(super) fn texture_gemm(
    a: &LocalTensor,
    (b, cache_b): (&LocalTensor, bool),
    opts: &GemmOptions<'_>,
    precision: Precision,
    flags: u32,
    out: &LocalTensor,
    (m, n, k): (usize, usize, usize),
    reads: Reads,
) -> Result<bool> {
    const OP: &str = "gemm";
    let (m4, n4, k4) = (
        m.next_multiple_of(4),
        n.next_multiple_of(4),
        k.next_multiple_of(4),
    );
    let macs = m as u64 * n as u64 * k as u64;
    let tile = Tile::for_device(a.device(), reads, (m, n, k), opts.trans_a);
    // Operands the kernel reads as stored or blocked, where the tile can
    // (Tile::layout); the others are packed (all of them for small
    // products: one pipeline, not one per layout).
    let large = !small_product(macs);
    let mut stored = tile.layout(
        reads,
        Stored {
            trans_a: opts.trans_a && large,
            trans_b: opts.trans_b && large,
            blocked_a: !opts.trans_a && large,
            // From [K, N] only by the vec4 pack, which needs whole texels,
            // and where that pays.
            blocked_b: large
                && (opts.trans_b || (k % 4 == 0 && n % 4 == 0 && column_blocks_pay(a.device()))),
        },
    );
    // A blocked in the workgroup's rows, B (either layout) in its columns:
    // BLOCKED_TEXELS wide, rows enough for every block of K/4 texels.
    let (block_a, block_b) = tile.span();
    let blocked_sides = |rows: usize, block: usize| {
        let texels = rows.div_ceil(block) * block * (k4 / 4);
        (BLOCKED_TEXELS, texels.div_ceil(BLOCKED_TEXELS))
    };
    let (a_blocked, b_blocked) = (blocked_sides(m, block_a), blocked_sides(n, block_b));
    stored.blocked_a &= a.texture_fits(a_blocked.1, a_blocked.0);
    stored.blocked_b &= a.texture_fits(b_blocked.1, b_blocked.0);
    // Texture sides (texels, rows; K, M and N rounded up to 4): A is K/4 ×
    // M, or M/4 × K stored [K, M]; B is N/4 × K, or K/4 × N stored [N, K].
    let a_sides = if stored.blocked_a {
        a_blocked
    } else if stored.trans_a {
        (m4 / 4, k4)
    } else {
        (k4 / 4, m)
    };
    let b_sides = if stored.blocked_b {
        b_blocked
    } else if stored.trans_b {
        (k4 / 4, n)
    } else {
        (n4 / 4, k4)
    };
    if k == 0 || !a.texture_fits(a_sides.1, a_sides.0) || !a.texture_fits(b_sides.1, b_sides.0) {
        return Ok(false);
    }
    // Rows 256-byte aligned for the copy, and zero past K so whole texels can
    // be summed: operands not so are packed (transposed unless the kernel
    // reads them as stored).
    let align = texture_row_align(a.dtype());
    let storage = reads == Reads::StorageTextures;
    let texture = |t: &LocalTensor, (texels, rows): (usize, usize), copy_as_is, transpose| {
        let (src, pitch) = if copy_as_is {
            (t.clone(), t.shape()[1])
        } else {
            let pitch = (4 * texels).next_multiple_of(align);
            (pack(OP, t, transpose, rows, pitch)?, pitch)
        };
        src.to_texture(OP, rows, texels, pitch, storage)
    };
    // Either operand, not transposed as packed, in blocks of `block` rows.
    let blocked_texture = |t: &LocalTensor, (texels, rows): (usize, usize), block| {
        pack_blocks(OP, t, false, block, rows, 4 * texels)?.to_texture(
            OP,
            rows,
            texels,
            4 * texels,
            storage,
        )
    };
    let a_as_is = match (opts.trans_a, stored.trans_a) {
        (false, _) => k % align == 0,
        (true, true) => k % 4 == 0 && m % align == 0,
        (true, false) => false,
    };
    let b_as_is = match (opts.trans_b, stored.trans_b) {
        (false, _) => k % 4 == 0 && n % align == 0,
        (true, true) => k % align == 0,
        (true, false) => false,
    };
    let a_tex = if stored.blocked_a {
        blocked_texture(a, a_sides, block_a)?
    } else {
        texture(a, a_sides, a_as_is, opts.trans_a && !stored.trans_a)?
    };
    let b_key = || {
        format!(
            "texture {stored:?} {b_sides:?} block {block_b}x{} as-is {b_as_is} storage {storage} t {}",
            tile.lane_texels(),
            opts.trans_b
        )
    };
    let b_tex =
        of_b(b, cache_b, b_key, || {
            Ok(if stored.blocked_b && !stored.trans_b {
                // A block of block_b columns holds block_b texels per step of K.
                let (texels, rows) = b_sides;
                pack_column_blocks(OP, b, block_b, tile.lane_texels(), rows, 4 * texels)?
                    .to_texture(OP, rows, texels, 4 * texels, storage)?
            } else if stored.blocked_b {
                blocked_texture(b, b_sides, block_b)?
            } else {
                texture(b, b_sides, b_as_is, opts.trans_b && !stored.trans_b)?
            })
        })?;
    let (entry, source) = tile.program(precision, reads, stored);
    let bindings = match (reads, precision.input()) {
        (Reads::StorageTextures, DType::F16) => STORAGE_TEXTURE_BINDINGS_F16,
        (Reads::StorageTextures, _) => STORAGE_TEXTURE_BINDINGS_F32,
        _ => TEXTURE_BINDINGS,
    };
    let spec = KernelSpec::new(precision.family(), source, bindings, entry);
    let params = Params::new(m, n, k, flags, tile.span(), (k4, n4))?;
    // Absent bias/accumulate bind `a` and `b` in their place (unread: the
    // flags say so), which also names the operands in traces.
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[opts.bias.unwrap_or(a), opts.accumulate.unwrap_or(b), out],
        workgroups: params.groups as u64,
    }
    .record_with_textures(a.device(), &[&a_tex, &b_tex])?;
    Ok(true)
}

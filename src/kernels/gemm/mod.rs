//! Matrix multiply: `C = op(A)·op(B) (+ bias) (+ accumulate)` on one rank,
//! with `op` an optional transpose, A `[M,K]` (or `[K,M]`), B `[K,N]` (or
//! `[N,K]`), bias `[N]` broadcast over rows and accumulate `[M,N]` (for
//! `dW += …`). The output is a fresh `[M,N]` tensor.
//!
//! Most kernels read one layout (A `[M, K]`, B `[K, N]`); transposed
//! operands, and on CPU adapters ragged ones, are first packed into it by
//! the cheap `transpose` kernel, so a run compiles one GEMM pipeline, not
//! one per layout: shader compilation, not arithmetic, was most of a fresh
//! run's time. The exception is the shared-rows texture kernel on large
//! products (≥ 2^24 multiply-adds), which reads A `[K, M]` as stored (and
//! B `[N, K]` where blocking does not apply), one pipeline per layout used:
//! there the transposing packs would cost more of a training step than the
//! extra compiles. It does pack a non-transposed A, into blocks of its
//! tile's rows (`transpose::pack_blocks`), so that the subgroup's fetches
//! for one step of K are adjacent texels, which gains more than the pack
//! costs. B stored `[N, K]` (the forward's `x·Wᵀ`) is packed the same way
//! in blocks of the workgroup's columns; so is B stored `[K, N]` (dx's W,
//! dW's x) where K and N are whole texels (`transpose::pack_column_blocks`),
//! on Mesa ≥ 24 only: on Mesa 22.3 that pack made it slower, so B stays as
//! stored there (measured: see BENCHMARKS.md).
//! The kernels ([`GemmVariant`]), chosen per adapter:
//! - `Texture` (the register kernel, generated per tile in
//!   `gemm/register.rs`, reading A and B from RGBA textures they are copied
//!   into): for CPU adapters (lavapipe, llvmpipe), whose drivers fetch a
//!   texel per lane at once but load storage buffers lane by lane inside
//!   loops; each invocation keeps a tile of C in vec4 registers, no
//!   workgroup memory. The textures are bound as read-only storage
//!   textures, whose loads skip the sampler's level logic (faster there;
//!   `SampledTexture` / `StorageTexture` force either; the path
//!   is `gemm/texture.rs`). The tile is chosen per adapter
//!   (`gemm/tile.rs`): where the device has subgroups
//!   (lavapipe), each lane owns columns and the subgroup fetches A's rows
//!   once and broadcasts them (16×8 per lane; on Mesa ≥ 24, 32×8 for every
//!   large product on Intel CPUs and elsewhere for A read transposed over
//!   K > 2048); without them
//!   (GL llvmpipe) 16×16 or 8×16 per lane, each fetching its own rows.
//!   Products under 2^24 multiply-adds take tiles that compile fast (8×8
//!   shared, 4×8 without subgroups): compiling is what they wait for.
//! - `Buffer`: the same register kernel reading storage buffers (4×4 on
//!   Mesa ≥ 24, 4×16 on Mesa < 24 and GL), for operands the texture kernel
//!   cannot take even in parts (`gemm/split.rs` splits products with a side
//!   past the device's textures). `PackedBuffer` is it with both operands
//!   always packed (the path ragged shapes take, forced).
//! - `Tiled` (`shaders/gemm_tiled.wgsl`): workgroup-memory tiling for real GPUs.
//! - `Coop` (`shaders/gemm_coop.wgsl`): f16 operands on cooperative
//!   matrices (tensor cores), where
//!   [`Device::has_coop_f16`](crate::device::Device::has_coop_f16); `Auto`'s
//!   choice for f16 products there.
//! - `Gemv` (`super::gemv`): A of at most 8 rows (a decoding step's tokens),
//!   B read as stored, on every adapter: one token's product streams each
//!   weight once, where a pack or texture copy would stream it twice more.
//!
//! [`GemmOptions::weight`] keeps what the kernels derive from B (a weight:
//! packs, texture copies) with B's buffer until a kernel writes it in place.
//!
//! `WGPU_TP_GEMM_TILE=TMxTN/WG[m|n|s]` (e.g. `32x8/8s`) overrides the
//! register tile, for tuning.
//!
//! `WGPU_TP_GEMM_VARIANT=texture|sampled-texture|storage-texture|buffer|tiled|coop|packed-buffer|gemv`
//! forces one for [`gemm`] (`cpu` and `generic` are accepted for `buffer`
//! and `packed-buffer`); [`GemmOptions::variant`] picks one per call. Both
//! are read
//! through the process's settings ([`Settings`](crate::Settings)), which
//! code can change.
//!
//! Mixed precision: A and B may both be f16 (on adapters with `SHADER_F16`);
//! the kernels widen each load and accumulate in f32, add the f32 bias and
//! accumulator in f32, and round once when C is stored as f16
//! ([`GemmOptions::out_dtype`]). Each (operand, output) dtype pair is its own
//! pipeline, composed from the same WGSL with `AIn` / `COut` aliases
//! (`gemm/precision.rs`). B may also be a weight kept in bf16 (or f16)
//! beside f32 A: the small-M kernel reads it as stored; the others take it
//! widened to f32 for the call.
//!
//! This file holds the public API and the dispatch between kernels;
//! `options.rs` the variant and options types, `params.rs` the uniform and
//! bindings every kernel shares, `sources.rs` every composed source for the
//! validation tests. None of them imports this file.

use crate::device::{Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

mod kept;
mod options;
mod params;
mod precision;
mod register;
mod sources;
mod split;
mod texture;
mod tile;

pub use self::options::{GemmOptions, GemmVariant};
pub(crate) use self::sources::{coop_sources, register_sources, tiled_sources};

use self::kept::of_b;
use self::options::{apart, resolve};
use self::params::{BINDINGS, Params};
use self::precision::Precision;
use self::texture::{texture_gemm, texture_reads};
use self::tile::{Reads, Stored, Tile};
use super::gemv::gemv_into;
use super::transpose::pack;

const TILED_TILE: usize = 64;
const COOP_TILE: usize = 128;

/// `[rows, cols]` of a 2-D operand, or a shape error naming it.
fn dims2(op: &'static str, what: &str, t: &LocalTensor) -> Result<(usize, usize)> {
    match *t.shape() {
        [r, c] => Ok((r, c)),
        ref s => Err(Error::shape(op, format!("{what} as a 2-D tensor"), s)),
    }
}

fn fits_u32(op: &'static str, t: &LocalTensor) -> Result<()> {
    // Indices are u32 in the shader; the binding limit normally rules this out first.
    if t.len() > u32::MAX as usize / 2 {
        return Err(Error::invalid(op, "a tensor has more than 2^31 elements"));
    }
    Ok(())
}

/// `C = op(A)·op(B) (+ bias) (+ accumulate)` with A `[M,K]` (`[K,M]` when
/// `trans_a`), B `[K,N]` (`[N,K]` when `trans_b`), bias `[N]`, accumulate
/// `[M,N]`; returns a fresh `[M,N]` tensor on the operands' rank. K = 0 gives
/// bias + accumulate (or zeros). All operands on one rank; A and B both f32
/// or both f16 (accumulated in f32), or A f32 and B a weight kept in bf16 or
/// f16 (read as stored by the small-M kernel, widened for one call by the
/// others); bias and accumulate f32, C of [`GemmOptions::out_dtype`].
/// [`GemmOptions::activation`] and [`GemmOptions::multiply`] are applied
/// last, in that order; [`GemmOptions::variant`] picks the kernel and
/// [`GemmOptions::weight`] keeps what it derives from B. The one GEMM
/// entry point: e.g. `gemm(&x, &w, GemmOptions::new().trans_b(true).weight(true))`
/// for a layer's `x·Wᵀ`.
pub fn gemm(a: &LocalTensor, b: &LocalTensor, opts: GemmOptions<'_>) -> Result<LocalTensor> {
    gemm_impl(a, b, opts, opts.variant, opts.weight)
}

/// One part of a product split for the device's textures (`split.rs`), on
/// the variant already resolved; what is derived from a part is not kept
/// (the part is a fresh copy).
fn gemm_part(
    a: &LocalTensor,
    b: &LocalTensor,
    opts: GemmOptions<'_>,
    variant: GemmVariant,
) -> Result<LocalTensor> {
    gemm_impl(a, b, opts, variant, false)
}

fn gemm_impl(
    a: &LocalTensor,
    b: &LocalTensor,
    opts: GemmOptions<'_>,
    variant: GemmVariant,
    cache_b: bool,
) -> Result<LocalTensor> {
    const OP: &str = "gemm";
    let (ar, ac) = dims2(OP, if opts.trans_a { "A [K, M]" } else { "A [M, K]" }, a)?;
    let (br, bc) = dims2(OP, if opts.trans_b { "B [N, K]" } else { "B [K, N]" }, b)?;
    let (m, k) = if opts.trans_a { (ac, ar) } else { (ar, ac) };
    let (kb, n) = if opts.trans_b { (bc, br) } else { (br, bc) };
    let input = if a.dtype() == DType::F16 {
        DType::F16
    } else {
        DType::F32
    };
    let output = opts.out_dtype.unwrap_or(input);
    if output == DType::I32 {
        return Err(Error::invalid(OP, "out_dtype must be f32 or f16"));
    }
    let precision = Precision::new(input, output);
    // A weight kept in bf16 (or f16 beside f32 activations): the small-M
    // kernel reads it as stored, the others take it widened.
    let narrow_b = input == DType::F32 && matches!(b.dtype(), DType::BF16 | DType::F16);
    let quant_b = input == DType::F32 && b.dtype().quant().is_some();
    let weight = if narrow_b || quant_b {
        b.dtype()
    } else {
        input
    };
    let mut operands = vec![(a, input), (b, weight)];
    operands.extend(opts.bias.map(|t| (t, DType::F32)));
    operands.extend(opts.accumulate.map(|t| (t, DType::F32)));
    operands.extend(opts.multiply.map(|t| (t, DType::F32)));
    for (t, dtype) in operands {
        t.expect_dtype(OP, dtype)?;
        a.same_rank(OP, t)?;
        fits_u32(OP, t)?;
    }
    if kb != k {
        let want = if opts.trans_b {
            format!("B [N, {k}] (K of A)")
        } else {
            format!("B [{k}, N] (K of A)")
        };
        return Err(Error::shape(OP, want, b.shape()));
    }
    if let Some(bias) = opts.bias
        && bias.shape() != [n]
    {
        return Err(Error::shape(OP, [n], bias.shape()));
    }
    if let Some(acc) = opts.accumulate
        && acc.shape() != [m, n]
    {
        return Err(Error::shape(OP, [m, n], acc.shape()));
    }
    if let Some(mul) = opts.multiply
        && mul.shape() != [m, n]
    {
        return Err(Error::shape(OP, [m, n], mul.shape()));
    }
    if (opts.activation.is_some() || opts.multiply.is_some()) && output != DType::F32 {
        return Err(Error::invalid(
            OP,
            "an activation or a multiply needs an f32 C",
        ));
    }
    if quant_b {
        return quant_gemm(a, b, opts, (m, n, k), output);
    }
    let variant = resolve(variant, a, m, k)?;
    let in_store = variant == GemmVariant::Gemv && k > 0;
    if m * n > 0
        && let Some(c) = apart(opts, in_store, |o| gemm_impl(a, b, o, variant, cache_b))?
    {
        return Ok(c);
    }
    let out = a.rank().alloc(OP, &[m, n], output)?;
    fits_u32(OP, &out)?;
    if m == 0 || n == 0 {
        return Ok(out);
    }
    let flags = opts.bias.is_some() as u32 | (opts.accumulate.is_some() as u32) << 1;
    if variant == GemmVariant::Gemv && k > 0 {
        // A transposed is at most GEMV_MAX_ROWS columns: packing it is cheap.
        let a = if opts.trans_a && k > 0 {
            &pack(OP, a, true, m, k)?
        } else {
            a
        };
        gemv_into(
            a,
            b,
            opts.trans_b,
            (opts.bias, opts.accumulate, opts.activation, opts.multiply),
            &out,
            (m, n, k),
            (None, cache_b),
        )?;
        return Ok(out);
    }
    // Widened for this call only: keeping the f32 copy would undo the
    // halved memory that kept the weight narrow.
    let widened;
    let (b, cache_b) = if narrow_b {
        widened = super::cast(b, input)?;
        (&widened, false)
    } else {
        (b, cache_b)
    };
    // Products past the device's textures run in parts (split.rs), the
    // rest take the buffer kernel.
    let variant = match variant {
        GemmVariant::Texture | GemmVariant::SampledTexture | GemmVariant::StorageTexture => {
            let reads = texture_reads(a, variant)?;
            let b = (b, cache_b);
            if texture_gemm(a, b, &opts, precision, flags, &out, (m, n, k), reads)? {
                return Ok(out);
            }
            if let Some(c) =
                split::split_for_textures(a, b.0, &opts, variant, (m, n, k), gemm_part)?
            {
                return Ok(c);
            }
            GemmVariant::Buffer
        }
        v => v,
    };
    let k4 = k.next_multiple_of(4);
    let n4 = n.next_multiple_of(4);
    // Bring A to [M, K] and B to [K, N] (row strides lda, ldb). The register
    // kernel reads aligned vec4s: rows a multiple of 4 long, and B's rows past
    // K (up to a multiple of 4) zero; the tiled kernel takes any stride.
    let (a_p, lda, b_p, ldb);
    if k == 0 {
        // Nothing is read, but a vec4 binding must hold at least one vec4.
        let empty = a.rank().zeros(&[4], input)?;
        (a_p, lda, b_p, ldb) = (empty.clone(), 4, empty, n4);
    } else if matches!(variant, GemmVariant::Tiled | GemmVariant::Coop) {
        a_p = if opts.trans_a {
            pack(OP, a, true, m, k)?
        } else {
            a.clone()
        };
        b_p = if opts.trans_b {
            of_b(
                b,
                cache_b,
                || format!("pack t {k}x{n}"),
                || pack(OP, b, true, k, n),
            )?
        } else {
            b.clone()
        };
        (lda, ldb) = (k, n);
    } else {
        let force = variant == GemmVariant::PackedBuffer;
        let a_in_place = !force && !opts.trans_a && k % 4 == 0;
        let b_in_place = !force && !opts.trans_b && k % 4 == 0 && n % 4 == 0;
        (a_p, lda) = if a_in_place {
            (a.clone(), k)
        } else {
            (pack(OP, a, opts.trans_a, m, k4)?, k4)
        };
        (b_p, ldb) = if b_in_place {
            (b.clone(), n)
        } else {
            let key = || format!("pack {} {k4}x{n4}", opts.trans_b);
            let packed = of_b(b, cache_b, key, || pack(OP, b, opts.trans_b, k4, n4))?;
            (packed, n4)
        };
    }
    let (entry, source, (tile_m, tile_n)) = match variant {
        GemmVariant::Tiled => (
            "gemm_tiled",
            precision.tiled_source(),
            (TILED_TILE, TILED_TILE),
        ),
        GemmVariant::Coop => ("gemm_coop", precision.coop_source(), (COOP_TILE, COOP_TILE)),
        _ => {
            // Everything is packed for the buffer kernel: nothing transposed.
            let tile = Tile::for_device(a.device(), Reads::Buffers, (m, n, k), false);
            let (entry, source) = tile.program(precision, Reads::Buffers, Stored::default());
            (entry, source, tile.span())
        }
    };
    let params = Params::new(m, n, k, flags, (tile_m, tile_n), (lda, ldb))?;
    let spec = KernelSpec::new(precision.family(), source, BINDINGS, entry);
    // Absent bias/accumulate bind `a` in their place; the flags keep them unread.
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[
            &a_p,
            &b_p,
            opts.bias.unwrap_or(a),
            opts.accumulate.unwrap_or(a),
            &out,
        ],
        workgroups: params.groups as u64,
    }
    .record(a.device())?;
    Ok(out)
}

/// A product with a quantized B (checked by [`gemm_impl`]): every M by the
/// quantized kernels, which dequantize what they load; the epilogue in
/// their store as the small-M kernel's. A `K = 0` product (a rank holding
/// none of a row-parallel weight's blocks) is its bias and accumulator.
fn quant_gemm(
    a: &LocalTensor,
    b: &LocalTensor,
    opts: GemmOptions<'_>,
    (m, n, k): (usize, usize, usize),
    output: DType,
) -> Result<LocalTensor> {
    const OP: &str = "gemm";
    if output != DType::F32 {
        return Err(Error::invalid(
            OP,
            format!(
                "a product on a {} weight gives f32 (out_dtype F32)",
                b.dtype()
            ),
        ));
    }
    if k == 0 {
        let shape = if opts.trans_b { [n, 0] } else { [0, n] };
        let empty = a.rank().zeros(&shape, DType::F32)?;
        return gemm_impl(a, &empty, opts, GemmVariant::Auto, false);
    }
    if b.is_blocked() && !opts.trans_b {
        return Err(Error::invalid(
            OP,
            "a·B with a quantized B past one binding: split the weight's rows",
        ));
    }
    // The forward's store takes the epilogue as the small-M kernel's does.
    if let Some(c) = apart(opts, opts.trans_b, |o| {
        quant_gemm(a, b, o, (m, n, k), output)
    })? {
        return Ok(c);
    }
    // A transposed is packed to [M, K] first.
    let a = if opts.trans_a {
        &pack(OP, a, true, m, k)?
    } else {
        a
    };
    if m == 0 || n == 0 || !b.is_blocked() {
        let out = a.rank().alloc(OP, &[m, n], DType::F32)?;
        if m > 0 && n > 0 {
            let epilogue = (opts.bias, opts.accumulate, opts.activation, opts.multiply);
            super::quant::matmul_into(a, b, opts.trans_b, epilogue, &out, (m, n, k))?;
        }
        return Ok(out);
    }
    // Row blocks of B are blocks of C's columns: each product alone, then
    // joined (a vocabulary's head).
    let mut parts = Vec::with_capacity(b.blocks().len());
    for blk in b.blocks() {
        let rows = blk.shape()[0];
        let start = parts
            .iter()
            .map(|p: &LocalTensor| p.shape()[1])
            .sum::<usize>();
        let bias = match opts.bias {
            Some(t) => Some(super::slicing::narrow(t, 0, start, rows)?),
            None => None,
        };
        let side = |t: Option<&LocalTensor>| match t {
            Some(t) => super::slicing::narrow(t, 1, start, rows).map(Some),
            None => Ok(None),
        };
        let (acc, mul) = (side(opts.accumulate)?, side(opts.multiply)?);
        let part = a.rank().alloc(OP, &[m, rows], DType::F32)?;
        let epi = (bias.as_ref(), acc.as_ref(), opts.activation, mul.as_ref());
        super::quant::matmul_into(a, blk, true, epi, &part, (m, rows, k))?;
        parts.push(part);
    }
    let refs: Vec<&LocalTensor> = parts.iter().collect();
    super::slicing::concat(&refs, 1)
}

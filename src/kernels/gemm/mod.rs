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
//! there the transposing packs cost 8–13 % of a training step, more than
//! the compiles. It does pack a non-transposed
//! A, into blocks of its tile's rows (`transpose::pack_blocks`), so that
//! the subgroup's fetches for one step of K are adjacent texels: that made
//! the GEMM 1.1–1.5× as fast on lavapipe, more than the pack costs. B
//! stored `[N, K]` (the forward's `x·Wᵀ`) is packed the same way in blocks
//! of the workgroup's columns: 0.41–0.52× sgemm → 0.49–0.60× on the layer
//! shapes (BENCHMARKS.md, round 9); so is B stored `[K, N]` (dx's W, dW's
//! x) where K and N are whole texels (`transpose::pack_column_blocks`), on
//! Mesa ≥ 24: 0.60–0.68× → 0.66–0.74× for dx and, at K ≤ 2048, dW (round
//! 10; slower on Mesa 22.3, which keeps B as stored).
//! The kernels ([`GemmVariant`]), chosen per adapter:
//! - `Texture` (the register kernel, generated per tile in
//!   `gemm/register.rs`, reading A and B from RGBA textures they are copied
//!   into): for CPU adapters (lavapipe, llvmpipe), whose drivers fetch a
//!   texel per lane at once but load storage buffers lane by lane inside
//!   loops; each invocation keeps a tile of C in vec4 registers, no
//!   workgroup memory. The textures are bound as read-only storage
//!   textures, whose loads skip the sampler's level logic (1.15–1.6× as
//!   fast there; `SampledTexture` / `StorageTexture` force either). The
//!   tile is chosen per adapter: where the device has subgroups
//!   (lavapipe), each lane owns columns and the subgroup fetches A's rows
//!   once and broadcasts them (16×8 per lane; on Mesa ≥ 24, 32×8 for every
//!   large product on Intel CPUs and elsewhere for A read transposed over
//!   K > 2048); without them
//!   (GL llvmpipe) 16×16 or 8×16 per lane, each fetching its own rows.
//!   Products under 2^24 multiply-adds take tiles that compile fast (8×8
//!   shared, 4×8 without subgroups): compiling is what they wait for.
//! - `Cpu`: the same register kernel reading storage buffers (4×4 on Mesa ≥
//!   24, 4×16 on Mesa < 24 and GL), for operands the texture kernel cannot
//!   take even in parts (`gemm/split.rs` splits products with a side past
//!   the device's textures).
//! - `Tiled` (`shaders/gemm_tiled.wgsl`): workgroup-memory tiling for real GPUs.
//! - `Gemv` (`super::gemv`): A of at most 8 rows (a decoding step's tokens),
//!   B read as stored, on every adapter: one token's product streams each
//!   weight once, where a pack or texture copy would stream it twice more.
//!
//! [`gemm_weight`] keeps what the kernels derive from B (a weight: packs,
//! texture copies) with B's buffer until a kernel writes it in place.
//!
//! `WGPU_TP_GEMM_TILE=TMxTN/WG[m|n|s]` (e.g. `32x8/8s`) overrides the
//! register tile, for tuning.
//!
//! `WGPU_TP_GEMM_VARIANT=texture|sampled-texture|storage-texture|cpu|tiled|generic|gemv`
//! forces one for [`gemm`] (read once per process); [`gemm_with`] picks one
//! per call.
//!
//! Mixed precision: A and B may both be f16 (on adapters with `SHADER_F16`);
//! the kernels widen each load and accumulate in f32, add the f32 bias and
//! accumulator in f32, and round once when C is stored as f16
//! ([`GemmOptions::out_dtype`]). Each (operand, output) dtype pair is its own
//! pipeline, composed from the same WGSL with `AIn` / `COut` aliases.

use crate::device::{
    Access, Dispatch, KernelSpec, LocalTensor, storage_textures_work, texel_format,
    texture_row_align,
};
use crate::element::DType;
use crate::error::{Error, Result};

mod kept;
mod register;
mod split;

use self::kept::of_b;
pub(crate) use self::register::register_sources;
use self::register::{BLOCKED_TEXELS, Reads, Stored, Tile, column_blocks_pay, small_product};
use super::gemv::{GEMV_MAX_ROWS, gemv_into};
use super::transpose::{pack, pack_blocks, pack_column_blocks};

/// A GEMM kernel's bindings after the uniform: A and B bound as `operands`,
/// then bias, accumulate (read) and C (written).
const fn gemm_bindings(operands: Access) -> [Access; 5] {
    [
        operands,
        operands,
        Access::Read,
        Access::Read,
        Access::ReadWrite,
    ]
}

const BINDINGS: &[Access] = &gemm_bindings(Access::Read);

/// The register kernel reading A and B from sampled textures.
const TEXTURE_BINDINGS: &[Access] = &gemm_bindings(Access::Texture);

/// The register kernel reading A and B from f32 storage textures.
const STORAGE_TEXTURE_BINDINGS_F32: &[Access] =
    &gemm_bindings(Access::StorageTexture(wgpu::TextureFormat::Rgba32Float));

/// The register kernel reading A and B from f16 storage textures.
const STORAGE_TEXTURE_BINDINGS_F16: &[Access] =
    &gemm_bindings(Access::StorageTexture(wgpu::TextureFormat::Rgba16Float));

const TILED_TILE: usize = 64;

/// Element types of one GEMM pipeline: of A and B (`input`) and of C
/// (`output`); f32 or f16. Arithmetic is f32 in every case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Precision {
    input: DType,
    output: DType,
}

impl Precision {
    /// Every pair the kernels are built for.
    pub(crate) const ALL: [Precision; 4] = [
        Precision::new(DType::F32, DType::F32),
        Precision::new(DType::F16, DType::F16),
        Precision::new(DType::F16, DType::F32),
        Precision::new(DType::F32, DType::F16),
    ];

    const fn new(input: DType, output: DType) -> Self {
        Precision { input, output }
    }

    /// The element type of A and B.
    pub(crate) fn input(self) -> DType {
        self.input
    }

    /// `enable f16;` where needed and the `AIn` / `COut` aliases, composed in
    /// front of the shared header.
    pub(crate) fn prelude(self) -> String {
        let f16 = self.input == DType::F16 || self.output == DType::F16;
        format!(
            "{}alias AIn = {};\nalias COut = {};\n",
            if f16 { "enable f16;\n" } else { "" },
            self.input,
            self.output
        )
    }

    /// The pipeline family: one per pair, so the cache keeps them apart.
    pub(crate) fn family(self) -> &'static str {
        match (self.input, self.output) {
            (DType::F16, DType::F16) => "gemm_f16",
            (DType::F16, _) => "gemm_f16_to_f32",
            (_, DType::F16) => "gemm_f32_to_f16",
            _ => "gemm",
        }
    }

    /// The workgroup-memory kernel for real GPUs (a 64×64 tile of C per
    /// workgroup) in this precision, composed once per process.
    pub(crate) fn tiled_source(self) -> &'static str {
        interned(&format!("tiled {self:?}"), || {
            self.prelude()
                + include_str!("../../../shaders/gemm_header.wgsl")
                + include_str!("../../../shaders/gemm_tiled.wgsl")
        })
    }
}

/// A generated WGSL source (or entry name), built once per process under
/// `key` and kept for the program's life: pipeline specs take `&'static str`.
fn interned(key: &str, build: impl FnOnce() -> String) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(s) = cache.get(key) {
        return s;
    }
    let s: &'static str = Box::leak(build().into_boxed_str());
    cache.insert(key.to_string(), s);
    s
}

/// The tiled kernel in every precision, as (name, source): for validation tests.
pub(crate) fn tiled_sources() -> Vec<(&'static str, &'static str)> {
    Precision::ALL
        .iter()
        .map(|p| (p.family(), p.tiled_source()))
        .collect()
}

/// Which GEMM kernel to run (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GemmVariant {
    /// `WGPU_TP_GEMM_VARIANT` if set, else `Texture` on CPU adapters and
    /// `Tiled` on other adapters.
    #[default]
    Auto,
    /// The register kernel reading A and B from RGBA textures they are
    /// copied into (packed first where a row is not a multiple of 64 f32 /
    /// 128 f16 elements, and where transposed unless the kernel shares rows
    /// by subgroup and the product is large): the fastest on CPU adapters,
    /// whose drivers fetch texels much faster than storage loads. Products
    /// with a side over `max_texture_dimension_2d` run as parts that fit.
    /// On CPU adapters the textures are bound as read-only storage textures
    /// (loaded faster than sampled texels there), elsewhere as sampled ones.
    Texture,
    /// `Texture` with A and B bound as sampled textures (`texture_2d`).
    SampledTexture,
    /// `Texture` with A and B bound as read-only storage textures
    /// (`texture_storage_2d`); sampled textures where the device cannot
    /// bind two of them in a kernel.
    StorageTexture,
    /// Register-tiled, no workgroup memory, reading storage buffers. Operands
    /// whose layout it cannot read in place (transposed, or a contiguous
    /// dimension not a multiple of 4) are packed first.
    Cpu,
    /// Workgroup-memory tiled: for real GPUs; any shape (transposed operands
    /// are packed first).
    Tiled,
    /// The `Cpu` kernel with both operands always packed: the path ragged
    /// shapes take, forced (for tests and benchmarks).
    Generic,
    /// The small-M kernel (`shaders/gemv.wgsl`): A of at most
    /// [`GEMV_MAX_ROWS`] rows, B read where it is stored (no pack, no
    /// texture). `Auto` takes it for such products on every adapter.
    Gemv,
}

impl GemmVariant {
    /// The variant named by `WGPU_TP_GEMM_VARIANT` (`texture`,
    /// `sampled-texture`, `storage-texture`, `cpu`, `tiled`, `generic`, `gemv`;
    /// anything else means `Auto`), read once per process.
    fn from_env() -> GemmVariant {
        static VARIANT: std::sync::OnceLock<GemmVariant> = std::sync::OnceLock::new();
        *VARIANT.get_or_init(|| {
            match std::env::var("WGPU_TP_GEMM_VARIANT")
                .unwrap_or_default()
                .to_ascii_lowercase()
                .as_str()
            {
                "texture" => GemmVariant::Texture,
                "sampled-texture" => GemmVariant::SampledTexture,
                "storage-texture" => GemmVariant::StorageTexture,
                "cpu" => GemmVariant::Cpu,
                "tiled" => GemmVariant::Tiled,
                "generic" => GemmVariant::Generic,
                "gemv" => GemmVariant::Gemv,
                _ => GemmVariant::Auto,
            }
        })
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    flags: u32,
    groups_n: u32,
    groups: u32,
    lda: u32,
    ldb: u32,
}

impl Params {
    /// The uniform for an M×N×K product with `flags`, a workgroup covering
    /// `span` = (rows, columns) of C, and operand row strides `(lda, ldb)`.
    fn new(
        m: usize,
        n: usize,
        k: usize,
        flags: u32,
        (tile_m, tile_n): (usize, usize),
        (lda, ldb): (usize, usize),
    ) -> Result<Params> {
        let groups_n = n.div_ceil(tile_n);
        let groups = m.div_ceil(tile_m) as u64 * groups_n as u64;
        Ok(Params {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            flags,
            groups_n: groups_n as u32,
            groups: u32::try_from(groups).map_err(|_| Error::invalid("gemm", "grid too large"))?,
            lda: lda as u32,
            ldb: ldb as u32,
        })
    }
}

/// Options for [`gemm`]: `C = op(A)·op(B) (+ bias broadcast over rows) (+ accumulate)`.
#[derive(Clone, Copy, Default, Debug)]
pub struct GemmOptions<'a> {
    /// Use Aᵀ: A is stored `[K, M]`.
    pub trans_a: bool,
    /// Use Bᵀ: B is stored `[N, K]`.
    pub trans_b: bool,
    /// `[N]`, added to every row of C.
    pub bias: Option<&'a LocalTensor>,
    /// `[M, N]`, added to C (gradient accumulation: `dW_new = dW + Xᵀ·dY`).
    pub accumulate: Option<&'a LocalTensor>,
    /// C's dtype (f32 or f16); `None` means A's. Bias and accumulate are
    /// always f32, and the sum is f32 until C is stored.
    pub out_dtype: Option<DType>,
}

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
/// or both f16 (accumulated in f32), bias and accumulate f32, C of
/// [`GemmOptions::out_dtype`].
pub fn gemm(a: &LocalTensor, b: &LocalTensor, opts: GemmOptions<'_>) -> Result<LocalTensor> {
    gemm_with(a, b, opts, GemmVariant::Auto)
}

/// [`gemm`] with the kernel chosen by `variant` instead of by the adapter
/// (for tests and benchmarks; every variant gives the same result up to
/// rounding).
pub fn gemm_with(
    a: &LocalTensor,
    b: &LocalTensor,
    opts: GemmOptions<'_>,
    variant: GemmVariant,
) -> Result<LocalTensor> {
    gemm_impl(a, b, opts, variant, false)
}

/// [`gemm`] where B is a weight, used again before it changes (a layer's
/// `x·Wᵀ` and `dy·W`): the pack or texture copy a kernel makes of B is kept
/// with B's buffer and reused until B is written in place (an optimiser
/// step bumps its [`LocalTensor::version`]), so evaluation and prefill
/// stop re-packing every weight per call. Costs the kept copies' memory
/// (about one more weight per layout used) until then;
/// `WGPU_TP_PACK_CACHE=0` turns the keeping off.
pub fn gemm_weight(a: &LocalTensor, b: &LocalTensor, opts: GemmOptions<'_>) -> Result<LocalTensor> {
    gemm_impl(a, b, opts, GemmVariant::Auto, true)
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
    let mut operands = vec![(a, input), (b, input)];
    operands.extend(opts.bias.map(|t| (t, DType::F32)));
    operands.extend(opts.accumulate.map(|t| (t, DType::F32)));
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
    let out = a.rank().alloc(OP, &[m, n], output)?;
    fits_u32(OP, &out)?;
    if m == 0 || n == 0 {
        return Ok(out);
    }
    let flags = opts.bias.is_some() as u32 | (opts.accumulate.is_some() as u32) << 1;
    let variant = match variant {
        // One token (or a few): stream B once, as stored.
        // (It binds five storage buffers; downlevel devices allow four.)
        GemmVariant::Auto
            if m <= GEMV_MAX_ROWS
                && k > 0
                && GemmVariant::from_env() == GemmVariant::Auto
                && a.device().limits().max_storage_buffers_per_shader_stage >= 5 =>
        {
            GemmVariant::Gemv
        }
        GemmVariant::Auto => match GemmVariant::from_env() {
            GemmVariant::Auto if a.device().is_cpu() => GemmVariant::Texture,
            // The tiled kernel's 16×16 workgroup needs 256 invocations; the
            // register kernel's 8 fit any device.
            GemmVariant::Auto
                if a.device().limits().max_compute_invocations_per_workgroup < 256 =>
            {
                GemmVariant::Cpu
            }
            GemmVariant::Auto => GemmVariant::Tiled,
            v => v,
        },
        v => v,
    };
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
            (opts.bias, opts.accumulate),
            &out,
            (m, n, k),
        )?;
        return Ok(out);
    }
    // Products past the device's textures run in parts (split.rs), the
    // rest take the buffer kernel.
    let variant = match variant {
        GemmVariant::Texture | GemmVariant::SampledTexture | GemmVariant::StorageTexture => {
            let reads = texture_reads(a, variant)?;
            let b = (b, cache_b);
            if texture_gemm(a, b, &opts, precision, flags, &out, (m, n, k), reads)? {
                return Ok(out);
            }
            if let Some(c) = split::split_for_textures(a, b.0, &opts, variant, (m, n, k))? {
                return Ok(c);
            }
            GemmVariant::Cpu
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
    } else if variant == GemmVariant::Tiled {
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
        let force = variant == GemmVariant::Generic;
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

/// How a texture variant binds A and B on `a`'s device: storage textures
/// where asked for, or by default on CPU adapters (lavapipe and GL
/// llvmpipe, where they ran 1.2–1.6× as fast), if the device can bind two
/// of them.
fn texture_reads(a: &LocalTensor, variant: GemmVariant) -> Result<Reads> {
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
fn texture_gemm(
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

/// `A·B` for A `[M,K]` and B `[K,N]`: [`gemm`] without transposes, bias or accumulate.
pub fn matmul(a: &LocalTensor, b: &LocalTensor) -> Result<LocalTensor> {
    gemm(a, b, GemmOptions::default())
}

//! Matrix multiply (`shaders/gemm.wgsl`): `C = op(A)·op(B) (+ bias) (+ accumulate)`
//! on one rank, with `op` an optional transpose, A `[M,K]` (or `[K,M]`),
//! B `[K,N]` (or `[N,K]`), bias `[N]` broadcast over rows and accumulate
//! `[M,N]` (for `dW += …`). The output is a fresh `[M,N]` tensor.
//!
//! Three kernels ([`GemmVariant`]), chosen per adapter and shape:
//! - `Cpu` (`shaders/gemm_cpu.wgsl`): for CPU adapters (lavapipe, llvmpipe),
//!   a 16×32 register tile per invocation with vec4 loads, no workgroup
//!   memory; needs every operand's contiguous dimension to be a multiple of 4.
//! - `Tiled` (`shaders/gemm_tiled.wgsl`): workgroup-memory tiling for real GPUs.
//! - `Generic` (`shaders/gemm.wgsl`): any shape; CPU adapters use it for
//!   shapes the `Cpu` kernel cannot take.
//!
//! `WGPU_TP_GEMM_VARIANT=cpu|tiled|generic` forces one for [`gemm`] (read
//! once per process); [`gemm_with`] picks one per call.

use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

/// Rows and columns of C per invocation (`TM`, `TN` in the shader).
const TILE_M: usize = 4;
const TILE_N: usize = 16;
/// Invocations per workgroup (all along N; the `WG` override).
const WORKGROUP: usize = 16;

const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];

/// The shader with `b` read one element at a time (any shape).
const SOURCE_SCALAR: &str = concat!(
    include_str!("../../shaders/gemm.wgsl"),
    r#"
// Tail: b read element-wise.
const B_VEC: bool = false;
@group(0) @binding(2) var<storage, read> b: array<f32>;
fn b1(i: u32) -> f32 { return b[i]; }
fn b4(i: u32) -> vec4<f32> { return vec4<f32>(b[4u * i], b[4u * i + 1u], b[4u * i + 2u], b[4u * i + 3u]); }

@compute @workgroup_size(WG)
fn gemm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    gemm_main(wg, nwg, li);
}
"#
);

/// The shader with `b` read as vec4s: only when b's contiguous dimension is a
/// multiple of 4 (so its length is too, and the binding holds whole vec4s).
const SOURCE_VEC4: &str = concat!(
    include_str!("../../shaders/gemm.wgsl"),
    r#"
// Tail: b read as aligned vec4s (its length is a multiple of 4).
const B_VEC: bool = true;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
fn b1(i: u32) -> f32 { return b[i / 4u][i % 4u]; }
fn b4(i: u32) -> vec4<f32> { return b[i]; }

@compute @workgroup_size(WG)
fn gemm_vec4(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) li: u32) {
    gemm_main(wg, nwg, li);
}
"#
);

/// The CPU-adapter kernel (aligned shapes only).
const SOURCE_CPU: &str = include_str!("../../shaders/gemm_cpu.wgsl");
/// Rows and columns of C per invocation, and invocations per workgroup (along N).
const CPU_TILE_M: usize = 16;
const CPU_TILE_N: usize = 32;
const CPU_WORKGROUP: usize = 8;

/// The workgroup-memory kernel for real GPUs: a 64×64 tile of C per workgroup.
const SOURCE_TILED: &str = include_str!("../../shaders/gemm_tiled.wgsl");
const TILED_TILE: usize = 64;

/// Every complete gemm shader source, for validation tests.
pub(crate) const SOURCES: &[(&str, &str)] = &[
    ("gemm", SOURCE_SCALAR),
    ("gemm_vec4", SOURCE_VEC4),
    ("gemm_cpu", SOURCE_CPU),
    ("gemm_tiled", SOURCE_TILED),
];

/// Which GEMM kernel to run (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GemmVariant {
    /// `WGPU_TP_GEMM_VARIANT` if set, else `Cpu` on CPU adapters (when the
    /// shape allows it, else `Generic`) and `Tiled` on other adapters.
    #[default]
    Auto,
    /// Register-tiled, no workgroup memory: fastest on CPU adapters. Falls
    /// back to `Generic` unless A's, B's and C's contiguous dimensions are
    /// multiples of 4.
    Cpu,
    /// Workgroup-memory tiled: for real GPUs; any shape.
    Tiled,
    /// Small register tile, no workgroup memory; any shape.
    Generic,
}

impl GemmVariant {
    /// The variant named by `WGPU_TP_GEMM_VARIANT` (`cpu`, `tiled`, `generic`;
    /// anything else means `Auto`), read once per process.
    fn from_env() -> GemmVariant {
        static VARIANT: std::sync::OnceLock<GemmVariant> = std::sync::OnceLock::new();
        *VARIANT.get_or_init(|| {
            match std::env::var("WGPU_TP_GEMM_VARIANT")
                .unwrap_or_default()
                .to_ascii_lowercase()
                .as_str()
            {
                "cpu" => GemmVariant::Cpu,
                "tiled" => GemmVariant::Tiled,
                "generic" => GemmVariant::Generic,
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
    _pad: [u32; 2],
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
/// bias + accumulate (or zeros). All operands must be f32 on one rank.
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
    const OP: &str = "gemm";
    let (ar, ac) = dims2(OP, if opts.trans_a { "A [K, M]" } else { "A [M, K]" }, a)?;
    let (br, bc) = dims2(OP, if opts.trans_b { "B [N, K]" } else { "B [K, N]" }, b)?;
    let (m, k) = if opts.trans_a { (ac, ar) } else { (ar, ac) };
    let (kb, n) = if opts.trans_b { (bc, br) } else { (br, bc) };
    let mut operands = vec![a, b];
    operands.extend(opts.bias);
    operands.extend(opts.accumulate);
    for t in &operands {
        t.expect_dtype(OP, DType::F32)?;
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
    let out = a.rank().alloc(OP, &[m, n], DType::F32)?;
    fits_u32(OP, &out)?;
    if m == 0 || n == 0 {
        return Ok(out);
    }
    let flags = opts.bias.is_some() as u32 | (opts.accumulate.is_some() as u32) << 1;
    let transposes = [
        ("TA", opts.trans_a as u8 as f64),
        ("TB", opts.trans_b as u8 as f64),
    ];
    // The Cpu kernel reads every operand as aligned vec4s along its
    // contiguous dimension (bias and C along N).
    let aligned = k > 0
        && n % 4 == 0
        && (if opts.trans_a { m % 4 == 0 } else { k % 4 == 0 })
        && (if opts.trans_b { k % 4 == 0 } else { true });
    let variant = match variant {
        GemmVariant::Auto => match GemmVariant::from_env() {
            GemmVariant::Auto if a.device().is_cpu() => GemmVariant::Cpu,
            GemmVariant::Auto => GemmVariant::Tiled,
            v => v,
        },
        v => v,
    };
    let variant = match variant {
        GemmVariant::Cpu if !aligned => GemmVariant::Generic,
        v => v,
    };
    // (entry, source, workgroup size constant, tile of C per workgroup)
    let (entry, source, wg, (tile_m, tile_n)) = match variant {
        GemmVariant::Cpu => (
            "gemm_cpu",
            SOURCE_CPU,
            Some(CPU_WORKGROUP),
            (CPU_TILE_M, CPU_WORKGROUP * CPU_TILE_N),
        ),
        GemmVariant::Tiled => ("gemm_tiled", SOURCE_TILED, None, (TILED_TILE, TILED_TILE)),
        _ => {
            // vec4 loads of b need its contiguous dimension to be a multiple of 4.
            let b_vec = if opts.trans_b {
                k > 0 && k % 4 == 0
            } else {
                k > 0 && n % 4 == 0
            };
            let (entry, source) = if b_vec {
                ("gemm_vec4", SOURCE_VEC4)
            } else {
                ("gemm", SOURCE_SCALAR)
            };
            (entry, source, Some(WORKGROUP), (TILE_M, WORKGROUP * TILE_N))
        }
    };
    let groups_n = n.div_ceil(tile_n);
    let groups = m.div_ceil(tile_m) as u64 * groups_n as u64;
    let params = Params {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        flags,
        groups_n: groups_n as u32,
        groups: u32::try_from(groups).map_err(|_| Error::invalid(OP, "grid too large"))?,
        _pad: [0; 2],
    };
    let mut constants = transposes.to_vec();
    constants.extend(wg.map(|w| ("WG", w as f64)));
    let spec = KernelSpec {
        family: "gemm",
        source,
        entry,
        bindings: BINDINGS,
        constants,
    };
    // Absent bias/accumulate bind `a` in their place; the flags keep them unread.
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[
            a,
            b,
            opts.bias.unwrap_or(a),
            opts.accumulate.unwrap_or(a),
            &out,
        ],
        workgroups: groups,
    }
    .record(a.device())?;
    Ok(out)
}

/// `A·B` for A `[M,K]` and B `[K,N]`: [`gemm`] without transposes, bias or accumulate.
pub fn matmul(a: &LocalTensor, b: &LocalTensor) -> Result<LocalTensor> {
    gemm(a, b, GemmOptions::default())
}

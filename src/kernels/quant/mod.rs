//! Products and lookups on quantized weights (`DType::Quant`): the weight
//! stays in its blocks (`quant::layout`) and each kernel dequantizes what
//! it loads, in f32, as ggml does, and accumulates in f32 — no f32 copy
//! of the weight is ever made.
//!
//! - `matmul_into`: `c = act(a·wᵀ (+ bias) (+ acc)) (⊙ mul)` for a
//!   layer's `[N, K]` weight and any number of rows of `a` (a decoding
//!   step's one token or a prefill's many), and `c = a·w` (the backward's
//!   `dx`). [`gemm`](super::gemm()) sends every product with a quantized
//!   B here.
//! - the embedding lookup on a quantized table
//!   ([`embedding_lookup`](super::embedding_lookup)), through
//!   `sources::lookup_program`.
//!
//! Each invocation of the forward owns four rows of `w` and up to eight
//! rows of `a`, so a chunk of 16 weights is decoded once for all of them;
//! the backward's owns 16 columns and up to four rows.

mod sources;

pub(crate) use self::sources::{lookup_program, quant_sources};

use self::sources::{A_UNIFORM_VEC4S, AFrom, matmul_program};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, copy_region};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::quant::layout;

const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];

/// [`BINDINGS`] with a as a uniform.
const BINDINGS_UNIFORM: &[Access] = &[
    Access::Uniform,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];

/// Invocations a workgroup.
const WG: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    flags: u32,
    groups: u32,
    nb: u32,
    xo: u32,
    ho: u32,
}

/// Record `out = act(a·wᵀ (+ bias) (+ acc)) (⊙ mul)` (`trans_b`: `w`
/// `[N, K]`, `out` `[M, N]`) or `out = a·w` (`w` `[N', K']` read as
/// `[K, N]`: `a` `[M, N']`, `out` `[M, K']`, no epilogue). `a` f32
/// `[M, K]` not transposed, `w` one buffer of a quantized dtype, `out` f32
/// and allocated; shapes and ranks checked by the caller (the GEMM), K ≥ 1;
/// acc and mul share a binding.
pub(crate) fn matmul_into(
    a: &LocalTensor,
    w: &LocalTensor,
    trans_b: bool,
    (bias, acc, act, mul): (
        Option<&LocalTensor>,
        Option<&LocalTensor>,
        Option<Activation>,
        Option<&LocalTensor>,
    ),
    out: &LocalTensor,
    (m, n, k): (usize, usize, usize),
) -> Result<()> {
    const OP: &str = "quantized product";
    let Some(q) = w.dtype().quant() else {
        return Err(Error::invalid(OP, "internal: w is not quantized"));
    };
    if acc.is_some() && mul.is_some() {
        return Err(Error::invalid(
            OP,
            "acc and mul share a binding: one of them",
        ));
    }
    if !trans_b && (bias.is_some() || acc.is_some() || act.is_some() || mul.is_some()) {
        return Err(Error::invalid(OP, "a·w takes no epilogue"));
    }
    // w's own rows and columns (its K is blocked).
    let (rows, cols) = if trans_b { (n, k) } else { (k, n) };
    let nb = q.blocks_per_row(cols);
    let (xo, ho, _) = layout::regions(q, rows * nb);
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
    // The forward's invocations own four rows of w and up to eight of a;
    // the backward's 16 columns and up to four rows (its accumulators are
    // four times as many).
    let (entry, rows_a, per_wg) = if trans_b {
        ("qmm_nk", m.next_power_of_two().min(8), 4 * WG)
    } else {
        ("qmm_kn", m.next_power_of_two().min(4), 16 * WG)
    };
    let groups = n.div_ceil(per_wg);
    let tiles = m.div_ceil(rows_a);
    let u32_of = |v: usize, what: &str| {
        u32::try_from(v).map_err(|_| Error::invalid(OP, format!("{what} {v} exceeds 2^32 − 1")))
    };
    let params = Params {
        m: u32_of(m, "M")?,
        n: u32_of(n, "N")?,
        k: u32_of(k, "K")?,
        flags,
        groups: u32_of(groups, "workgroups")?,
        nb: u32_of(nb, "blocks a row")?,
        xo: u32_of(xo / 4, "offset")?,
        ho: u32_of(ho / 4, "offset")?,
    };
    // A decoding token's a (the forward, few rows) as a uniform on CPU
    // adapters: a 64 KiB copy beside a weight's loads saves a storage
    // load per lane for every four weights.
    let limits = a.device().limits();
    let uniform = trans_b
        && k % 4 == 0
        && m * k <= 4 * A_UNIFORM_VEC4S
        && a.device().is_cpu()
        && limits.max_uniform_buffer_binding_size >= 16 * A_UNIFORM_VEC4S as u64;
    let from = match (uniform, k % 4 == 0) {
        (true, _) => AFrom::Uniform,
        (false, true) => AFrom::Vec4,
        (false, false) => AFrom::Scalar,
    };
    let (family, source) = matmul_program(q, from);
    let constants = vec![("ROWS", rows_a as f64), ("WG", WG as f64)];
    let bindings = if uniform { BINDINGS_UNIFORM } else { BINDINGS };
    let spec = KernelSpec::new(family, source, bindings, entry).with_constants(constants);
    let x = if uniform {
        let x = a.rank().alloc(OP, &[4 * A_UNIFORM_VEC4S], DType::F32)?;
        copy_region(a, 0, &x, 0, m * k)?;
        Some(x)
    } else {
        None
    };
    // Absent bias / acc bind a and w in their place; the flags keep them unread.
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[
            x.as_ref().unwrap_or(a),
            w,
            bias.unwrap_or(a),
            acc.or(mul).unwrap_or(w),
            out,
        ],
        workgroups: (groups * tiles) as u64,
    }
    .record(a.device())
}

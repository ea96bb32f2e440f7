//! Several small-M products on one device in one dispatch
//! (`shaders/gemv_group.wgsl`): ranks that share a device decode each
//! product once per rank, and a CPU adapter's fixed cost per dispatch was
//! a sixth of a GPT-2 token at four ranks. Each member is `act(a·bᵀ (+
//! bias))` for `b` `[N, K]` as [`gemv_nk`](super) computes it alone, with
//! the same bits; [`GROUP`] members a dispatch. Only `B [N, K]` in f32
//! (K a multiple of 4) or bf16 (K a multiple of 8), f32 A and C, where the
//! device binds [`BINDINGS`] storage buffers: [`fits`] says so first.

use super::group_source::source;
use super::knobs::{CANDIDATES, GEMV_MAX_ROWS, GROUP_OF, GUESS, TUNE_MIN_WEIGHTS};
use crate::device::settings::{self, GemmVariant};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, tune};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;

/// Members one dispatch takes.
pub(crate) const GROUP: usize = GROUP_OF;

/// a, b, bias and c of each of the [`GROUP`] members, in that order.
const BINDINGS: &[Access] = &{
    let mut b = [Access::Read; 4 * GROUP];
    let mut i = 3 * GROUP;
    while i < 4 * GROUP {
        b[i] = Access::ReadWrite;
        i += 1;
    }
    b
};

/// The operands of one product of a group: `act(a·bᵀ (+ bias)) (⊙ mul)`.
#[derive(Clone, Copy)]
pub(crate) struct Operands<'a> {
    /// `[M, K]`, f32.
    pub a: &'a LocalTensor,
    /// `[N, K]`, f32 or bf16.
    pub b: &'a LocalTensor,
    /// `[N]`, f32.
    pub bias: Option<&'a LocalTensor>,
    /// `[M, N]`, f32 (SwiGLU's up projection); never with a bias (they
    /// share a binding).
    pub mul: Option<&'a LocalTensor>,
}

/// `shaders/gemv_group.wgsl`'s (and `gemv_pair.wgsl`'s) parameters.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    m: u32,
    flags: u32,
    count: u32,
    _pad: u32,
    ns: [u32; 4],
    ks: [u32; 4],
    starts: [u32; 4],
}

impl Params {
    /// For members of `[N, K]` weights `sizes` (at most [`GROUP`]), `m`
    /// rows and `flags`, each member's workgroups of `wg` invocations that
    /// own `cols` columns each, after the one before's: the parameters and
    /// the workgroups in all.
    pub(super) fn new(
        m: usize,
        flags: u32,
        sizes: &[(usize, usize)],
        wg: usize,
        cols: usize,
    ) -> (Self, u64) {
        let mut p = Params {
            m: m as u32,
            flags,
            count: sizes.len() as u32,
            _pad: 0,
            ns: [0; 4],
            ks: [0; 4],
            starts: [0; 4],
        };
        let mut total = 0;
        for (g, &(n, k)) in sizes.iter().enumerate() {
            (p.ns[g], p.ks[g], p.starts[g]) = (n as u32, k as u32, total as u32);
            total += n.div_ceil(cols).div_ceil(wg);
        }
        (p, total as u64)
    }
}

/// Whether one group takes products of these operands: two or more, on
/// one device (not a GPU; no `WGPU_TP_GEMM_VARIANT` but `gemv`) that binds
/// [`BINDINGS`] storage buffers, the same M (1..=8) and weight dtype, f32
/// activations, `[N, K]` weights of whole vec4s (f32) or vec8s (bf16),
/// each tensor in one buffer, and a bias (or a multiplier) for all or
/// none, never both. Their outputs are `[M, N]` f32.
pub(crate) fn fits(operands: &[Operands]) -> bool {
    let Some(first) = operands.first() else {
        return false;
    };
    let dev = first.a.device();
    let m = first.a.shape().first().copied().unwrap_or(0);
    let wd = first.b.dtype();
    let whole = if wd == DType::BF16 { 8 } else { 4 };
    // Not on GPUs: there a product alone takes the split-K entry (other
    // bits), and a dispatch's fixed cost is small.
    // Nor where WGPU_TP_GEMM_VARIANT names a kernel for every product.
    let env = settings::current().gemm_variant;
    operands.len() >= 2
        && !dev.is_gpu()
        && matches!(env, GemmVariant::Auto | GemmVariant::Gemv)
        && (1..=GEMV_MAX_ROWS).contains(&m)
        && matches!(wd, DType::F32 | DType::BF16)
        && dev.limits().max_storage_buffers_per_shader_stage >= BINDINGS.len() as u32
        && operands.iter().all(|x| {
            let (sa, sb) = (x.a.shape(), x.b.shape());
            let f32_shaped =
                |t: &LocalTensor, shape: &[usize]| t.shape() == shape && t.dtype() == DType::F32;
            [x.a, x.b]
                .into_iter()
                .chain(x.bias)
                .chain(x.mul)
                .all(|t| std::sync::Arc::ptr_eq(t.device(), dev) && !t.is_blocked())
                && sa.len() == 2
                && sb.len() == 2
                && sa[0] == m
                && sa[1] == sb[1]
                && sa[1] > 0
                && sa[1] % whole == 0
                && sb[0] > 0
                && x.a.dtype() == DType::F32
                && x.b.dtype() == wd
                && x.bias.is_some() == first.bias.is_some()
                && x.mul.is_some() == first.mul.is_some()
                && !(x.bias.is_some() && x.mul.is_some())
                && x.bias.is_none_or(|t| f32_shaped(t, &[sb[0]]))
                && x.mul.is_none_or(|t| f32_shaped(t, &[m, sb[0]]))
        })
}

/// Record the products of `operands` ([`fits`] must hold) into `outs`
/// (`[M, N]` f32 each), [`GROUP`] a dispatch, the activation (and the
/// multiplier) applied as each stores.
pub(crate) fn gemv_group(
    operands: &[Operands],
    outs: &[&LocalTensor],
    act: Option<Activation>,
) -> Result<()> {
    const OP: &str = "gemv_group";
    // After fits: the shapes are then 2-D.
    let shaped = || {
        operands.len() == outs.len()
            && operands.iter().zip(outs).all(|(x, out)| {
                out.dtype() == DType::F32 && out.shape() == [x.a.shape()[0], x.b.shape()[0]]
            })
    };
    if !fits(operands) || !shaped() {
        return Err(Error::invalid(
            OP,
            "internal: products the grouped kernel cannot take (please report this)",
        ));
    }
    let members: Vec<(Operands, &LocalTensor)> =
        operands.iter().copied().zip(outs.iter().copied()).collect();
    let first = operands[0];
    let bf16 = first.b.dtype() == DType::BF16;
    let (family, source) = program(bf16);
    let entry = if bf16 {
        "gemv_nk8_group"
    } else {
        "gemv_nk_group"
    };
    let m = first.a.shape()[0];
    let rows = m.next_power_of_two();
    let act = act.map_or(0, act_code);
    let flags = first.bias.is_some() as u32 | act << 2 | (first.mul.is_some() as u32) << 4;
    let record = |chunk: &[(Operands, &LocalTensor)], c: usize| {
        let wg = 16 * c;
        let sizes: Vec<(usize, usize)> = (chunk.iter())
            .map(|(x, _)| (x.b.shape()[0], x.b.shape()[1]))
            .collect();
        let (p, total) = Params::new(m, flags, &sizes, wg, 4);
        // Unused slots bind the first member's tensors; no workgroup reads them.
        let at = |g: usize| chunk.get(g).unwrap_or(&chunk[0]);
        // A bias or a multiplier (never both) in the third slot.
        let third = |g: usize| at(g).0.bias.or(at(g).0.mul).unwrap_or(at(g).0.a);
        let buffers: Vec<&LocalTensor> = (0..GROUP)
            .map(|g| at(g).0.a)
            .chain((0..GROUP).map(|g| at(g).0.b))
            .chain((0..GROUP).map(third))
            .chain((0..GROUP).map(|g| at(g).1))
            .collect();
        let constants = vec![("ROWS", rows as f64), ("WG", wg as f64)];
        let spec = KernelSpec::new(family, source, BINDINGS, entry).with_constants(constants);
        Dispatch {
            spec: &spec,
            params: bytemuck::bytes_of(&p),
            buffers: &buffers,
            workgroups: total,
        }
        .record(first.a.device())
    };
    for chunk in members.chunks(GROUP) {
        let c = knob(chunk, family, rows, &|c| record(chunk, c))?;
        record(chunk, c)?;
    }
    Ok(())
}

/// The workgroup knob (`16·c` invocations, one of [`CANDIDATES`]; every one
/// gives the same bits): measured per shape class of the group where its
/// weights are large enough to matter, else guessed.
fn knob(
    chunk: &[(Operands, &LocalTensor)],
    family: &str,
    rows: usize,
    record: &dyn Fn(usize) -> Result<()>,
) -> Result<usize> {
    let (n, k) = chunk.iter().fold((0, 0), |(n, k), (x, _)| {
        (n + x.b.shape()[0], k.max(x.b.shape()[1]))
    });
    let what = format!("{family} group {}", chunk.len());
    measured_wg(chunk[0].0.a.device(), &what, (rows, n, k), record)
}

/// The workgroup knob of a grouped dispatch `what` (its family and
/// members) of `rows` rows, `n` columns in all and at most `k` deep:
/// measured per shape class where its weights matter, else guessed.
pub(super) fn measured_wg(
    dev: &std::sync::Arc<crate::device::Device>,
    what: &str,
    (rows, n, k): (usize, usize, usize),
    record: &dyn Fn(usize) -> Result<()>,
) -> Result<usize> {
    if n.saturating_mul(k) < TUNE_MIN_WEIGHTS {
        return Ok(GUESS);
    }
    let most = dev.limits().max_compute_invocations_per_workgroup as usize;
    let knobs: Vec<usize> = CANDIDATES.into_iter().filter(|&c| 16 * c <= most).collect();
    let names: Vec<String> = knobs.iter().map(|c| format!("wg {}", 16 * c)).collect();
    let class = format!(
        "{what} rows {rows} n {} k {}",
        n.next_power_of_two(),
        k.next_power_of_two()
    );
    let chosen = tune::choose(dev, &class, &names, |_| 1.0, |i| record(knobs[i]))?;
    Ok(chosen.map_or(GUESS, |i| knobs[i]))
}

/// An activation's code in the header's flags (bits 2-3).
pub(super) fn act_code(act: Activation) -> u32 {
    match act {
        Activation::Gelu => 1,
        Activation::Silu => 2,
        Activation::Relu => 3,
    }
}

/// The (family, source) of the grouped program for f32 or bf16 weights,
/// composed once per process.
pub(super) fn program(bf16: bool) -> (&'static str, &'static str) {
    use std::sync::OnceLock;
    static F32: OnceLock<String> = OnceLock::new();
    static BF16: OnceLock<String> = OnceLock::new();
    if bf16 {
        ("gemv_group_bf16", BF16.get_or_init(|| source(true)))
    } else {
        ("gemv_group", F32.get_or_init(|| source(false)))
    }
}

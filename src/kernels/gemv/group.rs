//! Several small-M products on one device in one dispatch
//! (`shaders/gemv_group.wgsl`): ranks that share a device decode each
//! product once per rank, and a CPU adapter's fixed cost per dispatch was
//! a sixth of a GPT-2 token at four ranks. Each member is `act(a·bᵀ (+
//! bias))` for `b` `[N, K]` as [`gemv_nk`](super) computes it alone, with
//! the same bits; [`GROUP`] members a dispatch. Only `B [N, K]` in f32
//! (K a multiple of 4) or bf16 (K a multiple of 8), f32 A and C, where the
//! device binds [`BINDINGS`] storage buffers: [`fits`] says so first.

use super::group_source::source;
use super::{Activation, CANDIDATES, GEMV_MAX_ROWS, GUESS, TUNE_MIN_WEIGHTS};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, tune};
use crate::element::DType;
use crate::error::{Error, Result};

/// Members one dispatch takes.
pub(crate) const GROUP: usize = super::GROUP_OF;

/// a, b, bias and c of each of the [`GROUP`] members.
const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::ReadWrite,
    Access::ReadWrite,
];

/// One product of a group: `out = act(a·bᵀ (+ bias))`.
#[derive(Clone, Copy)]
pub(crate) struct Member<'a> {
    /// `[M, K]`, f32.
    pub a: &'a LocalTensor,
    /// `[N, K]`, f32 or bf16.
    pub b: &'a LocalTensor,
    /// `[N]`, f32.
    pub bias: Option<&'a LocalTensor>,
    /// `[M, N]`, f32, allocated.
    pub out: &'a LocalTensor,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    flags: u32,
    count: u32,
    _pad: u32,
    ns: [u32; 4],
    ks: [u32; 4],
    starts: [u32; 4],
}

/// Whether one group takes products of these operands `(a, b, bias)`:
/// two or more, on one device that binds [`BINDINGS`] storage buffers, the
/// same M (1..=8) and weight dtype, f32 activations, `[N, K]` weights of
/// whole vec4s (f32) or vec8s (bf16), each tensor in one buffer, and a bias
/// for all or none. Their outputs are then `[M, N]` f32.
pub(crate) fn fits(operands: &[(&LocalTensor, &LocalTensor, Option<&LocalTensor>)]) -> bool {
    let Some(&(a0, b0, bias0)) = operands.first() else {
        return false;
    };
    let dev = a0.device();
    let m = a0.shape().first().copied().unwrap_or(0);
    let wd = b0.dtype();
    let whole = if wd == DType::BF16 { 8 } else { 4 };
    operands.len() >= 2
        && (1..=GEMV_MAX_ROWS).contains(&m)
        && matches!(wd, DType::F32 | DType::BF16)
        && dev.limits().max_storage_buffers_per_shader_stage >= BINDINGS.len() as u32
        && operands.iter().all(|&(a, b, bias)| {
            let (sa, sb) = (a.shape(), b.shape());
            [a, b]
                .into_iter()
                .chain(bias)
                .all(|t| std::sync::Arc::ptr_eq(t.device(), dev) && !t.is_blocked())
                && sa.len() == 2
                && sb.len() == 2
                && sa[0] == m
                && sa[1] == sb[1]
                && sa[1] > 0
                && sa[1] % whole == 0
                && sb[0] > 0
                && a.dtype() == DType::F32
                && b.dtype() == wd
                && bias.is_some() == bias0.is_some()
                && bias.is_none_or(|t| t.shape() == [sb[0]] && t.dtype() == DType::F32)
        })
}

/// Record `members` ([`fits`] must hold), [`GROUP`] a dispatch, with the
/// activation applied as each stores.
pub(crate) fn gemv_group(members: &[Member], act: Option<Activation>) -> Result<()> {
    const OP: &str = "gemv_group";
    let operands: Vec<_> = members.iter().map(|x| (x.a, x.b, x.bias)).collect();
    // After fits: the shapes are then 2-D.
    let outs = || {
        members.iter().all(|x| {
            x.out.dtype() == DType::F32 && x.out.shape() == [x.a.shape()[0], x.b.shape()[0]]
        })
    };
    if !fits(&operands) || !outs() {
        return Err(Error::invalid(
            OP,
            "internal: members the grouped kernel cannot take (please report this)",
        ));
    }
    let first = members[0];
    let bf16 = first.b.dtype() == DType::BF16;
    let (family, source) = program(bf16);
    let entry = if bf16 {
        "gemv_nk8_group"
    } else {
        "gemv_nk_group"
    };
    let m = first.a.shape()[0];
    let rows = m.next_power_of_two();
    let act = match act {
        None => 0,
        Some(Activation::Gelu) => 1,
        Some(Activation::Silu) => 2,
        Some(Activation::Relu) => 3,
    };
    let flags = first.bias.is_some() as u32 | act << 2;
    let record = |chunk: &[Member], c: usize| {
        let wg = 16 * c;
        let mut p = Params {
            m: m as u32,
            flags,
            count: chunk.len() as u32,
            _pad: 0,
            ns: [0; 4],
            ks: [0; 4],
            starts: [0; 4],
        };
        let mut total = 0;
        for (g, x) in chunk.iter().enumerate() {
            let (n, k) = (x.b.shape()[0], x.b.shape()[1]);
            (p.ns[g], p.ks[g], p.starts[g]) = (n as u32, k as u32, total as u32);
            total += n.div_ceil(4).div_ceil(wg);
        }
        // Unused slots bind the first member's tensors; no workgroup reads them.
        let at = |g: usize| chunk.get(g).unwrap_or(&chunk[0]);
        let bias = |g: usize| at(g).bias.unwrap_or(at(g).a);
        let buffers: Vec<&LocalTensor> = (0..GROUP)
            .map(|g| at(g).a)
            .chain((0..GROUP).map(|g| at(g).b))
            .chain((0..GROUP).map(bias))
            .chain((0..GROUP).map(|g| at(g).out))
            .collect();
        let constants = vec![("ROWS", rows as f64), ("WG", wg as f64)];
        let spec = KernelSpec::new(family, source, BINDINGS, entry).with_constants(constants);
        Dispatch {
            spec: &spec,
            params: bytemuck::bytes_of(&p),
            buffers: &buffers,
            workgroups: total as u64,
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
    chunk: &[Member],
    family: &str,
    rows: usize,
    record: &dyn Fn(usize) -> Result<()>,
) -> Result<usize> {
    let (n, k) = chunk.iter().fold((0, 0), |(n, k), x| {
        (n + x.b.shape()[0], k.max(x.b.shape()[1]))
    });
    if n.saturating_mul(k) < TUNE_MIN_WEIGHTS {
        return Ok(GUESS);
    }
    let dev = chunk[0].a.device();
    let most = dev.limits().max_compute_invocations_per_workgroup as usize;
    let knobs: Vec<usize> = CANDIDATES.into_iter().filter(|&c| 16 * c <= most).collect();
    let names: Vec<String> = knobs.iter().map(|c| format!("wg {}", 16 * c)).collect();
    let class = format!(
        "{family} group {} rows {rows} n {} k {}",
        chunk.len(),
        n.next_power_of_two(),
        k.next_power_of_two()
    );
    let chosen = tune::choose(dev, &class, &names, |_| 1.0, |i| record(knobs[i]))?;
    Ok(chosen.map_or(GUESS, |i| knobs[i]))
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

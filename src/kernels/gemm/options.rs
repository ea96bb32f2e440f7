//! What a caller asks of [`gemm`](super::gemm): the kernel
//! ([`GemmVariant`]) and the operands beyond A and B ([`GemmOptions`]),
//! with the last steps a kernel cannot take in its store ([`apart`]).

pub use crate::device::settings::GemmVariant;
use crate::device::{LocalTensor, settings};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::kernels::gemv::GEMV_MAX_ROWS;

/// Options for [`gemm`](super::gemm): `C = act(op(A)·op(B) (+ bias broadcast
/// over rows) (+ accumulate)) (⊙ multiply)`.
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
    /// An activation applied last (f32 C only): in the small-M kernel's
    /// store (one dispatch fewer per decoded token and layer), by
    /// [`activation`](crate::kernels::activation) after the others; the
    /// same bits either way.
    pub activation: Option<Activation>,
    /// `[M, N]` f32, multiplying C element by element after the activation
    /// (f32 C only; SwiGLU's `act(gate) ⊙ up`): in the small-M kernel's
    /// store where there is no `accumulate` (one dispatch fewer per decoded
    /// token and layer), by [`mul`](crate::kernels::mul) after the others;
    /// the same bits either way.
    pub multiply: Option<&'a LocalTensor>,
}

/// The last steps of `opts` that the kernel cannot take in its store, run
/// after it by the element-wise kernels: the product of `run` without them,
/// then the activation, then the multiply (`Some`), or `None` where the
/// kernel takes them all. Only the small-M kernel (`in_store`) applies
/// them, and the multiply only without an accumulate (they share a binding).
pub(super) fn apart(
    opts: GemmOptions<'_>,
    in_store: bool,
    run: impl FnOnce(GemmOptions<'_>) -> Result<LocalTensor>,
) -> Result<Option<LocalTensor>> {
    let act = opts.activation.filter(|_| !in_store);
    let mul = opts
        .multiply
        .filter(|_| !in_store || opts.accumulate.is_some());
    if act.is_none() && mul.is_none() {
        return Ok(None);
    }
    let inner = GemmOptions {
        activation: opts.activation.filter(|_| act.is_none()),
        multiply: opts.multiply.filter(|_| mul.is_none()),
        ..opts
    };
    let mut c = run(inner)?;
    if let Some(act) = act {
        c = crate::kernels::activation(&c, act)?;
    }
    if let Some(up) = mul {
        c = crate::kernels::mul(&c, up)?;
    }
    Ok(Some(c))
}

/// The kernel `variant` means for an `[M, K]` A on `a`'s device.
pub(super) fn resolve(
    variant: GemmVariant,
    a: &LocalTensor,
    m: usize,
    k: usize,
) -> Result<GemmVariant> {
    let coop = a.dtype() == DType::F16 && a.device().has_coop_f16();
    // `WGPU_TP_GEMM_VARIANT=coop` asks for it where it can run; the f32
    // products beside it keep Auto's choice.
    let env = match settings::current().gemm_variant {
        GemmVariant::Coop if !coop => GemmVariant::Auto,
        v => v,
    };
    let v = match variant {
        // One token (or a few): stream B once, as stored.
        // (It binds five storage buffers; downlevel devices allow four.)
        GemmVariant::Auto
            if m <= GEMV_MAX_ROWS
                && k > 0
                && env == GemmVariant::Auto
                && a.device().limits().max_storage_buffers_per_shader_stage >= 5 =>
        {
            GemmVariant::Gemv
        }
        GemmVariant::Auto => match env {
            GemmVariant::Auto if coop => GemmVariant::Coop,
            GemmVariant::Auto if a.device().is_cpu() => GemmVariant::Texture,
            // The tiled kernel's 16×16 workgroup needs 256 invocations; the
            // register kernel's 8 fit any device.
            GemmVariant::Auto
                if a.device().limits().max_compute_invocations_per_workgroup < 256 =>
            {
                GemmVariant::Buffer
            }
            GemmVariant::Auto => GemmVariant::Tiled,
            v => v,
        },
        v => v,
    };
    if v == GemmVariant::Coop && !coop {
        return Err(Error::Unsupported {
            op: "gemm",
            what: "the cooperative-matrix GEMM (f16 operands, 16×16×16 f16 → f32 shapes, subgroups of 32)",
            feature: "EXPERIMENTAL_COOPERATIVE_MATRIX",
            adapter: a.device().adapter_info().name.clone(),
            hint: "give it f16 operands on an adapter that has it (`cargo run --example devices` lists each adapter's shapes), or leave the variant to Auto",
        });
    }
    Ok(v)
}

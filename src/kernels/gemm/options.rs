//! What a caller asks of [`gemm`](super::gemm) ([`GemmOptions`]: the
//! operands beyond A and B, the kernel, whether B is a weight), the kernel
//! an `Auto` variant resolves to and what a forced one refuses
//! ([`resolve`]), and the last steps a kernel cannot take in its store
//! ([`apart`]).

pub use crate::device::settings::GemmVariant;
use crate::device::{LocalTensor, settings};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::kernels::gemv::GEMV_MAX_ROWS;

/// What [`gemm`](super::gemm) computes beyond `A·B`, and how: `C =
/// act(op(A)·op(B) (+ bias broadcast over rows) (+ accumulate)) (⊙
/// multiply)`, on the kernel `variant` names. Built with
/// [`GemmOptions::new`] and its setters, e.g.
/// `GemmOptions::new().trans_b(true).bias(&b)`; every option works with
/// every kernel except where its setter says otherwise, and asking a
/// kernel for what it cannot do is an error, never ignored.
#[derive(Clone, Copy, Default, Debug)]
#[non_exhaustive]
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
    /// The kernel: `Auto` (the default) chooses by adapter and shape, or
    /// takes the settings' `gemm_variant` (`WGPU_TP_GEMM_VARIANT`); any
    /// other variant is used for this call (for tests and benchmarks;
    /// every variant gives the same result up to rounding).
    pub variant: GemmVariant,
    /// B is a weight, used again before it changes (a layer's `x·Wᵀ` and
    /// `dy·W`): the pack or texture copy a kernel makes of B is kept with
    /// B's buffer and reused until B is written in place (an optimiser
    /// step bumps its [`LocalTensor::version`]), so evaluation and prefill
    /// stop re-packing every weight per call. Costs the kept copies'
    /// memory (about one more weight per layout used) until then; the
    /// settings' `pack_cache` (`WGPU_TP_PACK_CACHE=off`) turns the keeping
    /// off.
    pub weight: bool,
}

impl<'a> GemmOptions<'a> {
    /// `A·B` on the kernel the adapter and shape choose: no transposes,
    /// bias, accumulate, activation or multiply; C in A's dtype.
    pub fn new() -> GemmOptions<'a> {
        GemmOptions::default()
    }

    /// Use Aᵀ (A stored `[K, M]`) when `on`.
    pub fn trans_a(self, on: bool) -> Self {
        GemmOptions {
            trans_a: on,
            ..self
        }
    }

    /// Use Bᵀ (B stored `[N, K]`, a layer's weight) when `on`.
    pub fn trans_b(self, on: bool) -> Self {
        GemmOptions {
            trans_b: on,
            ..self
        }
    }

    /// Add `bias` (`[N]`, f32) to every row of C (a tensor, or an
    /// `Option` of one: `None` adds none).
    pub fn bias(self, bias: impl Into<Option<&'a LocalTensor>>) -> Self {
        GemmOptions {
            bias: bias.into(),
            ..self
        }
    }

    /// Add `acc` (`[M, N]`, f32) to C (or an `Option` of it).
    pub fn accumulate(self, acc: impl Into<Option<&'a LocalTensor>>) -> Self {
        GemmOptions {
            accumulate: acc.into(),
            ..self
        }
    }

    /// Store C as `dtype` (f32 or f16; anything else is an error; `None`:
    /// A's dtype).
    pub fn out_dtype(self, dtype: impl Into<Option<DType>>) -> Self {
        GemmOptions {
            out_dtype: dtype.into(),
            ..self
        }
    }

    /// Apply `act` to C last (f32 C only, else an error; `None`: none).
    pub fn activation(self, act: impl Into<Option<Activation>>) -> Self {
        GemmOptions {
            activation: act.into(),
            ..self
        }
    }

    /// Multiply C by `m` (`[M, N]`, f32) element by element after the
    /// activation (f32 C only, else an error; `None`: no multiply).
    pub fn multiply(self, m: impl Into<Option<&'a LocalTensor>>) -> Self {
        GemmOptions {
            multiply: m.into(),
            ..self
        }
    }

    /// Run on `variant`. `Coop` takes f16 A and B on an adapter with
    /// cooperative matrices, `Gemv` A of at most
    /// [`GEMV_MAX_ROWS`](crate::kernels::gemv::GEMV_MAX_ROWS) rows: asked
    /// for anything else they are an error.
    pub fn variant(self, variant: GemmVariant) -> Self {
        GemmOptions { variant, ..self }
    }

    /// B is a weight used again before it changes: keep what the kernels
    /// derive from it ([`GemmOptions::weight`]).
    pub fn weight(self, on: bool) -> Self {
        GemmOptions { weight: on, ..self }
    }
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
    // `WGPU_TP_GEMM_VARIANT=coop` (or `gemv`) asks for it where it can
    // run; the products beside it keep Auto's choice.
    let env = match settings::current().gemm_variant {
        GemmVariant::Coop if !coop => GemmVariant::Auto,
        GemmVariant::Gemv if m > GEMV_MAX_ROWS => GemmVariant::Auto,
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
    if v == GemmVariant::Gemv && m > GEMV_MAX_ROWS {
        return Err(Error::invalid(
            "gemm",
            format!(
                "GemmVariant::Gemv takes A of at most {GEMV_MAX_ROWS} rows, got M = {m}: leave \
                 the variant to Auto, or pick one that takes any shape"
            ),
        ));
    }
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

//! What a caller asks of [`gemm`](super::gemm): the kernel
//! ([`GemmVariant`]) and the operands beyond A and B ([`GemmOptions`]),
//! with the last steps a kernel cannot take in its store ([`apart`]).

use crate::device::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::kernels::Activation;
use crate::kernels::gemv::GEMV_MAX_ROWS;

/// Which GEMM kernel to run (see the `gemm` module docs).
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
    Buffer,
    /// Workgroup-memory tiled: for real GPUs; any shape (transposed operands
    /// are packed first).
    Tiled,
    /// Cooperative matrices (tensor cores; `shaders/gemm_coop.wgsl`): f16 A
    /// and B in 16×16×16 steps accumulated in f32, any shape (transposed
    /// operands packed first). `Auto` takes it for f16 products where
    /// [`Device::has_coop_f16`](crate::device::Device::has_coop_f16); asked
    /// for elsewhere, or with f32 operands, it is an error.
    Coop,
    /// The `Buffer` kernel with both operands always packed: the path ragged
    /// shapes take, forced (for tests and benchmarks).
    PackedBuffer,
    /// The small-M kernel (`shaders/gemv.wgsl`): A of at most
    /// [`GEMV_MAX_ROWS`](crate::kernels::gemv::GEMV_MAX_ROWS) rows, B read
    /// where it is stored (no pack; on CPU adapters a weight read again
    /// through a kept texture copy, the same bits). `Auto` takes it for
    /// such products on every adapter.
    Gemv,
}

impl GemmVariant {
    /// The variant named by `WGPU_TP_GEMM_VARIANT` (`texture`,
    /// `sampled-texture`, `storage-texture`, `buffer`, `tiled`, `coop` (for
    /// the f16 products where it can run; others keep `Auto`'s choice),
    /// `packed-buffer`, `gemv`; `cpu` and `generic`, the old names of
    /// `buffer` and `packed-buffer`, still work; anything else means
    /// `Auto`), read once per process.
    pub(crate) fn from_env() -> GemmVariant {
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
                "buffer" | "cpu" => GemmVariant::Buffer,
                "tiled" => GemmVariant::Tiled,
                "coop" => GemmVariant::Coop,
                "packed-buffer" | "generic" => GemmVariant::PackedBuffer,
                "gemv" => GemmVariant::Gemv,
                _ => GemmVariant::Auto,
            }
        })
    }
}

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
    let env = match GemmVariant::from_env() {
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

//! A shared device's all-reduce fold, a residual and the RMSNorm after it,
//! for a few rows, in one dispatch (`shaders/fold_norm.wgsl`): the fold and
//! residual of `copy_fold`'s `fold_add` and the norm of
//! [`norm_forward`](super::norm_forward)'s few-row kernel, with their bits
//! (the same expressions, the norm's the same code). A decoded token's
//! row-parallel branches (in a pre-norm decoder) each ended in those two
//! single-workgroup dispatches. Taken where the norm sums serially (CPU adapters, not GPUs)
//! and the device binds its ten storage buffers.

use super::copy_fold::{FOLD_INPUTS, fold_inputs};
use super::member_source::items;
use super::norm::{FUSED_ROWS_MAX, Params, SOURCE_ROWS};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

/// in0..in3, the residual, x (the fold's output), γ, β, stats and y.
const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
];

/// Whether [`fold_norm_rows`] takes an output `x` (`[rows, cols]` f32,
/// 1 to 8 rows, one buffer) with `gamma` (`[cols]` f32 on its device) and
/// `eps`: a CPU adapter that binds its ten storage buffers.
pub(crate) fn fits(x: &LocalTensor, (gamma, eps): (&LocalTensor, f32)) -> bool {
    let dev = x.device();
    let [rows, cols] = *x.shape() else {
        return false;
    };
    !dev.is_gpu()
        && (1..=FUSED_ROWS_MAX).contains(&rows)
        && cols > 0
        && u32::try_from(x.len()).is_ok()
        && [x, gamma]
            .iter()
            .all(|t| t.dtype() == DType::F32 && !t.is_blocked())
        && gamma.shape() == [cols]
        && std::sync::Arc::ptr_eq(gamma.device(), dev)
        && eps.is_finite()
        && eps >= 0.0
        && dev.limits().max_storage_buffers_per_shader_stage >= BINDINGS.len() as u32
}

/// Record `x = residual + (srcs[0] + srcs[1] + ...)` (`x`'s old value
/// first in the sum when `accumulate`) and return `y = rms_norm(x) ⊙ γ`
/// with `eps` inside the square root: `x`, `residual` and every input
/// `[rows, cols]` f32 in one buffer, `gamma` `[cols]`, 1 to
/// [`FOLD_INPUTS`] inputs, all on one device that [`fits`].
pub(crate) fn fold_norm_rows(
    srcs: &[&LocalTensor],
    residual: &LocalTensor,
    x: &LocalTensor,
    (gamma, eps): (&LocalTensor, f32),
    accumulate: bool,
) -> Result<LocalTensor> {
    const OP: &str = "fold_norm_rows";
    let [rows, cols] = *x.shape() else {
        return Err(Error::shape(OP, "x [rows, cols]", x.shape()));
    };
    let whole = srcs
        .iter()
        .chain([&residual, &x])
        .all(|t| t.shape() == [rows, cols] && t.dtype() == DType::F32 && !t.is_blocked());
    let usable = (1..=FOLD_INPUTS).contains(&srcs.len()) && whole && fits(x, (gamma, eps));
    if !usable {
        return Err(Error::invalid(
            OP,
            "internal: operands the fused fold and norm cannot take (please report this)",
        ));
    }
    let rank = x.rank();
    let stats = rank.alloc(OP, &[rows, 2], DType::F32)?;
    let y = rank.alloc(OP, &[rows, cols], DType::F32)?;
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        eps,
        flags: 0,
    };
    let constants = vec![
        ("COUNT", srcs.len() as f64),
        ("ACCUMULATE", f64::from(u8::from(accumulate))),
    ];
    let spec = KernelSpec::new("fold_norm", source(), BINDINGS, "fold_norm_rows")
        .with_constants(constants);
    let mut buffers = fold_inputs(OP, srcs)?;
    buffers.extend([residual, x, gamma, gamma, &stats, &y]);
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &buffers,
        workgroups: rows as u64,
    }
    .record(x.device())?;
    Ok(y)
}

/// `norm_rows.wgsl`'s items but its bindings and entries, then
/// `fold_norm.wgsl`: composed once per process.
pub(crate) fn source() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        let mut src: String = (items(SOURCE_ROWS).into_iter())
            .filter(|(t, _)| !t.starts_with("@group"))
            .map(|(t, _)| t + "\n")
            .collect();
        src.push_str(include_str!("../../shaders/fold_norm.wgsl"));
        src
    })
}

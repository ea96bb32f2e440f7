//! LayerNorm and RMSNorm over the last dimension of one rank's `x`
//! `[rows, H]` (`shaders/norm.wgsl`), with `eps` inside the square root:
//!
//! - LayerNorm: `μ = Σx/H`, `σ² = Σ(x − μ)²/H` (biased),
//!   `x̂ = (x − μ)/√(σ² + ε)`, `y = γ ⊙ x̂ (+ β)`;
//! - RMSNorm: `x̂ = x/√(Σx²/H + ε)`, `y = γ ⊙ x̂`.
//!
//! [`norm_forward`] also returns the per-row statistics `[rows, 2]` =
//! `(mean, rstd)` (mean 0 for RMSNorm) that backward reuses, so
//! `x̂ = (x − mean)·rstd` for both. [`norm_backward`] gives, with
//! `ĝ = dy ⊙ γ`, `dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ ⊙ x̂))` (no `mean(ĝ)`
//! term for RMSNorm); [`norm_param_grads`] the column sums `dγ = Σ_r dy ⊙ x̂`
//! and `dβ = Σ_r dy`. Every sum runs in index order inside one invocation, so
//! equal inputs give equal bits. Five pipelines: statistics, forward,
//! input gradient, parameter gradients, and for up to [`FUSED_ROWS_MAX`]
//! rows (decoding) statistics and forward in one dispatch, with the same
//! loops and expressions, so the same bits where the driver compiles both
//! alike (lavapipe and llvmpipe: tested; WGSL lets a driver contract
//! multiply-adds differently per shader). On hardware GPUs the few-row
//! forward is instead [`RowsReduce::Tree`] (a workgroup tree: not those
//! bits, the same values up to f32 rounding), chosen by adapter type: every
//! rank on like adapters picks alike, so replicas still agree.

use super::grid::{grid_groups, grid_source};
use super::loops::check_walk;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = grid_source!("norm.wgsl");
/// The few-row forward (`shaders/norm_rows.wgsl`): one dispatch per norm.
pub(crate) const SOURCE_ROWS: &str = include_str!("../../shaders/norm_rows.wgsl");
const BINDINGS_ROWS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::ReadWrite,
];
/// Up to this many rows (a decoding step's) the forward is one dispatch,
/// a workgroup per row; beyond, statistics and normalisation are two
/// (an invocation per row, then per element), which spread many rows wider.
pub const FUSED_ROWS_MAX: usize = 8;
const BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];
/// How the few-row forward (up to [`FUSED_ROWS_MAX`] rows) sums a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowsReduce {
    /// Invocation 0 sums in index order, as `row_stats`: the two-kernel
    /// path's bits. CPU adapters' choice (a workgroup is one thread there).
    Serial,
    /// 256 invocations and a tree in workgroup memory: other bits than the
    /// two-kernel path, within f32 rounding. Hardware GPUs' choice, where
    /// the serial sum leaves 63 of 64 invocations waiting.
    Tree,
}

/// Row and column kernels: one invocation per row (or column), 64 per workgroup.
const LANE_WORKGROUP: u64 = 64;
const CENTRE: u32 = 1;
const BIAS: u32 = 2;

/// Which normalisation a kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// Subtract the row mean, divide by the row standard deviation.
    LayerNorm,
    /// Divide by the row root-mean-square (no centring, no bias).
    RmsNorm,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) rows: u32,
    pub(super) cols: u32,
    pub(super) eps: f32,
    pub(super) flags: u32,
}

/// `[rows, cols]` of a 2-D f32 tensor whose element count fits in u32.
fn rows_cols(op: &'static str, x: &LocalTensor) -> Result<(usize, usize)> {
    x.expect_dtype(op, DType::F32)?;
    let [rows, cols] = *x.shape() else {
        return Err(Error::shape(op, "a 2-D tensor [rows, H]", x.shape()));
    };
    if cols == 0 {
        return Err(Error::invalid(op, "cannot normalise rows of length 0"));
    }
    if x.len() > u32::MAX as usize / 2 {
        return Err(Error::invalid(op, "more than 2^31 elements"));
    }
    Ok((rows, cols))
}

/// Check `t` is an f32 tensor of `shape` on `x`'s rank.
fn expect(op: &'static str, x: &LocalTensor, t: &LocalTensor, shape: &[usize]) -> Result<()> {
    t.expect_dtype(op, DType::F32)?;
    x.same_rank(op, t)?;
    if t.shape() != shape {
        return Err(Error::shape(op, shape, t.shape()));
    }
    Ok(())
}

fn record(
    entry: &'static str,
    params: Params,
    buffers: [&LocalTensor; 5],
    workgroups: u64,
) -> Result<()> {
    Dispatch {
        spec: &KernelSpec::new("norm", SOURCE, BINDINGS, entry),
        params: bytemuck::bytes_of(&params),
        buffers: &buffers,
        workgroups,
    }
    .record(buffers[0].device())
}

/// Normalise each row of `x` `[rows, H]` and apply `γ` `[H]` (and `β` `[H]`,
/// LayerNorm only): returns `(y, stats)`, `y` `[rows, H]` and `stats`
/// `[rows, 2]` = `(mean, rstd)` per row. `eps` must be finite and ≥ 0.
pub fn norm_forward(
    x: &LocalTensor,
    gamma: &LocalTensor,
    beta: Option<&LocalTensor>,
    kind: NormKind,
    eps: f32,
) -> Result<(LocalTensor, LocalTensor)> {
    let reduce = if x.device().is_gpu() {
        RowsReduce::Tree
    } else {
        RowsReduce::Serial
    };
    norm_forward_with(x, gamma, beta, kind, eps, reduce)
}

/// [`norm_forward`] with the few-row forward's reduction forced to
/// `reduce` (for tests and benches; more rows than [`FUSED_ROWS_MAX`]
/// take the two-kernel path whatever `reduce` says).
pub fn norm_forward_with(
    x: &LocalTensor,
    gamma: &LocalTensor,
    beta: Option<&LocalTensor>,
    kind: NormKind,
    eps: f32,
    reduce: RowsReduce,
) -> Result<(LocalTensor, LocalTensor)> {
    const OP: &str = "norm_forward";
    let (rows, cols) = rows_cols(OP, x)?;
    expect(OP, x, gamma, &[cols])?;
    if let Some(b) = beta {
        if kind == NormKind::RmsNorm {
            return Err(Error::invalid(OP, "RMSNorm has no bias"));
        }
        expect(OP, x, b, &[cols])?;
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(
            OP,
            format!("eps {eps} must be finite and ≥ 0"),
        ));
    }
    let mut flags = if kind == NormKind::LayerNorm {
        CENTRE
    } else {
        0
    };
    if beta.is_some() {
        flags |= BIAS;
    }
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        eps,
        flags,
    };
    let rank = x.rank();
    let stats = rank.alloc(OP, &[rows, 2], DType::F32)?;
    if (1..=FUSED_ROWS_MAX).contains(&rows) {
        // Serial: same loops and expressions as the two kernels below, same bits.
        let entry = match reduce {
            RowsReduce::Serial => "forward_rows",
            RowsReduce::Tree => "forward_rows_tree",
        };
        let y = rank.alloc(OP, x.shape(), DType::F32)?;
        Dispatch {
            spec: &KernelSpec::new("norm_rows", SOURCE_ROWS, BINDINGS_ROWS, entry),
            params: bytemuck::bytes_of(&params),
            buffers: &[x, gamma, beta.unwrap_or(gamma), &stats, &y],
            workgroups: rows as u64,
        }
        .record(x.device())?;
        return Ok((y, stats));
    }
    record(
        "row_stats",
        params,
        [x, x, x, x, &stats],
        (rows as u64).div_ceil(LANE_WORKGROUP),
    )?;
    let y = rank.alloc(OP, x.shape(), DType::F32)?;
    record(
        "forward",
        params,
        [x, gamma, beta.unwrap_or(gamma), &stats, &y],
        grid_groups(x.device(), x.len()),
    )?;
    Ok((y, stats))
}

/// The input gradient `dx` `[rows, H]` from the forward's input `x`, `γ`, its
/// `stats` and the output gradient `dy` `[rows, H]`.
pub fn norm_backward(
    x: &LocalTensor,
    gamma: &LocalTensor,
    stats: &LocalTensor,
    dy: &LocalTensor,
    kind: NormKind,
) -> Result<LocalTensor> {
    const OP: &str = "norm_backward";
    let (rows, cols) = rows_cols(OP, x)?;
    expect(OP, x, gamma, &[cols])?;
    expect(OP, x, stats, &[rows, 2])?;
    expect(OP, x, dy, x.shape())?;
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        eps: 0.0,
        flags: if kind == NormKind::LayerNorm {
            CENTRE
        } else {
            0
        },
    };
    let dx = x.rank().alloc(OP, x.shape(), DType::F32)?;
    record(
        "backward_dx",
        params,
        [x, gamma, dy, stats, &dx],
        (rows as u64).div_ceil(LANE_WORKGROUP),
    )?;
    Ok(dx)
}

/// This rank's parameter-gradient column sums from the forward's input `x`,
/// its `stats` and the output gradient `dy`: `[2, H]` = `[dγ; dβ]` with
/// `bias`, else `[1, H]` = `[dγ]`. Zero rows give zeros.
pub fn norm_param_grads(
    x: &LocalTensor,
    stats: &LocalTensor,
    dy: &LocalTensor,
    bias: bool,
) -> Result<LocalTensor> {
    const OP: &str = "norm_param_grads";
    let (rows, cols) = rows_cols(OP, x)?;
    expect(OP, x, stats, &[rows, 2])?;
    expect(OP, x, dy, x.shape())?;
    // One invocation sums a column over every row.
    check_walk(
        OP,
        x.device(),
        "a gradient over 65535 rows or more",
        rows,
        "run the norm's backward on fewer tokens at a time (a smaller batch, or sequence parallelism), or use lavapipe (Vulkan) from Mesa 24 or newer",
    )?;
    let k = if bias { 2 } else { 1 };
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        eps: 0.0,
        flags: if bias { BIAS } else { 0 },
    };
    let out = x.rank().alloc(OP, &[k, cols], DType::F32)?;
    record(
        "param_grads",
        params,
        [x, dy, stats, x, &out],
        ((k * cols) as u64).div_ceil(LANE_WORKGROUP),
    )?;
    Ok(out)
}

//! The `k` largest entries of one row of a logits shard
//! (`shaders/topk.wgsl`), reduced on the device: greedy decoding (k = 1) and
//! top-k sampling need only these, so only `k` (value, id) pairs per rank
//! cross to the host instead of the shard. Order: `f32::total_cmp`,
//! descending, ties by the lower id (the host sampler's).

use crate::device::{Access, Device, Dispatch, KernelSpec, LocalTensor, loop_limit};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = include_str!("../../shaders/topk.wgsl");
const BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];

/// The most candidates [`top_k`] finds in one call: it scans the row once
/// per candidate, so a larger `k` is better served by reading the row back.
pub const TOP_K_MAX: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    row: u32,
    k: u32,
    offset: u32,
    span: u32,
    chunks: u32,
    _pad: u32,
}

/// Invocations per workgroup (`WG` in the shader).
const WORKGROUP: usize = 64;

/// Candidates for the `k` largest entries of row `row` of `logits`
/// (`[rows, cols]`, f32), as an i32 `[g·k, 2]` tensor on the same rank: `g`
/// groups of adjacent columns ([`top_k_groups`]), each with its `k` best, best
/// first, as (the f32 bits of the value, `offset + column`), or `(0, -1)`
/// where the group has fewer columns. The `k` best of these (value
/// descending by `f32::total_cmp`, ties by the lower id) are the row's.
/// `offset` is the shard's first global id, so candidates of several shards
/// merge the same way.
pub fn top_k(logits: &LocalTensor, row: usize, k: usize, offset: usize) -> Result<LocalTensor> {
    const OP: &str = "top_k";
    logits.expect_dtype(OP, DType::F32)?;
    let (rows, cols) = match *logits.shape() {
        [r, c] => (r, c),
        ref s => return Err(Error::shape(OP, "logits [rows, cols]", s)),
    };
    if row >= rows {
        return Err(Error::OutOfRange {
            op: OP,
            what: "row",
            value: row as i64,
            bound: rows,
        });
    }
    if !(1..=TOP_K_MAX).contains(&k) {
        return Err(Error::invalid(
            OP,
            format!("k must lie in 1..={TOP_K_MAX}, got {k}; read the row back for more"),
        ));
    }
    if offset + cols > i32::MAX as usize {
        return Err(Error::invalid(OP, "ids past i32::MAX"));
    }
    let span = top_k_span(logits.device(), k);
    let groups = top_k_groups(logits.device(), cols, k);
    let out = logits.rank().alloc(OP, &[groups * k, 2], DType::I32)?;
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        row: row as u32,
        k: k as u32,
        offset: offset as u32,
        span: span as u32,
        chunks: groups as u32,
        _pad: 0,
    };
    // An empty shard still binds a word.
    let x = if cols == 0 {
        logits.rank().zeros(&[1], DType::F32)?
    } else {
        logits.clone()
    };
    Dispatch {
        spec: &KernelSpec::new("topk", SOURCE, BINDINGS, "top_k"),
        params: bytemuck::bytes_of(&params),
        buffers: &[&x, &out],
        workgroups: groups.div_ceil(WORKGROUP) as u64,
    }
    .record(logits.device())?;
    Ok(out)
}

/// Loop iterations one invocation may run in all where the device bounds
/// them ([`loop_limit`]): a scan of `k · span` cut short would be silent.
const LOOP_BUDGET: usize = 60_000;

/// Columns one invocation scans for `k` candidates: enough that the
/// candidates stay a small fraction of the row (k per 32·k columns), few
/// enough that a vocab shard keeps many invocations busy; on a device that
/// bounds loops, within its budget.
fn top_k_span(device: &Device, k: usize) -> usize {
    let span = (32 * k).max(256);
    match loop_limit(device) {
        Some(_) => span.min(LOOP_BUDGET / k).max(1),
        None => span,
    }
}

/// Groups of columns [`top_k`] on `device` splits a row of `cols` into, for
/// `k` candidates each (at least 1).
pub fn top_k_groups(device: &Device, cols: usize, k: usize) -> usize {
    cols.div_ceil(top_k_span(device, k)).max(1)
}

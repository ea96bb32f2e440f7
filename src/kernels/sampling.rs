//! Generation's repetition penalty and softmax normaliser on one row of a
//! logits shard (`shaders/sampling.wgsl`): [`penalized_row`] applies
//! transformers' repetition penalty to the ids the shard holds before
//! [`top_k`](super::top_k) finds candidates, and [`row_exp_sum`] reduces the
//! shard's `(max, Σ exp((v − max) / T))`, so top-p sampling needs only the
//! candidates and one pair per rank on the host.

use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, loop_limit};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = include_str!("../../shaders/sampling.wgsl");
const BINDINGS: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    row: u32,
    offset: u32,
    n_ids: u32,
    penalty: f32,
    inv_t: f32,
    span: u32,
    chunks: u32,
    _pad: [u32; 3],
}

/// Invocations per workgroup (`WG` in the shader).
const WORKGROUP: usize = 64;

/// Columns one invocation of the partial sums scans.
const SPAN: usize = 256;

fn dispatch(
    entry: &'static str,
    params: &Params,
    buffers: [&LocalTensor; 3],
    invocations: usize,
) -> Result<()> {
    Dispatch {
        spec: &KernelSpec::new("sampling", SOURCE, BINDINGS, entry),
        params: bytemuck::bytes_of(params),
        buffers: &buffers,
        workgroups: invocations.div_ceil(WORKGROUP).max(1) as u64,
    }
    .record(buffers[0].device())
}

/// Row `row` of `logits` (`[rows, cols]`, f32) as a new `[1, cols]` f32
/// tensor on the same rank, with transformers' repetition penalty applied
/// at every id of `ids` (i32 `[n]`, distinct global ids; those outside
/// `offset..offset + cols` are skipped): `v / penalty` where `v ≥ 0`, else
/// `v · penalty`. `offset` is the shard's first global id; `penalty` > 0.
pub fn penalized_row(
    logits: &LocalTensor,
    row: usize,
    ids: &LocalTensor,
    penalty: f32,
    offset: usize,
) -> Result<LocalTensor> {
    const OP: &str = "penalized_row";
    logits.expect_dtype(OP, DType::F32)?;
    ids.expect_dtype(OP, DType::I32)?;
    logits.same_rank(OP, ids)?;
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
    if !(penalty > 0.0 && penalty.is_finite()) {
        return Err(Error::invalid(
            OP,
            format!("the repetition penalty must be finite and > 0, got {penalty}"),
        ));
    }
    if offset + cols > i32::MAX as usize {
        return Err(Error::invalid(OP, "ids past i32::MAX"));
    }
    let out = logits.rank().alloc(OP, &[1, cols], DType::F32)?;
    if cols == 0 {
        return Ok(out);
    }
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        row: row as u32,
        offset: offset as u32,
        n_ids: ids.len() as u32,
        penalty,
        ..Params::default()
    };
    // Bindings must not be empty: a missing id list binds a word.
    let ids = if ids.is_empty() {
        logits.rank().zeros(&[1], DType::I32)?
    } else {
        ids.clone()
    };
    dispatch("copy_row", &params, [logits, &ids, &out], cols)?;
    if params.n_ids > 0 {
        dispatch("penalize", &params, [logits, &ids, &out], ids.len())?;
    }
    Ok(out)
}

/// `[2]` f32 on the same rank: `(m, Σ_c exp((v_c − m) / temperature))` over
/// the entries `v` of `row` (`[1, cols]` or `[cols]`, f32), `m` their max
/// (−3.4e38 and 0 for no entries): the shard's part of the softmax
/// normaliser at that temperature (> 0).
pub fn row_exp_sum(row: &LocalTensor, temperature: f32) -> Result<LocalTensor> {
    const OP: &str = "row_exp_sum";
    row.expect_dtype(OP, DType::F32)?;
    let cols = match *row.shape() {
        [1, c] | [c] => c,
        ref s => return Err(Error::shape(OP, "a row [1, cols] or [cols]", s)),
    };
    if !(temperature > 0.0 && temperature.is_finite()) {
        return Err(Error::invalid(
            OP,
            format!("the temperature must be finite and > 0, got {temperature}"),
        ));
    }
    let rank = row.rank();
    let out = rank.alloc(OP, &[2], DType::F32)?;
    // On a device that bounds loops, one invocation's scan stays within it.
    let span = match loop_limit(row.device()) {
        Some(limit) => SPAN.min(limit as usize / 4).max(1),
        None => SPAN,
    };
    let chunks = cols.div_ceil(span).max(1);
    let partials = rank.alloc(OP, &[chunks, 2], DType::F32)?;
    let params = Params {
        cols: cols as u32,
        inv_t: 1.0 / temperature,
        span: span as u32,
        chunks: chunks as u32,
        ..Params::default()
    };
    let x = if cols == 0 {
        rank.zeros(&[1], DType::F32)?
    } else {
        row.clone()
    };
    let dummy = rank.zeros(&[1], DType::I32)?;
    dispatch("partial_sums", &params, [&x, &dummy, &partials], chunks)?;
    dispatch("combine", &params, [&partials, &dummy, &out], 1)?;
    Ok(out)
}

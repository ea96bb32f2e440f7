//! Vocab-parallel embedding, one rank's piece (`shaders/embedding.wgsl`).
//!
//! The rank's table `E_r` is `[rows, dim]` and holds global vocab rows
//! `[start, start + rows)`. For ids flattened to `n` tokens:
//! - lookup: `out[i] = E_r[id_i − start]` if `start ≤ id_i < start + rows`,
//!   else a zero row (negative ids included), so an all-reduce of every
//!   rank's output gives the full lookup;
//! - backward: `dE_r = accumulate (or 0) + Σ_{i owned} onehot(id_i − start) ⊗ dout_i`,
//!   summed in token order: deterministic, bit-identical run to run.
//!
//! Rejecting ids outside the *global* vocab is the layer's job; here they are
//! simply not owned.

use super::elementwise::add;
use super::grid::{grid_groups, grid_source};
use super::loops::check_walk;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, copy_region};
use crate::element::DType;
use crate::error::{Error, Result};

/// The kernels on an f32 table (and the backward's f32 `dout`).
pub(crate) const SOURCE: &str = concat!(
    "alias Src = f32;\nfn ld_src(i: u32) -> f32 { return src[i]; }\n",
    grid_source!("embedding.wgsl")
);
/// The lookup on a bf16 table, two per word, widened by a shift.
pub(crate) const SOURCE_BF16: &str = concat!(
    "alias Src = u32;\nfn ld_src(i: u32) -> f32 {\n    let w = src[i / 2u];\n",
    "    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));\n}\n",
    grid_source!("embedding.wgsl")
);
const BINDINGS: &[Access] = &[Access::Read, Access::Read, Access::ReadWrite];

fn spec(entry: &'static str) -> KernelSpec {
    KernelSpec::new("embedding", SOURCE, BINDINGS, entry)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    total: u32,
    n: u32,
    dim: u32,
    rows: u32,
    start: i32,
}

fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::invalid(op, format!("{what} {v} exceeds 2^32 − 1")))
}

/// `start` as the shader's i32: ids are i32, so the owned range must fit in
/// `[0, i32::MAX]` for `id − start` to be exact.
fn start_i32(op: &'static str, start: i64, rows: usize) -> Result<i32> {
    if start < 0 || start.saturating_add(rows as i64) > i32::MAX as i64 + 1 {
        return Err(Error::invalid(
            op,
            format!("row range [{start}, {start} + {rows}) must lie within 0..=2^31 (ids are i32)"),
        ));
    }
    Ok(start as i32)
}

/// Look up `ids` (I32, any shape, flattened to `n`) in `table` (F32, or
/// BF16 or quantized, read as stored, `[rows, dim]`, global rows `[start, start + rows)`):
/// returns f32 `[n, dim]`,
/// with zero rows for ids this table does not own. A blocked table is looked
/// up block by block and the partial lookups summed (each row comes from
/// one block, the others add exact zeros).
pub fn embedding_lookup(table: &LocalTensor, ids: &LocalTensor, start: i64) -> Result<LocalTensor> {
    let mut out: Option<LocalTensor> = None;
    for (block, row) in table.blocks().iter().zip(table.block_row_starts()) {
        let part = lookup_one(block, ids, start + row as i64)?;
        out = Some(match out {
            None => part,
            Some(acc) => add(&acc, &part)?,
        });
    }
    Ok(out.expect("a tensor has at least one block"))
}

fn lookup_one(table: &LocalTensor, ids: &LocalTensor, start: i64) -> Result<LocalTensor> {
    const OP: &str = "embedding_lookup";
    if !matches!(table.dtype(), DType::BF16 | DType::Quant(_)) {
        table.expect_dtype(OP, DType::F32)?;
    }
    ids.expect_dtype(OP, DType::I32)?;
    table.same_rank(OP, ids)?;
    let &[rows, dim] = table.shape() else {
        return Err(Error::shape(OP, "a 2-D table [rows, dim]", table.shape()));
    };
    let n = ids.len();
    let start = start_i32(OP, start, rows)?;
    let total = n
        .checked_mul(dim)
        .ok_or_else(|| Error::invalid(OP, "n × dim overflows usize"))?;
    let out = table.rank().alloc(OP, &[n, dim], DType::F32)?;
    let params = Params {
        total: to_u32(OP, "n × dim", total)?,
        n: to_u32(OP, "n", n)?,
        dim: to_u32(OP, "dim", dim)?,
        rows: to_u32(OP, "rows", rows)?,
        start,
    };
    let spec = match table.dtype() {
        DType::BF16 => KernelSpec::new("embedding_bf16", SOURCE_BF16, BINDINGS, "lookup"),
        DType::Quant(q) => {
            let (family, source) = super::quant::lookup_program(q);
            KernelSpec::new(family, source, BINDINGS, "lookup")
        }
        _ => spec("lookup"),
    };
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers: &[ids, table, &out],
        workgroups: grid_groups(table.device(), total),
    }
    .record(table.device())?;
    Ok(out)
}

/// Gradient of [`embedding_lookup`] for a table of `rows` rows starting at
/// global id `start`: returns `[rows, dim]` = `accumulate` (or zeros) plus,
/// for every owned id, `dout`'s row added into row `id − start`.
///
/// `dout` is `[.., dim]` with `ids.len()` rows (e.g. `[n, dim]`, or `ids`'s
/// shape plus `dim`); `accumulate`, if given, is `[rows, dim]` and is not
/// modified. Repeated ids are summed in token order with no atomics, so the
/// result is bit-identical run to run.
pub fn embedding_backward(
    ids: &LocalTensor,
    dout: &LocalTensor,
    rows: usize,
    start: i64,
    accumulate: Option<&LocalTensor>,
) -> Result<LocalTensor> {
    const OP: &str = "embedding_backward";
    ids.expect_dtype(OP, DType::I32)?;
    dout.expect_dtype(OP, DType::F32)?;
    ids.same_rank(OP, dout)?;
    let n = ids.len();
    let dim = match dout.shape().last() {
        Some(&d) if n.checked_mul(d) == Some(dout.len()) => d,
        _ => {
            return Err(Error::shape(
                OP,
                format!("dout [.., dim] with {n} rows (one per id)"),
                dout.shape(),
            ));
        }
    };
    start_i32(OP, start, rows)?;
    // One invocation walks every token in order (deterministic sums).
    check_walk(
        OP,
        ids.device(),
        "a scatter-add of 65535 tokens or more",
        n,
        "run the embedding's backward on fewer tokens at a time (a smaller batch), or use lavapipe (Vulkan) from Mesa 24 or newer",
    )?;
    let rank = ids.rank();
    let out = match accumulate {
        Some(acc) => {
            acc.expect_dtype(OP, DType::F32)?;
            ids.same_rank(OP, acc)?;
            if acc.shape() != [rows, dim] {
                return Err(Error::shape(OP, [rows, dim], acc.shape()));
            }
            let out = rank.alloc(OP, &[rows, dim], DType::F32)?;
            copy_region(acc, 0, &out, 0, acc.len())?;
            out
        }
        None => rank.zeros(&[rows, dim], DType::F32)?,
    };
    if n == 0 || rows == 0 {
        return Ok(out);
    }
    // A table past one binding is blocked: each block takes the ids of its rows.
    for (block, row) in out.blocks().iter().zip(out.block_row_starts()) {
        let rows = block.shape()[0];
        let params = Params {
            total: 0,
            n: to_u32(OP, "n", n)?,
            dim: to_u32(OP, "dim", dim)?,
            rows: to_u32(OP, "rows", rows)?,
            start: start_i32(OP, start + row as i64, rows)?,
        };
        Dispatch {
            spec: &spec("scatter_add"),
            params: bytemuck::bytes_of(&params),
            buffers: &[ids, dout, block],
            workgroups: (dim as u64).div_ceil(64),
        }
        .record(ids.device())?;
    }
    Ok(out)
}

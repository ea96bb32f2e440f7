//! Row reduction (`shaders/reduce.wgsl`): `sum_rows(x)[n] = Σ_m x[m, n]` for
//! x `[M, N]` (the bias gradient). Deterministic: rows are summed in fixed
//! chunks, in order, then the chunk sums likewise, so equal inputs of one
//! shape give bit-equal results on every run.

use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

const SOURCE: &str = include_str!("../../shaders/reduce.wgsl");
const BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];
const WORKGROUP: u64 = 64;
/// Rows one invocation adds up per pass; more rows take another pass over the
/// chunk sums (M = 10⁶ needs 3 passes).
const CHUNK: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    n: u32,
    chunk: u32,
    chunks: u32,
}

/// Sums of row chunks: `[rows, n]` → `[max(1, ⌈rows/CHUNK⌉), n]`.
fn chunk_sums(x: &LocalTensor, rows: usize, n: usize) -> Result<LocalTensor> {
    const OP: &str = "sum_rows";
    let chunks = rows.div_ceil(CHUNK).max(1);
    let out = x.rank().alloc(OP, &[chunks, n], DType::F32)?;
    let outputs = chunks as u64 * n as u64;
    if outputs > u32::MAX as u64 / 2 {
        return Err(Error::invalid(OP, "more than 2^31 column sums"));
    }
    let params = Params {
        rows: rows as u32,
        n: n as u32,
        chunk: CHUNK as u32,
        chunks: chunks as u32,
    };
    Dispatch {
        spec: &KernelSpec::new("reduce", SOURCE, BINDINGS, "sum_rows_chunk").in_vec4s(),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, &out],
        workgroups: outputs.div_ceil(4 * WORKGROUP),
    }
    .record(x.device())?;
    Ok(out)
}

/// Column sums of a 2-D f32 tensor: x `[M, N]` → `[N]` (zeros when M = 0), in
/// a fixed order (deterministic).
pub fn sum_rows(x: &LocalTensor) -> Result<LocalTensor> {
    const OP: &str = "sum_rows";
    x.expect_dtype(OP, DType::F32)?;
    let (mut rows, n) = match *x.shape() {
        [r, c] => (r, c),
        ref s => return Err(Error::shape(OP, "a 2-D tensor [M, N]", s)),
    };
    if x.len() > u32::MAX as usize / 2 {
        return Err(Error::invalid(OP, "a tensor has more than 2^31 elements"));
    }
    let mut cur = x.clone();
    loop {
        cur = chunk_sums(&cur, rows, n)?;
        rows = cur.shape()[0];
        if rows == 1 {
            return cur.reshape(&[n]);
        }
    }
}

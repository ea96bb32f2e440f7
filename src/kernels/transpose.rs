//! Transpose and pack (`shaders/transpose.wgsl`): `op(x)` copied into a
//! row-major `[rows, ld]` buffer, zero-padded past `op(x)`'s shape. The GEMM
//! uses it to bring transposed or ragged operands into the one layout its
//! kernel reads (A `[M, K]`, B `[K, N]`, rows a multiple of 4 long), so a run
//! compiles one GEMM pipeline plus this small one instead of one per layout.

use crate::device::{Access, Dispatch, KernelSpec, LocalTensor};
use crate::element::DType;
use crate::error::{Error, Result};

/// f32 elements.
pub(crate) const SOURCE: &str = concat!(
    "alias Elem = f32;\n",
    include_str!("../../shaders/transpose.wgsl")
);
/// f16 elements (needs `SHADER_F16`).
pub(crate) const SOURCE_F16: &str = concat!(
    "enable f16;\nalias Elem = f16;\n",
    include_str!("../../shaders/transpose.wgsl")
);
const BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];
/// Invocations per workgroup (`@workgroup_size` in the shader); each writes 4 elements.
const WORKGROUP: u64 = 64;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    cols: u32,
    out_rows: u32,
    ld: u32,
    trans: u32,
    groups: u32,
    block: u32,
    lane_texels: u32,
}

/// `op(x)` (`x` 2-D f32 or f16, `op` = transpose when `trans`) written into a
/// fresh `[out_rows, ld]` tensor of x's dtype, zeros where `op(x)` has no
/// element. Needs `out_rows` and `ld` at least `op(x)`'s rows and columns.
pub(crate) fn pack(
    op: &'static str,
    x: &LocalTensor,
    trans: bool,
    out_rows: usize,
    ld: usize,
) -> Result<LocalTensor> {
    pack_blocks(op, x, trans, 0, out_rows, ld)
}

/// [`pack`] when `block` is 0; otherwise `op(x)` in blocks of `block` rows
/// (`shaders/transpose.wgsl`): texel `L` (four elements) of a fresh
/// `[out_rows, ld]` tensor holds row `blk·block + r`, columns `4q..4q+4` of
/// `op(x)`, where `L = (blk·Q + q)·block + r` and `Q` = `op(x)`'s columns / 4
/// rounded up; zeros past `op(x)`. The GEMM's shared-rows kernel reads A,
/// and B stored `[N, K]`, so.
/// Blocked, needs `ld` a multiple of 4 and room for every block:
/// `out_rows·ld ≥ 4·Q·block·⌈rows / block⌉`. Non-transposed rows of a
/// multiple of 4 elements take the vec4 entry `pack_blocks4`, an invocation
/// per row, which leaves the last block's rows past x (and texels past the
/// last block) unwritten: only the GEMM reads this layout, and it stores
/// nothing computed from them.
pub(crate) fn pack_blocks(
    op: &'static str,
    x: &LocalTensor,
    trans: bool,
    block: usize,
    out_rows: usize,
    ld: usize,
) -> Result<LocalTensor> {
    let (family, source) = family(op, x)?;
    let (rows, cols) = match *x.shape() {
        [r, c] => (r, c),
        ref s => return Err(Error::shape(op, "a 2-D tensor", s)),
    };
    let (orows, ocols) = if trans { (cols, rows) } else { (rows, cols) };
    debug_assert!(if block == 0 {
        out_rows >= orows && ld >= ocols
    } else {
        ld.is_multiple_of(4)
            && out_rows * ld >= ocols.div_ceil(4) * 4 * orows.next_multiple_of(block)
    });
    let out = output(op, x, out_rows, ld)?;
    // Blocked rows of whole vec4s take an invocation per row (pack_blocks4),
    // the rest one per four output elements.
    let row_loop = block != 0 && !trans && cols.is_multiple_of(4);
    let invocations = if row_loop {
        rows as u64
    } else {
        out_rows as u64 * ld.div_ceil(4) as u64
    };
    let groups = invocations.div_ceil(WORKGROUP);
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        out_rows: out_rows as u32,
        ld: ld as u32,
        trans: trans as u32,
        groups: groups as u32,
        block: block as u32,
        lane_texels: 0,
    };
    let entry = if row_loop { "pack_blocks4" } else { "pack" };
    Dispatch {
        spec: &KernelSpec::new(family, source, BINDINGS, entry),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, &out],
        workgroups: groups,
    }
    .record(x.device())?;
    Ok(out)
}

/// B stored `[K, N]` (`x`, f32 or f16, K and N multiples of 4) in blocks of
/// the GEMM workgroup's columns, for the shared-rows kernel reading it
/// blocked (`shaders/transpose.wgsl`, `pack_column_blocks4`): `block`
/// texels per step of K in a block (the workgroup's columns), of which a
/// lane reads `4·lane_texels` adjacent ones. Written into a fresh
/// `[out_rows, ld]` tensor of at least `⌈N / block⌉·block·K` elements (a
/// block spans `block` columns); texels past N in the last block are left
/// unwritten, as [`pack_blocks`] leaves its last block's rows.
pub(crate) fn pack_column_blocks(
    op: &'static str,
    x: &LocalTensor,
    block: usize,
    lane_texels: usize,
    out_rows: usize,
    ld: usize,
) -> Result<LocalTensor> {
    let (family, source) = family(op, x)?;
    let (k, n) = match *x.shape() {
        [k, n] if k % 4 == 0 && n % 4 == 0 => (k, n),
        ref s => {
            return Err(Error::shape(
                op,
                "a 2-D tensor [K, N], K and N multiples of 4",
                s,
            ));
        }
    };
    if lane_texels == 0 || block == 0 || !block.is_multiple_of(4 * lane_texels) {
        return Err(Error::invalid(
            op,
            format!("a block of {block} texels cannot hold lanes of {lane_texels} texels per k"),
        ));
    }
    // A block spans `block` columns (block / 4 texels of four).
    debug_assert!(ld.is_multiple_of(4) && out_rows * ld >= n.div_ceil(block) * block * k);
    let out = output(op, x, out_rows, ld)?;
    let groups = (k as u64).div_ceil(WORKGROUP);
    let params = Params {
        rows: k as u32,
        cols: n as u32,
        out_rows: out_rows as u32,
        ld: ld as u32,
        trans: 0,
        groups: groups as u32,
        block: block as u32,
        lane_texels: lane_texels as u32,
    };
    Dispatch {
        spec: &KernelSpec::new(family, source, BINDINGS, "pack_column_blocks4"),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, &out],
        workgroups: groups,
    }
    .record(x.device())?;
    Ok(out)
}

/// The pipeline family and source for x's element type: f32, or f16 (needs
/// `SHADER_F16`).
fn family(op: &'static str, x: &LocalTensor) -> Result<(&'static str, &'static str)> {
    match x.dtype() {
        DType::F16 => Ok(("transpose_f16", SOURCE_F16)),
        _ => {
            x.expect_dtype(op, DType::F32)?;
            Ok(("transpose", SOURCE))
        }
    }
}

/// A fresh `[out_rows, ld]` tensor of x's type for a pack of x, refused
/// when either is too large for the kernel's u32 indices.
fn output(op: &'static str, x: &LocalTensor, out_rows: usize, ld: usize) -> Result<LocalTensor> {
    let out = x.rank().alloc(op, &[out_rows, ld], x.dtype())?;
    if out.len() > u32::MAX as usize / 2 || x.len() > u32::MAX as usize / 2 {
        return Err(Error::invalid(op, "a tensor has more than 2^31 elements"));
    }
    Ok(out)
}

/// `xᵀ`: x `[R, C]` (f32 or f16) → a fresh `[C, R]` tensor on the same rank.
pub fn transpose(x: &LocalTensor) -> Result<LocalTensor> {
    const OP: &str = "transpose";
    let (r, c) = match *x.shape() {
        [r, c] => (r, c),
        ref s => return Err(Error::shape(OP, "a 2-D tensor [R, C]", s)),
    };
    pack(OP, x, true, c, r)
}

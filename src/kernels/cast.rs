//! Casts between f32 and f16 (`shaders/cast.wgsl`) or bf16
//! (`shaders/cast_bf16.wgsl`), the way into and out of mixed precision:
//! f32 master weights are cast to f16 for the f16 GEMM, weights are kept in
//! bf16 for generation, and 16-bit tensors are widened before a collective
//! (which then sums in f32). Narrowing to f16 gives a neighbouring f16 (the
//! nearest, ties to even, on lavapipe; WGSL lets a driver pick either
//! neighbour); to bf16 the nearest, ties to even, on every adapter (integer
//! arithmetic). Widening is exact. f16 ↔ bf16 goes through f32.

use super::grid::grid_groups;
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, map_blocks};
use crate::element::DType;
use crate::error::{Error, Result};

const BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];

/// `enable f16;` and the element aliases, then the grid prefix and the kernel.
macro_rules! cast_source {
    ($from:literal, $to:literal) => {
        concat!(
            "enable f16;\nalias In = ",
            $from,
            ";\nalias Out = ",
            $to,
            ";\n",
            include_str!("../../shaders/grid.wgsl"),
            include_str!("../../shaders/cast.wgsl")
        )
    };
}

/// f32 → f16.
pub(crate) const SOURCE_TO_F16: &str = cast_source!("f32", "f16");
/// f16 → f32.
pub(crate) const SOURCE_TO_F32: &str = cast_source!("f16", "f32");
/// f32 ↔ bf16 (words both sides: no `enable f16`).
pub(crate) const SOURCE_BF16: &str = concat!(
    include_str!("../../shaders/grid.wgsl"),
    include_str!("../../shaders/cast_bf16.wgsl")
);

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// `x` as `dtype`: between f32, f16 and bf16 (a fresh tensor of the same
/// shape), or `x` itself when it already has that dtype. f16 needs an
/// adapter with `SHADER_F16`, bf16 none; i32 tensors cannot be cast. A blocked tensor is cast block
/// by block (both dtypes block alike), keeping its blocks.
pub fn cast(x: &LocalTensor, dtype: DType) -> Result<LocalTensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    if x.dtype() != DType::F32 && dtype != DType::F32 {
        return cast(&cast(x, DType::F32)?, dtype);
    }
    // Widening may need blocks where the input had none: copy it into them.
    let x = x.blocked_as("cast", dtype)?;
    map_blocks("cast", &[&x], |p| cast_one(p[0], dtype))
}

fn cast_one(x: &LocalTensor, dtype: DType) -> Result<LocalTensor> {
    const OP: &str = "cast";
    let (family, source, entry) = match (x.dtype(), dtype) {
        (from, to) if from == to => return Ok(x.clone()),
        (DType::F32, DType::F16) => ("cast_to_f16", SOURCE_TO_F16, "convert"),
        (DType::F16, DType::F32) => ("cast_to_f32", SOURCE_TO_F32, "convert"),
        (DType::F32, DType::BF16) => ("cast_bf16", SOURCE_BF16, "to_bf16"),
        (DType::BF16, DType::F32) => ("cast_bf16", SOURCE_BF16, "from_bf16"),
        (from, to) => {
            return Err(Error::invalid(
                OP,
                format!("casts between f32, f16 and bf16 only, not {from} -> {to}"),
            ));
        }
    };
    let n = u32::try_from(x.len()).map_err(|_| Error::invalid(OP, "more than 2^32 elements"))?;
    // Narrowing to bf16 runs one invocation per output word.
    let threads = if dtype == DType::BF16 {
        x.len().div_ceil(2)
    } else {
        x.len()
    };
    let out = x.rank().alloc(OP, x.shape(), dtype)?;
    if n == 0 {
        return Ok(out);
    }
    let params = Params { n, _pad: [0; 3] };
    Dispatch {
        spec: &KernelSpec::new(family, source, BINDINGS, entry),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, &out],
        workgroups: grid_groups(x.device(), threads),
    }
    .record(x.device())?;
    Ok(out)
}

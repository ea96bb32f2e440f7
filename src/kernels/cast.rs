//! Casts between f32 and f16 (`shaders/cast.wgsl`), the way into and out of
//! mixed precision: f32 master weights are cast to f16 for the f16 GEMM, and
//! f16 tensors are widened before a collective (which then sums in f32).
//! Narrowing gives a neighbouring f16 (the nearest, ties to even, on
//! lavapipe; WGSL lets a driver pick either neighbour); widening is exact.

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

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// `x` as `dtype`: f32 ↔ f16 (a fresh tensor of the same shape), or `x`
/// itself when it already has that dtype. f16 needs an adapter with
/// `SHADER_F16`; i32 tensors cannot be cast. A blocked tensor is cast block
/// by block (both dtypes block alike), keeping its blocks.
pub fn cast(x: &LocalTensor, dtype: DType) -> Result<LocalTensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    // Widening may need blocks where the input had none: copy it into them.
    let x = x.blocked_as("cast", dtype)?;
    map_blocks("cast", &[&x], |p| cast_one(p[0], dtype))
}

fn cast_one(x: &LocalTensor, dtype: DType) -> Result<LocalTensor> {
    const OP: &str = "cast";
    let (family, source) = match (x.dtype(), dtype) {
        (from, to) if from == to => return Ok(x.clone()),
        (DType::F32, DType::F16) => ("cast_to_f16", SOURCE_TO_F16),
        (DType::F16, DType::F32) => ("cast_to_f32", SOURCE_TO_F32),
        (from, to) => {
            return Err(Error::invalid(
                OP,
                format!("casts f32 <-> f16 only, not {from} -> {to}"),
            ));
        }
    };
    let n = u32::try_from(x.len()).map_err(|_| Error::invalid(OP, "more than 2^32 elements"))?;
    let out = x.rank().alloc(OP, x.shape(), dtype)?;
    if n == 0 {
        return Ok(out);
    }
    let params = Params { n, _pad: [0; 3] };
    Dispatch {
        spec: &KernelSpec::new(family, source, BINDINGS, "convert"),
        params: bytemuck::bytes_of(&params),
        buffers: &[x, &out],
        workgroups: grid_groups(x.device(), n as usize),
    }
    .record(x.device())?;
    Ok(out)
}

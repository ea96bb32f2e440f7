//! What tensors hold and how their elements combine: [`DType`] and
//! [`ReduceOp`]. Pure values, no GPU, so every layer (and the error type) can
//! name them.

use crate::quant::QuantType;

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit signed integer (token ids, targets).
    I32,
    /// 16-bit IEEE float, for mixed precision: needs an adapter with
    /// `wgpu::Features::SHADER_F16` (check with `Device::has_f16`). Kernels
    /// that take f16 accumulate in f32; collectives move f32, so cast first
    /// (`DTensor::cast`).
    F16,
    /// bfloat16 (f32's exponent, 8 bits of mantissa), for weights kept as
    /// checkpoints store them: two per 32-bit word, widened by a shift in
    /// the kernels that read it, so it works on every adapter (no
    /// `SHADER_F16` needed). The small-M GEMM and the embedding lookup read
    /// it directly; other products widen it first. Collectives refuse it.
    BF16,
    /// A weight in one of llama.cpp's block-quantized formats: a `[N, K]`
    /// tensor stored as `ceil(K / block)` blocks a row (see
    /// [`crate::quant::layout`] for where their fields sit), read by the
    /// products, the embedding lookup and the tied head, which dequantize
    /// as they load and accumulate in f32. Such a weight is frozen: no
    /// gradient, no optimiser state.
    Quant(QuantType),
}

impl DType {
    /// Bytes per element; 0 for a quantized type, whose elements are
    /// stored in blocks ([`DType::storage_bytes`]).
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Quant(_) => 0,
        }
    }

    /// Bytes a row-major tensor of `shape` takes on the device, a whole
    /// number of 32-bit words: a quantized one is its rows' blocks, in
    /// whole 16-byte vec4s ([`crate::quant::layout::device_bytes`]).
    pub fn storage_bytes(self, shape: &[usize]) -> usize {
        let len: usize = shape.iter().product();
        match self {
            DType::Quant(q) => {
                let k = shape.last().copied().unwrap_or(1);
                let rows = len.checked_div(k).unwrap_or(0);
                crate::quant::layout::device_bytes(q, rows * q.blocks_per_row(k))
            }
            d => (len * d.size_bytes()).next_multiple_of(4),
        }
    }

    /// The quantized format, for a quantized dtype.
    pub fn quant(self) -> Option<QuantType> {
        match self {
            DType::Quant(q) => Some(q),
            _ => None,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::Quant(q) => return q.fmt(f),
        })
    }
}

/// How a reduction combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Element-wise sum (i32 sums wrap around).
    Sum,
    /// Element-wise maximum.
    Max,
}

impl ReduceOp {
    /// `op(a, b)` on two 32-bit words holding `dtype` values: the host-side
    /// twin of the reduce kernels, so host-staged results match them bit for bit.
    /// (Collectives refuse f16 tensors, so `dtype` is f32 or i32.)
    #[inline]
    pub(crate) fn combine_words(self, dtype: DType, a: u32, b: u32) -> u32 {
        match (dtype, self) {
            (DType::F16 | DType::BF16 | DType::Quant(_), _) => {
                debug_assert!(
                    false,
                    "collectives refuse 16-bit floats before combining words"
                );
                a
            }
            (DType::F32, ReduceOp::Sum) => (f32::from_bits(a) + f32::from_bits(b)).to_bits(),
            (DType::F32, ReduceOp::Max) => f32::from_bits(a).max(f32::from_bits(b)).to_bits(),
            (DType::I32, ReduceOp::Sum) => (a as i32).wrapping_add(b as i32) as u32,
            (DType::I32, ReduceOp::Max) => (a as i32).max(b as i32) as u32,
        }
    }
}

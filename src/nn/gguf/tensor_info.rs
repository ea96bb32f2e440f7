//! [`TensorInfo`]: one tensor of a GGUF file — name, row-major shape,
//! type, where its bytes are — and the checks on a tensor info as read:
//! dimensions, type, block multiple, sizes, alignment, no overlaps.

use std::ops::Range;

use super::ggml_type::{block, dtype_name, dtype_of};
use super::parse::Cursor;
use crate::element::DType;

/// One tensor of a GGUF file: name, row-major shape, type and where its
/// bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub(super) name: String,
    pub(super) shape: Vec<usize>,
    pub(super) dtype: DType,
    pub(super) start: usize,
    pub(super) len: usize,
}

impl TensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Row-major shape, outermost first: ggml's `ne` reversed, so an
    /// `nn.Linear` weight stored with `ne = [in, out]` is `[out, in]`.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element type; quantized types are [`DType::Quant`].
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The tensor's bytes in the file: absolute offsets.
    pub fn byte_range(&self) -> Range<usize> {
        self.start..self.start + self.len
    }

    /// Rows: every dimension but the last (innermost) one multiplied; 1
    /// for a 1-D tensor.
    pub fn rows(&self) -> usize {
        self.shape[..self.shape.len() - 1].iter().product()
    }

    /// Bytes of one row: whole blocks for a quantized type, since GGUF
    /// rows are a multiple of the block length.
    pub fn row_bytes(&self) -> usize {
        self.len / self.rows()
    }

    /// Number of elements.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One tensor info after its name: shape (row-major), dtype, offset from
/// the data start, and byte length.
pub(super) fn tensor_info(
    c: &mut Cursor,
    alignment: u32,
) -> Result<(Vec<usize>, DType, u64, u64), String> {
    let n_dims = c.u32("the dimension count")?;
    if !(1..=4).contains(&n_dims) {
        return Err(format!(
            "has {n_dims} dimensions; GGUF (ggml) allows 1 to 4"
        ));
    }
    let mut ne = [1u64; 4];
    for (j, d) in ne.iter_mut().enumerate().take(n_dims as usize) {
        *d = c.u64(&format!("dimension ne[{j}]"))?;
        if *d == 0 {
            return Err(format!("dimension ne[{j}] is 0"));
        }
    }
    let ne = &ne[..n_dims as usize];
    let id = c.u32("the ggml type")?;
    let dtype = dtype_of(id)?;
    let offset = c.u64("the data offset")?;
    let elements = ne
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| format!("shape ne = {ne:?} has more elements than ggml can count"))?;
    let (block_len, block_bytes) = block(dtype);
    if !ne[0].is_multiple_of(block_len as u64) {
        return Err(format!(
            "its rows hold ne[0] = {} elements, not a multiple of {}'s block of {block_len}",
            ne[0],
            dtype_name(dtype)
        ));
    }
    let len = (elements / block_len as u64)
        .checked_mul(block_bytes as u64)
        .ok_or_else(|| format!("shape ne = {ne:?} has more bytes than fit in 64 bits"))?;
    if !offset.is_multiple_of(u64::from(alignment)) {
        return Err(format!(
            "its data offset {offset} is not a multiple of the alignment {alignment}"
        ));
    }
    let shape = ne
        .iter()
        .rev()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| format!("shape ne = {ne:?} does not fit this platform's usize"))?;
    Ok((shape, dtype, offset, len))
}

/// No two tensors' bytes overlap.
pub(super) fn check_overlaps(tensors: &[TensorInfo]) -> Result<(), String> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| t.start);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.start < a.start + a.len {
            return Err(format!(
                "tensor {:?}'s data (bytes {:?}) overlaps tensor {:?}'s (bytes {:?})",
                b.name,
                b.byte_range(),
                a.name,
                a.byte_range()
            ));
        }
    }
    Ok(())
}

//! Block copy and in-place reduce (`shaders/collective.wgsl`), the on-device
//! building blocks of the shared-device collectives in [`crate::comm`].
//!
//! Both tensors are viewed as `[outer, dim, inner]` around one dimension, and
//! a window of `len` indices along it moves from `src[.., src_start.., ..]` to
//! `dst[.., dst_start.., ..]`: [`copy_block`] overwrites, [`reduce_block`]
//! combines in place (`dst = dst + src` or `max(dst, src)`). Contiguous blocks
//! use `copy_buffer_to_buffer`; strided ones one dispatch. Only the crate uses
//! these: reducing in place would break the "tensors are immutable" promise
//! the public API makes.

use crate::device::{Access, DType, Dispatch, KernelSpec, LocalTensor, copy_region};
use crate::error::{Error, Result};

const SOURCE: &str = include_str!("../../shaders/collective.wgsl");
const BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];
const WORKGROUP: u64 = 256;

/// How [`reduce_block`] combines `dst` with `src`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Combine {
    /// `dst + src` (i32 wraps).
    Sum,
    /// `max(dst, src)`.
    Max,
}

/// A window along one dimension of two tensors viewed as `[outer, dim, inner]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// Product of the dimensions before the split one.
    pub outer: usize,
    /// Indices moved along the split dimension.
    pub len: usize,
    /// Product of the dimensions after the split one.
    pub inner: usize,
    /// Size of the split dimension in `src`.
    pub src_dim: usize,
    /// First index of the window in `src`.
    pub src_start: usize,
    /// Size of the split dimension in `dst`.
    pub dst_dim: usize,
    /// First index of the window in `dst`.
    pub dst_start: usize,
}

impl Block {
    /// The whole of a tensor of `n` elements onto the whole of another.
    pub(crate) fn whole(n: usize) -> Block {
        Block {
            outer: 1,
            len: n,
            inner: 1,
            src_dim: n,
            src_start: 0,
            dst_dim: n,
            dst_start: 0,
        }
    }

    fn total(&self) -> usize {
        self.outer * self.len * self.inner
    }

    /// `(src offset, dst offset)` in elements when the block is one run of memory.
    fn contiguous(&self) -> Option<(usize, usize)> {
        if self.outer == 1 {
            Some((self.src_start * self.inner, self.dst_start * self.inner))
        } else if self.len == self.src_dim && self.len == self.dst_dim {
            Some((0, 0))
        } else {
            None
        }
    }

    fn check(&self, op: &'static str, src: &LocalTensor, dst: &LocalTensor) -> Result<()> {
        let fits = |dim: usize, start: usize, len: usize| {
            start
                .checked_add(self.len)
                .is_some_and(|end| end <= dim && self.outer * dim * self.inner == len)
        };
        if !fits(self.src_dim, self.src_start, src.len())
            || !fits(self.dst_dim, self.dst_start, dst.len())
        {
            return Err(Error::invalid(op, format!("block {self:?} out of bounds")));
        }
        if src.dtype() != dst.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: dst.dtype(),
                got: src.dtype(),
            });
        }
        Ok(())
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    outer: u32,
    len: u32,
    inner: u32,
    total: u32,
    src_dim: u32,
    src_start: u32,
    dst_dim: u32,
    dst_start: u32,
}

fn dispatch(
    op: &'static str,
    entry: &'static str,
    src: &LocalTensor,
    dst: &LocalTensor,
    b: Block,
) -> Result<()> {
    let u = |v: usize| u32::try_from(v).map_err(|_| Error::invalid(op, "more than 2^32 elements"));
    // Every index the shader computes is below src.len() or dst.len().
    u(src.len())?;
    u(dst.len())?;
    let params = Params {
        outer: u(b.outer)?,
        len: u(b.len)?,
        inner: u(b.inner)?,
        total: u(b.total())?,
        src_dim: u(b.src_dim)?,
        src_start: u(b.src_start)?,
        dst_dim: u(b.dst_dim)?,
        dst_start: u(b.dst_start)?,
    };
    Dispatch {
        spec: &KernelSpec {
            family: "collective",
            source: SOURCE,
            entry,
            bindings: BINDINGS,
            constants: Vec::new(),
        },
        params: bytemuck::bytes_of(&params),
        buffers: &[src, dst],
        workgroups: (b.total() as u64).div_ceil(WORKGROUP),
    }
    .record(dst.gpu())
}

/// Record `dst[block] = src[block]` (same device; any dtype, same in both).
pub(crate) fn copy_block(src: &LocalTensor, dst: &LocalTensor, b: Block) -> Result<()> {
    b.check("copy_block", src, dst)?;
    if b.total() == 0 {
        return Ok(());
    }
    match b.contiguous() {
        Some((s, d)) => copy_region(src, s, dst, d, b.total()),
        None => dispatch("copy_block", "copy_block", src, dst, b),
    }
}

/// Record `dst[block] = combine(dst[block], src[block])` in place (same device).
pub(crate) fn reduce_block(
    src: &LocalTensor,
    dst: &LocalTensor,
    b: Block,
    how: Combine,
) -> Result<()> {
    b.check("reduce_block", src, dst)?;
    if b.total() == 0 {
        return Ok(());
    }
    // One contiguous run, four-word aligned: the vec4 entries (no index
    // arithmetic, a quarter of the invocations).
    if let Some((s, d)) = b.contiguous()
        && s.is_multiple_of(4)
        && d.is_multiple_of(4)
        && b.total().is_multiple_of(4)
    {
        let entry = match (dst.dtype(), how) {
            (DType::F32, Combine::Sum) => "sum_f32_flat4",
            (DType::F32, Combine::Max) => "max_f32_flat4",
            (DType::I32, Combine::Sum) => "sum_i32_flat4",
            (DType::I32, Combine::Max) => "max_i32_flat4",
        };
        let flat = Block {
            outer: 1,
            len: b.total() / 4,
            inner: 1,
            src_dim: src.len() / 4,
            src_start: s / 4,
            dst_dim: dst.len() / 4,
            dst_start: d / 4,
        };
        return dispatch("reduce_block", entry, src, dst, flat);
    }
    let entry = match (dst.dtype(), how) {
        (DType::F32, Combine::Sum) => "sum_f32",
        (DType::F32, Combine::Max) => "max_f32",
        (DType::I32, Combine::Sum) => "sum_i32",
        (DType::I32, Combine::Max) => "max_i32",
    };
    dispatch("reduce_block", entry, src, dst, b)
}

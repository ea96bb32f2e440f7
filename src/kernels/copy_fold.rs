//! Block copy and fold (`shaders/copy_fold.wgsl`): the on-device building blocks
//! of the shared-device collectives in [`crate::comm`] and of slicing
//! (`narrow` / `concat`).
//!
//! Both tensors are viewed as `[outer, dim, inner]` around one dimension, and
//! a window of `len` indices along it moves from `src[.., src_start.., ..]` to
//! `dst[.., dst_start.., ..]`: [`copy_block`] overwrites, [`fold_block`]
//! writes the sum (or max) of several equally shaped inputs in one pass.
//! Contiguous copies use `copy_buffer_to_buffer`; everything else dispatches.
//! Only the crate uses these: writing into an existing tensor would break the
//! "tensors are immutable" promise the public API makes.

use super::grid::{grid_groups, grid_source};
use crate::device::{Access, Dispatch, KernelSpec, LocalTensor, copy_region};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};

const SOURCE: &str = grid_source!("copy_fold.wgsl");
const COPY_BINDINGS: &[Access] = &[Access::Read, Access::ReadWrite];
const FOLD_BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
];
/// [`FOLD_BINDINGS`] and the residual (`fold_flat4_add`'s `res4`).
const FOLD_ADD_BINDINGS: &[Access] = &[
    Access::Read,
    Access::Read,
    Access::Read,
    Access::Read,
    Access::ReadWrite,
    Access::Read,
];
/// Inputs one fold pass reads (the shader's `in0..in3`); five storage
/// bindings in all (six with `fold_add`'s residual), within WebGPU's eight.
pub(crate) const FOLD_INPUTS: usize = 4;

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

fn dispatch(op: &'static str, spec: KernelSpec, buffers: &[&LocalTensor], b: Block) -> Result<()> {
    let u = |v: usize| u32::try_from(v).map_err(|_| Error::invalid(op, "more than 2^32 elements"));
    // Every index the shader computes is below one of the bound tensors' lengths.
    for t in buffers {
        u(t.len())?;
    }
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
    let device = buffers[buffers.len() - 1].device();
    Dispatch {
        spec: &spec,
        params: bytemuck::bytes_of(&params),
        buffers,
        workgroups: grid_groups(device, b.total()),
    }
    .record(device)
}

/// Record `dst[block] = src[block]` (same device, same dtype; f16 only
/// where the block is one contiguous run of whole words).
pub(crate) fn copy_block(src: &LocalTensor, dst: &LocalTensor, b: Block) -> Result<()> {
    b.check("copy_block", src, dst)?;
    if b.total() == 0 {
        return Ok(());
    }
    match b.contiguous() {
        Some((s, d)) => copy_region(src, s, dst, d, b.total()),
        None if dst.dtype().size_bytes() == 2 => Err(Error::invalid(
            "copy_block",
            "strided copies move 32-bit words; widen f16 and bf16 tensors first (kernels::cast)",
        )),
        // Long runs (a column block of GPT-2's logits: 16k words a row) as
        // one buffer copy each: a memcpy, where the kernel moves a word per
        // invocation with index arithmetic.
        None if b.len * b.inner >= LONG_RUN && b.outer <= MAX_RUN_COPIES => {
            let run = b.len * b.inner;
            for o in 0..b.outer {
                let s = (o * b.src_dim + b.src_start) * b.inner;
                let d = (o * b.dst_dim + b.dst_start) * b.inner;
                copy_region(src, s, dst, d, run)?;
            }
            Ok(())
        }
        None => {
            let spec = KernelSpec::new("copy_fold", SOURCE, COPY_BINDINGS, "copy_block");
            dispatch("copy_block", spec, &[src, dst], b)
        }
    }
}

/// Words in a run from which [`copy_block`] copies run by run.
const LONG_RUN: usize = 4096;
/// At most this many runs are copied one by one (each is a command).
const MAX_RUN_COPIES: usize = 4096;

/// Record `dst[block] = srcs[0][block] ∘ srcs[1][block] ∘ ...` (∘ = `how`,
/// folded left to right; `dst`'s old value first when `accumulate`): one
/// pass that reads each input once. All of `srcs` share one shape; at most
/// [`FOLD_INPUTS`] of them, at least one; all on `dst`'s device.
pub(crate) fn fold_block(
    srcs: &[&LocalTensor],
    dst: &LocalTensor,
    b: Block,
    how: ReduceOp,
    accumulate: bool,
) -> Result<()> {
    const OP: &str = "fold_block";
    let mut buffers = fold_inputs(OP, srcs)?;
    for s in srcs {
        b.check(OP, s, dst)?;
        if s.shape() != srcs[0].shape() {
            return Err(Error::invalid(OP, "inputs of different shapes"));
        }
    }
    if b.total() == 0 {
        return Ok(());
    }
    let code = match (dst.dtype(), how) {
        (DType::F32, ReduceOp::Sum) => 0.0,
        (DType::F32, ReduceOp::Max) => 1.0,
        (DType::I32, ReduceOp::Sum) => 2.0,
        (DType::I32, ReduceOp::Max) => 3.0,
        (DType::F16 | DType::BF16 | DType::Quant(_), _) => {
            return Err(Error::invalid(
                OP,
                "folds f32 and i32 words; cast f16 and bf16 to f32 first",
            ));
        }
    };
    buffers.push(dst);
    let spec = |entry| fold_spec(entry, FOLD_BINDINGS, code, srcs.len(), accumulate);
    // One contiguous run, four-word aligned: the vec4 entry (no index
    // arithmetic, a quarter of the invocations).
    if let Some((s, d)) = b.contiguous()
        && s.is_multiple_of(4)
        && d.is_multiple_of(4)
        && b.total().is_multiple_of(4)
    {
        let flat = Block {
            outer: 1,
            len: b.total() / 4,
            inner: 1,
            src_dim: srcs[0].len() / 4,
            src_start: s / 4,
            dst_dim: dst.len() / 4,
            dst_start: d / 4,
        };
        return dispatch(OP, spec("fold_flat4"), &buffers, flat);
    }
    dispatch(OP, spec("fold"), &buffers, b)
}

/// The [`FOLD_INPUTS`] input bindings of a fold of `srcs` (1 to
/// [`FOLD_INPUTS`] of them): unused slots repeat the first input
/// (read-only, never read).
pub(crate) fn fold_inputs<'a>(
    op: &'static str,
    srcs: &[&'a LocalTensor],
) -> Result<Vec<&'a LocalTensor>> {
    if srcs.is_empty() || srcs.len() > FOLD_INPUTS {
        return Err(Error::invalid(
            op,
            format!("{} inputs (1 to {FOLD_INPUTS})", srcs.len()),
        ));
    }
    Ok((0..FOLD_INPUTS)
        .map(|i| *srcs.get(i).unwrap_or(&srcs[0]))
        .collect())
}

fn fold_spec(
    entry: &'static str,
    bindings: &'static [Access],
    code: f64,
    count: usize,
    accumulate: bool,
) -> KernelSpec {
    KernelSpec::new("copy_fold", SOURCE, bindings, entry).with_constants(vec![
        ("OP", code),
        ("COUNT", count as f64),
        ("ACCUMULATE", f64::from(u8::from(accumulate))),
    ])
}

/// Record `dst = residual + (srcs[0] + srcs[1] + ...)` over whole f32
/// tensors of one length, a multiple of 4 (`dst`'s old value first in the
/// sum when `accumulate`): [`fold_block`]'s sum, then the residual added as
/// `kernels::add(residual, sum)` rounds it, in one pass. At most
/// [`FOLD_INPUTS`] inputs, at least one; all on `dst`'s device.
pub(crate) fn fold_add(
    srcs: &[&LocalTensor],
    residual: &LocalTensor,
    dst: &LocalTensor,
    accumulate: bool,
) -> Result<()> {
    const OP: &str = "fold_add";
    let mut buffers = fold_inputs(OP, srcs)?;
    let n = dst.len();
    for t in srcs.iter().chain([&residual, &dst]) {
        t.expect_dtype(OP, DType::F32)?;
        if t.len() != n || t.is_blocked() {
            return Err(Error::invalid(
                OP,
                "inputs, residual and output must be whole tensors of one length",
            ));
        }
    }
    if !n.is_multiple_of(4) {
        return Err(Error::invalid(
            OP,
            format!("{n} elements: a multiple of 4 is folded as vec4s"),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    buffers.extend([dst, residual]);
    let spec = fold_spec(
        "fold_flat4_add",
        FOLD_ADD_BINDINGS,
        0.0,
        srcs.len(),
        accumulate,
    );
    dispatch(OP, spec, &buffers, Block::whole(n / 4))
}

//! [`LocalTensor`]: a dense buffer on one rank.
//!
//! A tensor remembers its rank and device; every kernel checks that its
//! operands share both, so even ranks that share one wgpu device (shared-device
//! meshes) cannot read each other's data except through a collective.
//!
//! On a shared-device mesh a collective whose result is the same bytes on
//! every rank (all-gather, all-reduce, broadcast, a ring step) hands each rank
//! a tensor over one buffer instead of P copies: tensors are immutable, so no
//! rank can observe the sharing. The one exception, in-place optimiser
//! updates, refuses such buffers ([`LocalTensor::is_shared_across_ranks`]).
//!
//! A tensor larger than one storage binding is stored as row blocks, each
//! itself a one-buffer `LocalTensor` (`blocks.rs`).
//!
//! The rank a tensor belongs to is in `rank.rs`, reading it back in
//! `staging.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::context::Device;
use super::derived::DerivedCache;
use crate::element::DType;
use crate::error::{Error, Result};

/// A pooled buffer; returned to its device's pool when the last tensor using it drops.
pub(super) struct Storage {
    pub(super) buffer: Option<wgpu::Buffer>,
    pub(super) size: u64,
    pub(super) device: Arc<Device>,
    /// Set once a tensor of another rank uses this buffer too (never cleared).
    pub(super) shared_across_ranks: AtomicBool,
    /// Version (bumped by in-place writes) and operands derived from it.
    pub(super) derived: DerivedCache,
    /// Elements at the buffer's start some tensor was grown over in place
    /// ([`LocalTensor::grow_in_place`]); 0 until then.
    pub(super) claimed: AtomicUsize,
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.device.retire_buffer(self.size, b);
        }
    }
}

/// Where a tensor's bytes live.
#[derive(Clone)]
pub(super) enum Body {
    /// One buffer.
    Buffer(Arc<Storage>),
    /// Row blocks along dim 0 (at least two), each a one-buffer tensor.
    Blocks(Arc<[LocalTensor]>),
}

/// A dense, row-major tensor living on one rank. Cloning is cheap (shared
/// buffers). Past one storage binding it is stored as row blocks
/// ([`LocalTensor::blocks`]).
#[derive(Clone)]
pub struct LocalTensor {
    pub(super) body: Body,
    shape: Vec<usize>,
    dtype: DType,
    rank: usize,
}

impl std::fmt::Debug for LocalTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalTensor")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("rank", &self.rank)
            .field("blocks", &self.blocks().len())
            .finish()
    }
}

impl LocalTensor {
    pub(super) fn new(storage: Arc<Storage>, shape: Vec<usize>, dtype: DType, rank: usize) -> Self {
        LocalTensor {
            body: Body::Buffer(storage),
            shape,
            dtype,
            rank,
        }
    }

    /// A tensor of `shape` stored as `blocks` (two or more one-buffer
    /// tensors of one rank and dtype whose rows add up to `shape[0]`).
    pub(super) fn blocked(blocks: Vec<LocalTensor>, shape: Vec<usize>) -> Self {
        let (dtype, rank) = (blocks[0].dtype, blocks[0].rank);
        LocalTensor {
            body: Body::Blocks(blocks.into()),
            shape,
            dtype,
            rank,
        }
    }

    /// The same bytes as rank `index` of another mesh over the same physical
    /// rank (a sub-mesh, [`Mesh::axis`](super::Mesh::axis)): no copy, and
    /// unlike an alias across ranks it stays writable in place.
    pub(crate) fn retagged(&self, index: usize) -> LocalTensor {
        let body = match &self.body {
            Body::Buffer(s) => Body::Buffer(s.clone()),
            Body::Blocks(b) => Body::Blocks(b.iter().map(|t| t.retagged(index)).collect()),
        };
        LocalTensor {
            body,
            shape: self.shape.clone(),
            dtype: self.dtype,
            rank: index,
        }
    }

    /// The one-buffer tensors holding its rows, in order: itself for a tensor
    /// within one binding, else its row blocks (see `device/blocks.rs`).
    pub fn blocks(&self) -> &[LocalTensor] {
        match &self.body {
            Body::Buffer(_) => std::slice::from_ref(self),
            Body::Blocks(b) => b,
        }
    }

    /// Whether it is stored as several row blocks.
    pub fn is_blocked(&self) -> bool {
        matches!(self.body, Body::Blocks(_))
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Index of the rank that owns it.
    pub fn rank_index(&self) -> usize {
        self.rank
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        match &self.body {
            Body::Buffer(s) => &s.device,
            Body::Blocks(b) => b[0].device(),
        }
    }

    /// Bytes of data (len × the dtype's size; a quantized tensor's
    /// blocks, in the device layout).
    pub fn byte_len(&self) -> u64 {
        match self.dtype {
            DType::Quant(_) => self.dtype.storage_bytes(&self.shape) as u64,
            d => self.len() as u64 * d.size_bytes() as u64,
        }
    }

    /// [`LocalTensor::byte_len`] rounded up to whole 32-bit words: what
    /// copies, bindings and staging move (wgpu copies 4-byte multiples; an
    /// odd-length f16 tensor's buffer has room for the pad).
    pub(crate) fn word_bytes(&self) -> u64 {
        self.byte_len().next_multiple_of(4)
    }

    /// The buffer and its bookkeeping, shared by every view of it (`None`
    /// for a blocked tensor).
    pub(super) fn storage(&self) -> Option<&Arc<Storage>> {
        match &self.body {
            Body::Buffer(s) => Some(s),
            Body::Blocks(_) => None,
        }
    }

    /// The one buffer, for binding or copying; a blocked tensor has none,
    /// which is an error naming `op` and the limit.
    pub(crate) fn buffer(&self, op: &'static str) -> Result<&wgpu::Buffer> {
        match &self.body {
            Body::Buffer(s) => Ok(s.buffer.as_ref().expect("buffer present until drop")),
            Body::Blocks(_) => Err(blocked_error(op, self)),
        }
    }

    /// A tensor of `shape` (more elements) over this one's buffer, its first
    /// elements this tensor's, where the buffer has room and no tensor was
    /// grown past this one's end from it before (so writing the new
    /// elements changes no tensor's values): how a key/value cache grows
    /// by a token without a copy. `None` where that does not hold.
    pub(crate) fn grow_in_place(&self, shape: &[usize]) -> Option<LocalTensor> {
        let Body::Buffer(s) = &self.body else {
            return None;
        };
        if self.dtype.quant().is_some() {
            return None;
        }
        let n: usize = shape.iter().product();
        let bytes = (n as u64 * self.dtype.size_bytes() as u64).next_multiple_of(4);
        if n < self.len() || bytes > s.size {
            return None;
        }
        s.claimed
            .compare_exchange(self.len(), n, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        Some(LocalTensor::new(
            s.clone(),
            shape.to_vec(),
            self.dtype,
            self.rank,
        ))
    }

    /// A tensor of `shape` over the start of this one's buffer (at most as
    /// many elements), claimed for [`LocalTensor::grow_in_place`]: a cache
    /// allocated with room to grow.
    pub(crate) fn claimed_prefix(&self, shape: &[usize]) -> Option<LocalTensor> {
        let Body::Buffer(s) = &self.body else {
            return None;
        };
        let n: usize = shape.iter().product();
        if n > self.len() {
            return None;
        }
        s.claimed.store(n, Ordering::Release);
        Some(LocalTensor::new(
            s.clone(),
            shape.to_vec(),
            self.dtype,
            self.rank,
        ))
    }

    /// The same data under another shape with as many elements (no copy). A
    /// blocked tensor keeps its blocks, so each block must hold whole rows of
    /// the new shape.
    pub fn reshape(&self, shape: &[usize]) -> Result<LocalTensor> {
        let n: usize = shape.iter().product();
        if n != self.len() {
            return Err(Error::shape(
                "reshape",
                format!("{} elements", self.len()),
                shape,
            ));
        }
        match &self.body {
            Body::Buffer(s) => Ok(LocalTensor::new(
                s.clone(),
                shape.to_vec(),
                self.dtype,
                self.rank,
            )),
            Body::Blocks(blocks) => {
                let row: usize = shape.get(1..).map_or(1, |r| r.iter().product());
                if shape.is_empty() || blocks.iter().any(|b| row == 0 || b.len() % row != 0) {
                    return Err(Error::invalid(
                        "reshape",
                        format!(
                            "{:?} is stored in row blocks of {:?} rows, which are not whole rows of {shape:?}; reshape so that rows stay whole",
                            self.shape,
                            blocks.iter().map(|b| b.shape()[0]).collect::<Vec<_>>()
                        ),
                    ));
                }
                let parts = blocks
                    .iter()
                    .map(|b| {
                        let mut s = shape.to_vec();
                        s[0] = b.len() / row;
                        b.reshape(&s)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(LocalTensor::blocked(parts, shape.to_vec()))
            }
        }
    }

    /// Check that `other` lives on the same rank and device as `self`.
    pub(crate) fn same_rank(&self, op: &'static str, other: &LocalTensor) -> Result<()> {
        if self.rank != other.rank || self.device().id() != other.device().id() {
            return Err(Error::RankMismatch {
                op,
                a: self.rank,
                b: other.rank,
            });
        }
        Ok(())
    }

    /// Check the element type.
    pub(crate) fn expect_dtype(&self, op: &'static str, dtype: DType) -> Result<()> {
        if self.dtype != dtype {
            return Err(Error::DTypeMismatch {
                op,
                expected: dtype,
                got: self.dtype,
            });
        }
        Ok(())
    }

    /// Whether this tensor's buffer also backs a tensor of another rank: a
    /// replicated collective result on a shared-device mesh. Reading it is
    /// like reading any tensor; in-place updates (the optimiser kernels)
    /// refuse it, and [`LocalTensor::deep_copy`] gives a buffer of its own.
    pub fn is_shared_across_ranks(&self) -> bool {
        match &self.body {
            Body::Buffer(s) => s.shared_across_ranks.load(Ordering::Relaxed),
            Body::Blocks(b) => b.iter().any(|b| b.is_shared_across_ranks()),
        }
    }

    /// The buffer's version: bumped by every in-place write to it.
    pub fn version(&self) -> u64 {
        match &self.body {
            Body::Buffer(s) => s.derived.version(),
            // Changes whenever any block is written.
            Body::Blocks(b) => b.iter().map(LocalTensor::version).sum(),
        }
    }

    /// Record that the buffer is written in place (kernels writing it do
    /// this when recorded): drops what was derived from it.
    pub(crate) fn bump_version(&self) {
        match &self.body {
            Body::Buffer(s) => s.derived.bump(),
            Body::Blocks(b) => b.iter().for_each(LocalTensor::bump_version),
        }
    }

    /// The operand derived from this view (`key` names the derivation and
    /// must include the view's shape) for the buffer's current version, made
    /// by `make`; kept with the buffer from its second use until written.
    pub(crate) fn derived<T: Clone + Send + Sync + 'static>(
        &self,
        key: String,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        match &self.body {
            Body::Buffer(s) => s.derived.get_or_make(key, make),
            // Nothing binds a blocked view whole, so nothing is kept for it.
            Body::Blocks(_) => make(),
        }
    }

    /// [`Self::derived`] for a form that pays only on reuse: `None` (the
    /// ask noted) the first time between writes, then made and kept.
    /// Nothing is kept for a blocked view.
    pub(crate) fn derived_if_reused<T: Clone + Send + Sync + 'static>(
        &self,
        key: String,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Option<T>> {
        match &self.body {
            Body::Buffer(s) => s.derived.get_if_reused(key, make),
            Body::Blocks(_) => Ok(None),
        }
    }

    /// Drop the derived operand kept under `key`, if any.
    pub(crate) fn forget_derived(&self, key: &str) {
        if let Body::Buffer(s) = &self.body {
            s.derived.forget(key);
        }
    }

    /// Derived operands kept with the buffer (0 after a write).
    pub fn derived_count(&self) -> usize {
        match &self.body {
            Body::Buffer(s) => s.derived.len(),
            Body::Blocks(b) => b.iter().map(LocalTensor::derived_count).sum(),
        }
    }
}

/// The error of a one-binding operation handed a blocked tensor.
pub(crate) fn blocked_error(op: &'static str, t: &LocalTensor) -> Error {
    let (limit, limit_name) = t.device().block_limit();
    Error::TooLarge {
        op,
        what: "a tensor stored in row blocks (this operation binds it as one buffer; only copies, casts, element-wise ops, optimiser steps, embeddings and the tied head run per block)",
        needed: t.word_bytes(),
        limit,
        limit_name,
    }
}

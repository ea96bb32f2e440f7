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
//! The rank a tensor belongs to is in `rank.rs`, reading it back in
//! `staging.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.device.retire_buffer(self.size, b);
        }
    }
}

/// A dense, row-major tensor living on one rank. Cloning is cheap (shared buffer).
#[derive(Clone)]
pub struct LocalTensor {
    storage: Arc<Storage>,
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
            .finish()
    }
}

impl LocalTensor {
    pub(super) fn new(storage: Arc<Storage>, shape: Vec<usize>, dtype: DType, rank: usize) -> Self {
        LocalTensor {
            storage,
            shape,
            dtype,
            rank,
        }
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
        &self.storage.device
    }

    /// Old name of [`LocalTensor::device`].
    #[doc(hidden)]
    #[deprecated(note = "renamed to device()")]
    pub fn gpu(&self) -> &Arc<Device> {
        &self.storage.device
    }

    /// Bytes of data (len × the dtype's size).
    pub fn byte_len(&self) -> u64 {
        self.len() as u64 * self.dtype.size_bytes() as u64
    }

    /// [`LocalTensor::byte_len`] rounded up to whole 32-bit words: what
    /// copies, bindings and staging move (wgpu copies 4-byte multiples; an
    /// odd-length f16 tensor's buffer has room for the pad).
    pub(crate) fn word_bytes(&self) -> u64 {
        self.byte_len().next_multiple_of(4)
    }

    /// The buffer and its bookkeeping, shared by every view of it.
    pub(super) fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.storage
            .buffer
            .as_ref()
            .expect("buffer present until drop")
    }

    /// The same data under another shape with as many elements (no copy).
    pub fn reshape(&self, shape: &[usize]) -> Result<LocalTensor> {
        let n: usize = shape.iter().product();
        if n != self.len() {
            return Err(Error::shape(
                "reshape",
                format!("{} elements", self.len()),
                shape,
            ));
        }
        Ok(LocalTensor::new(
            self.storage.clone(),
            shape.to_vec(),
            self.dtype,
            self.rank,
        ))
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
        self.storage.shared_across_ranks.load(Ordering::Relaxed)
    }

    /// The buffer's version: bumped by every in-place write to it.
    pub fn version(&self) -> u64 {
        self.storage.derived.version()
    }

    /// Record that the buffer is written in place (kernels writing it do
    /// this when recorded): drops what was derived from it.
    pub(crate) fn bump_version(&self) {
        self.storage.derived.bump()
    }

    /// The operand derived from this view (`key` names the derivation and
    /// must include the view's shape) for the buffer's current version,
    /// made by `make` and kept with the buffer until it is written.
    pub(crate) fn derived<T: Clone + Send + Sync + 'static>(
        &self,
        key: String,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.storage.derived.get_or_make(key, make)
    }

    /// Derived operands kept with the buffer (0 after a write).
    pub fn derived_count(&self) -> usize {
        self.storage.derived.len()
    }
}

/// Record a copy of `count` elements from `src[src_off..]` into `dst[dst_off..]`
/// (same device; offsets in elements).
pub(crate) fn copy_region(
    src: &LocalTensor,
    src_off: usize,
    dst: &LocalTensor,
    dst_off: usize,
    count: usize,
) -> Result<()> {
    if src.device().id() != dst.device().id() {
        return Err(Error::RankMismatch {
            op: "copy",
            a: src.rank,
            b: dst.rank,
        });
    }
    if src_off + count > src.len() || dst_off + count > dst.len() {
        return Err(Error::invalid("copy", "copy region out of bounds"));
    }
    if src.dtype() != dst.dtype() {
        return Err(Error::DTypeMismatch {
            op: "copy",
            expected: dst.dtype(),
            got: src.dtype(),
        });
    }
    if count == 0 {
        return Ok(());
    }
    let size = src.dtype().size_bytes() as u64;
    let bytes = (count as u64 * size).next_multiple_of(4);
    // Whole words only: an odd f16 count is rounded up, which may only spill
    // into the destination's pad past its last element.
    let aligned = (src_off as u64 * size).is_multiple_of(4)
        && (dst_off as u64 * size).is_multiple_of(4)
        && (bytes == count as u64 * size || dst_off + count == dst.len());
    if !aligned {
        return Err(Error::invalid(
            "copy",
            "f16 regions must start at an even element and have an even length (or end the destination); cast to f32 to move odd f16 regions",
        ));
    }
    dst.bump_version();
    let (s, d) = (src.buffer().clone(), dst.buffer().clone());
    src.device().record(|enc| {
        enc.copy_buffer_to_buffer(
            &s,
            src_off as u64 * size,
            &d,
            dst_off as u64 * size,
            Some(bytes),
        )
    });
    Ok(())
}

//! [`Rank`] (one logical device) and [`LocalTensor`] (a buffer on one rank).
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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::gpu::{Gpu, KernelSpec};
use crate::error::{Error, Result};

/// Element type of a tensor. Every type is 4 bytes wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit signed integer (token ids, targets).
    I32,
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
        })
    }
}

/// One rank: a logical device with its own index in the mesh.
#[derive(Clone, Debug)]
pub struct Rank {
    pub(crate) index: usize,
    pub(crate) gpu: Arc<Gpu>,
}

impl Rank {
    /// This rank's index in its mesh.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The wgpu device this rank runs on (shared with other ranks in a
    /// shared-device mesh).
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Upload f32 data as a tensor of `shape` on this rank.
    pub fn upload(&self, shape: &[usize], data: &[f32]) -> Result<LocalTensor> {
        self.upload_bytes("upload", shape, DType::F32, bytemuck::cast_slice(data))
    }

    /// Upload i32 data (ids, targets) as a tensor of `shape` on this rank.
    pub fn upload_i32(&self, shape: &[usize], data: &[i32]) -> Result<LocalTensor> {
        self.upload_bytes("upload_i32", shape, DType::I32, bytemuck::cast_slice(data))
    }

    fn upload_bytes(
        &self,
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        bytes: &[u8],
    ) -> Result<LocalTensor> {
        let n: usize = shape.iter().product();
        if bytes.len() != n * 4 {
            return Err(Error::DataLength {
                op,
                shape: shape.into(),
                expected: n,
                got: bytes.len() / 4,
            });
        }
        self.gpu.check()?;
        let t = self.alloc_raw(op, shape, dtype)?;
        if !bytes.is_empty() {
            // Lands before the next submit's commands (see gpu.rs).
            self.gpu.queue.write_buffer(t.buffer(), 0, bytes);
        }
        Ok(t)
    }

    /// A tensor of zeros.
    pub fn zeros(&self, shape: &[usize], dtype: DType) -> Result<LocalTensor> {
        self.filled(shape, dtype, 0)
    }

    /// A tensor whose every element has the bit pattern `bits` (e.g. `1.0f32.to_bits()`).
    pub fn filled(&self, shape: &[usize], dtype: DType, bits: u32) -> Result<LocalTensor> {
        let t = self.alloc_raw("filled", shape, dtype)?;
        self.fill(t, bits)
    }

    /// Zeros in a buffer created for it rather than taken from the pool's free
    /// list, for state that lives across steps (see `Gpu::new_buffer`).
    pub(crate) fn zeros_persistent(&self, shape: &[usize], dtype: DType) -> Result<LocalTensor> {
        let t = self.alloc_with("zeros_persistent", shape, dtype, true)?;
        self.fill(t, 0)
    }

    fn fill(&self, t: LocalTensor, bits: u32) -> Result<LocalTensor> {
        let n = t.len();
        if n > 0 {
            if bits == 0 {
                let buf = t.buffer().clone();
                self.gpu
                    .record(|enc| enc.clear_buffer(&buf, 0, Some(n as u64 * 4)));
            } else {
                let data = vec![bits; n];
                self.gpu
                    .queue
                    .write_buffer(t.buffer(), 0, bytemuck::cast_slice(&data));
            }
        }
        Ok(t)
    }

    /// An uninitialised tensor for a kernel to write (poisoned when the
    /// device's poison mode is on).
    pub(crate) fn alloc(
        &self,
        op: &'static str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<LocalTensor> {
        let t = self.alloc_raw(op, shape, dtype)?;
        self.gpu.maybe_poison(t.buffer(), t.byte_len());
        Ok(t)
    }

    fn alloc_raw(&self, op: &'static str, shape: &[usize], dtype: DType) -> Result<LocalTensor> {
        self.alloc_with(op, shape, dtype, false)
    }

    fn alloc_with(
        &self,
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        fresh: bool,
    ) -> Result<LocalTensor> {
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::invalid(op, format!("shape {shape:?} overflows usize")))?;
        let bytes = (n as u64).saturating_mul(4);
        self.gpu.check_binding(op, bytes)?;
        let (size, buffer) = if fresh {
            self.gpu.new_buffer(bytes)
        } else {
            self.gpu.take_buffer(bytes)
        };
        Ok(LocalTensor {
            storage: Arc::new(Storage {
                buffer: Some(buffer),
                size,
                gpu: self.gpu.clone(),
                shared_across_ranks: AtomicBool::new(false),
            }),
            shape: shape.to_vec(),
            dtype,
            rank: self.index,
        })
    }
}

/// A pooled buffer; returned to its device's pool when the last tensor using it drops.
struct Storage {
    buffer: Option<wgpu::Buffer>,
    size: u64,
    gpu: Arc<Gpu>,
    /// Set once a tensor of another rank uses this buffer too (never cleared).
    shared_across_ranks: AtomicBool,
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.gpu.retire_buffer(self.size, b);
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

    /// The owning rank.
    pub fn rank(&self) -> Rank {
        Rank {
            index: self.rank,
            gpu: self.storage.gpu.clone(),
        }
    }

    /// The device it lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.storage.gpu
    }

    /// Bytes of data (len × 4).
    pub fn byte_len(&self) -> u64 {
        self.len() as u64 * 4
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
        Ok(LocalTensor {
            storage: self.storage.clone(),
            shape: shape.to_vec(),
            dtype: self.dtype,
            rank: self.rank,
        })
    }

    /// Check that `other` lives on the same rank and device as `self`.
    pub(crate) fn same_rank(&self, op: &'static str, other: &LocalTensor) -> Result<()> {
        if self.rank != other.rank || self.gpu().id() != other.gpu().id() {
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

    /// Read back as f32 (waits for the device).
    pub fn to_vec(&self) -> Result<Vec<f32>> {
        self.expect_dtype("to_vec", DType::F32)?;
        Ok(bytemuck::pod_collect_to_vec(
            &download_many(&[self])?.remove(0),
        ))
    }

    /// Read back as i32 (waits for the device).
    pub fn to_vec_i32(&self) -> Result<Vec<i32>> {
        self.expect_dtype("to_vec_i32", DType::I32)?;
        Ok(bytemuck::pod_collect_to_vec(
            &download_many(&[self])?.remove(0),
        ))
    }

    /// Whether this tensor's buffer also backs a tensor of another rank: a
    /// replicated collective result on a shared-device mesh. Reading it is
    /// like reading any tensor; in-place updates (the optimiser kernels)
    /// refuse it, and [`LocalTensor::deep_copy`] gives a buffer of its own.
    pub fn is_shared_across_ranks(&self) -> bool {
        self.storage.shared_across_ranks.load(Ordering::Relaxed)
    }

    /// The same bytes as a tensor of `rank`, without a copy; `rank` must be on
    /// this tensor's wgpu device (a shared-device mesh).
    pub(crate) fn alias_on(&self, rank: &Rank) -> Result<LocalTensor> {
        if rank.gpu.id() != self.gpu().id() {
            return Err(Error::RankMismatch {
                op: "alias",
                a: self.rank,
                b: rank.index,
            });
        }
        if rank.index != self.rank {
            self.storage
                .shared_across_ranks
                .store(true, Ordering::Relaxed);
        }
        Ok(LocalTensor {
            storage: self.storage.clone(),
            shape: self.shape.clone(),
            dtype: self.dtype,
            rank: rank.index,
        })
    }

    /// A copy in a fresh buffer on the same rank.
    pub fn deep_copy(&self) -> Result<LocalTensor> {
        let out = self.rank().alloc("copy", &self.shape, self.dtype)?;
        copy_region(self, 0, &out, 0, self.len())?;
        Ok(out)
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
    if src.gpu().id() != dst.gpu().id() {
        return Err(Error::RankMismatch {
            op: "copy",
            a: src.rank,
            b: dst.rank,
        });
    }
    if src_off + count > src.len() || dst_off + count > dst.len() {
        return Err(Error::invalid("copy", "copy region out of bounds"));
    }
    if count == 0 {
        return Ok(());
    }
    let (s, d) = (src.buffer().clone(), dst.buffer().clone());
    src.gpu().record(|enc| {
        enc.copy_buffer_to_buffer(
            &s,
            src_off as u64 * 4,
            &d,
            dst_off as u64 * 4,
            Some(count as u64 * 4),
        )
    });
    Ok(())
}

/// Read several tensors (on any ranks and devices) back to the host with one
/// wait per device: copy each into a MAP_READ staging buffer, submit every
/// device, map all, then poll each device once.
pub fn download_many(tensors: &[&LocalTensor]) -> Result<Vec<Vec<u8>>> {
    let mut x = super::staging::Exchange::with_capacity(tensors.len(), 0);
    for t in tensors {
        x.read(t)?;
    }
    let mapped = x.map()?;
    Ok((0..tensors.len())
        .map(|i| mapped.input(i).to_vec())
        .collect())
}

/// A compute dispatch: kernel, uniform parameters, buffers and grid.
pub(crate) struct Dispatch<'a> {
    pub spec: &'a KernelSpec,
    /// Bytes of the uniform at binding 0 (padded to 16 here).
    pub params: &'a [u8],
    /// Storage buffers in binding order (1, 2, ...).
    pub buffers: &'a [&'a LocalTensor],
    /// Number of workgroups (linear); folded into x/y past the per-dimension limit.
    pub workgroups: u64,
}

/// Split `n` workgroups into an (x, y) grid within the per-dimension limit.
/// Shaders recover the linear id as `wg.y * num_workgroups.x + wg.x` and skip
/// ids past their work.
pub(crate) fn fold_workgroups(n: u64, max_dim: u32) -> Result<(u32, u32)> {
    let max = max_dim as u64;
    if n <= max {
        return Ok((n as u32, 1));
    }
    let y = n.div_ceil(max);
    if y > max {
        return Err(Error::TooLarge {
            op: "dispatch",
            what: "a kernel grid",
            needed: n,
            limit: max * max,
            limit_name: "max_compute_workgroups_per_dimension squared",
        });
    }
    Ok((max as u32, y as u32))
}

impl Dispatch<'_> {
    /// Record the dispatch into the device's pending encoder.
    pub(crate) fn record(&self, gpu: &Arc<Gpu>) -> Result<()> {
        if self.workgroups == 0 {
            return Ok(());
        }
        gpu.check()?;
        debug_assert_eq!(self.buffers.len(), self.spec.bindings.len());
        for b in self.buffers {
            gpu.check_binding(self.spec.entry, b.byte_len())?;
        }
        let (x, y) = fold_workgroups(
            self.workgroups,
            gpu.limits().max_compute_workgroups_per_dimension,
        )?;
        let pipeline = gpu.pipeline(self.spec)?;
        // Uniform parameters: a pooled buffer written before the next submit.
        let mut params = self.params.to_vec();
        params.resize(params.len().max(16).div_ceil(16) * 16, 0);
        let (usize_, ubuf) = gpu.take_buffer(params.len() as u64);
        gpu.queue.write_buffer(&ubuf, 0, &params);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &ubuf,
                offset: 0,
                size: std::num::NonZeroU64::new(params.len() as u64),
            }),
        }];
        for (i, b) in self.buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry {
                binding: i as u32 + 1,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: b.buffer(),
                    offset: 0,
                    size: std::num::NonZeroU64::new(b.byte_len().max(4)),
                }),
            });
        }
        let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(self.spec.entry),
            layout: &pipeline.layout,
            entries: &entries,
        });
        gpu.record(|enc| {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(self.spec.entry),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(x, y, 1);
        });
        gpu.retire_buffer(usize_, ubuf);
        Ok(())
    }
}

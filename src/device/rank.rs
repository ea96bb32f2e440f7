//! [`Rank`]: one logical device of a mesh, where its tensors come from
//! (uploads, fills, the fresh outputs kernels write), and how a tensor names
//! or changes its rank.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::blocks::row_layout;
use super::context::Device;
use super::copy::copy_region;
use super::tensor::{LocalTensor, Storage};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::quant::QuantType;

/// One rank: a logical device with its own index in the mesh.
#[derive(Clone, Debug)]
pub struct Rank {
    pub(crate) index: usize,
    pub(crate) device: Arc<Device>,
}

impl Rank {
    /// This rank's index in its mesh.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The wgpu device this rank runs on (shared with other ranks in a
    /// shared-device mesh).
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Upload f32 data as a tensor of `shape` on this rank.
    pub fn upload(&self, shape: &[usize], data: &[f32]) -> Result<LocalTensor> {
        self.upload_bytes("upload", shape, DType::F32, bytemuck::cast_slice(data))
    }

    /// Upload i32 data (ids, targets) as a tensor of `shape` on this rank.
    pub fn upload_i32(&self, shape: &[usize], data: &[i32]) -> Result<LocalTensor> {
        self.upload_bytes("upload_i32", shape, DType::I32, bytemuck::cast_slice(data))
    }

    /// Upload f16 data as a tensor of `shape` on this rank (needs an adapter
    /// with `SHADER_F16`, see [`Device::has_f16`]).
    pub fn upload_f16(&self, shape: &[usize], data: &[half::f16]) -> Result<LocalTensor> {
        self.upload_bytes("upload_f16", shape, DType::F16, bytemuck::cast_slice(data))
    }

    /// Upload bf16 data as a tensor of `shape` on this rank (any adapter).
    pub fn upload_bf16(&self, shape: &[usize], data: &[half::bf16]) -> Result<LocalTensor> {
        self.upload_bytes(
            "upload_bf16",
            shape,
            DType::BF16,
            bytemuck::cast_slice(data),
        )
    }

    pub(crate) fn upload_bytes(
        &self,
        op: &'static str,
        shape: &[usize],
        dtype: DType,
        bytes: &[u8],
    ) -> Result<LocalTensor> {
        if let DType::Quant(q) = dtype {
            return Err(Error::invalid(
                op,
                format!("{q} weights are uploaded from their blocks (Rank::upload_quant)"),
            ));
        }
        let n: usize = shape.iter().product();
        let size = dtype.size_bytes();
        if bytes.len() != n * size {
            return Err(Error::DataLength {
                op,
                shape: shape.into(),
                expected: n,
                got: bytes.len() / size,
            });
        }
        self.device.check()?;
        let t = self.alloc_raw(op, shape, dtype)?;
        let mut at = 0;
        for b in t.blocks() {
            let part = &bytes[at..at + b.byte_len() as usize];
            at += part.len();
            if part.is_empty() {
                continue;
            }
            // Lands before the next submit's commands (see recording.rs);
            // wgpu writes whole words, so an odd f16 count gets a zero pad.
            let buf = b.buffer(op)?;
            if part.len().is_multiple_of(4) {
                self.device.queue.write_buffer(buf, 0, part);
            } else {
                let mut padded = part.to_vec();
                padded.resize(part.len().next_multiple_of(4), 0);
                self.device.queue.write_buffer(buf, 0, &padded);
            }
            self.device.staged(part.len() as u64);
        }
        Ok(t)
    }

    /// A quantized `[rows, k]` weight from its blocks in GGUF order
    /// (`q.bytes_for(rows, k)` bytes: each row `q.blocks_per_row(k)`
    /// blocks), laid out for the kernels (`quant::layout`); past one
    /// binding it is stored in row blocks, each laid out on its own.
    pub fn upload_quant(
        &self,
        shape: &[usize],
        q: QuantType,
        blocks: &[u8],
    ) -> Result<LocalTensor> {
        const OP: &str = "Rank::upload_quant";
        let (_, k) = q.check_weight(OP, shape, blocks)?;
        let row_bytes = q.bytes_for(1, k);
        self.device.check()?;
        let t = self.alloc_raw(OP, shape, DType::Quant(q))?;
        let mut at = 0;
        for b in t.blocks() {
            let part = &blocks[at..at + b.shape()[0] * row_bytes];
            at += part.len();
            if part.is_empty() {
                continue;
            }
            let bytes = crate::quant::layout::to_device(q, part);
            self.device.queue.write_buffer(b.buffer(OP)?, 0, &bytes);
            self.device.staged(bytes.len() as u64);
        }
        Ok(t)
    }

    /// A tensor of zeros.
    pub fn zeros(&self, shape: &[usize], dtype: DType) -> Result<LocalTensor> {
        self.filled(shape, dtype, 0)
    }

    /// A tensor whose every element has the bit pattern `bits` (e.g.
    /// `1.0f32.to_bits()`; for f16 the low 16 bits, e.g. `f16::ONE.to_bits()`).
    pub fn filled(&self, shape: &[usize], dtype: DType, bits: u32) -> Result<LocalTensor> {
        if dtype.size_bytes() == 2 && bits > 0xFFFF {
            return Err(Error::invalid(
                "filled",
                format!(
                    "{bits:#x} is not a {dtype} bit pattern (16 bits); use e.g. half::{dtype}::ONE.to_bits()"
                ),
            ));
        }
        let t = self.alloc_raw("filled", shape, dtype)?;
        self.fill(t, bits)
    }

    /// Zeros in buffers created for them and never written: WebGPU gives a
    /// new buffer zeros, and wgpu clears it only when first used, so a
    /// value replaced before any use (a model built to load over: its f32
    /// weights replaced by a checkpoint's, or by quantized blocks) never
    /// touches its pages, which on a CPU adapter stay out of the
    /// process's resident memory.
    pub(crate) fn zeros_untouched(&self, shape: &[usize], dtype: DType) -> Result<LocalTensor> {
        self.alloc_with("zeros", shape, dtype, true)
    }

    /// Zeros in a buffer created for it rather than taken from the pool's free
    /// list, for state that lives across steps (see `Device::new_buffer`).
    pub(crate) fn zeros_persistent(&self, shape: &[usize], dtype: DType) -> Result<LocalTensor> {
        let t = self.alloc_with("zeros_persistent", shape, dtype, true)?;
        self.fill(t, 0)
    }

    fn fill(&self, t: LocalTensor, bits: u32) -> Result<LocalTensor> {
        for b in t.blocks() {
            let (n, words) = (b.len(), b.word_bytes());
            if n == 0 {
                continue;
            }
            let buf = b.buffer("fill")?.clone();
            if bits == 0 {
                self.device
                    .record(|enc| enc.clear_buffer(&buf, 0, Some(words)));
            } else {
                let word = match t.dtype() {
                    DType::F16 | DType::BF16 => bits * 0x1_0001,
                    DType::F32 | DType::I32 | DType::Quant(_) => bits,
                };
                let data = vec![word; words as usize / 4];
                self.device
                    .queue
                    .write_buffer(&buf, 0, bytemuck::cast_slice(&data));
            }
        }
        Ok(t)
    }

    /// Rows of each block a tensor of `shape` and `dtype` is stored in on
    /// this rank (`None`: one buffer); see `blocks.rs`.
    pub(crate) fn row_blocks(&self, shape: &[usize], dtype: DType) -> Result<Option<Vec<usize>>> {
        let bytes = dtype.storage_bytes(shape) as u64;
        row_layout(&self.device, "row_blocks", (shape, dtype), bytes)
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
        for b in t.blocks() {
            self.device.maybe_poison(b.buffer(op)?, b.word_bytes());
        }
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
        self.device.check_dtype(op, dtype)?;
        let bytes = match dtype {
            DType::Quant(_) => dtype.storage_bytes(shape) as u64,
            _ => (n as u64)
                .saturating_mul(dtype.size_bytes().max(1) as u64)
                .next_multiple_of(4),
        };
        if let Some(rows) = row_layout(&self.device, op, (shape, dtype), bytes)? {
            let blocks = rows
                .into_iter()
                .map(|r| {
                    let mut s = shape.to_vec();
                    s[0] = r;
                    self.alloc_with(op, &s, dtype, fresh)
                })
                .collect::<Result<Vec<_>>>()?;
            return LocalTensor::from_blocks(blocks);
        }
        self.device.check_binding(op, bytes)?;
        let (size, buffer) = if fresh {
            self.device.pool.create(bytes)
        } else {
            self.device.pool.take(bytes)
        };
        let storage = Arc::new(Storage {
            buffer: Some(buffer),
            size,
            device: self.device.clone(),
            shared_across_ranks: AtomicBool::new(false),
            derived: Default::default(),
            claimed: Default::default(),
        });
        Ok(LocalTensor::new(storage, shape.to_vec(), dtype, self.index))
    }
}

impl LocalTensor {
    /// The owning rank.
    pub fn rank(&self) -> Rank {
        Rank {
            index: self.rank_index(),
            device: self.device().clone(),
        }
    }

    /// The same bytes as a tensor of `rank`, without a copy; `rank` must be on
    /// this tensor's wgpu device (a shared-device mesh).
    pub(crate) fn alias_on(&self, rank: &Rank) -> Result<LocalTensor> {
        if rank.device.id() != self.device().id() {
            return Err(Error::RankMismatch {
                op: "alias",
                a: self.rank_index(),
                b: rank.index,
            });
        }
        let Some(storage) = self.storage() else {
            let blocks = self
                .blocks()
                .iter()
                .map(|b| b.alias_on(rank))
                .collect::<Result<Vec<_>>>()?;
            return LocalTensor::from_blocks(blocks);
        };
        if rank.index != self.rank_index() {
            storage.shared_across_ranks.store(true, Ordering::Relaxed);
        }
        Ok(LocalTensor::new(
            storage.clone(),
            self.shape().to_vec(),
            self.dtype(),
            rank.index,
        ))
    }

    /// This tensor followed by its aliases on each of `rest` (ranks of its
    /// device): one value every rank reads from one buffer.
    pub(crate) fn with_aliases_on(self, rest: &[Rank]) -> Result<Vec<LocalTensor>> {
        let mut all = Vec::with_capacity(rest.len() + 1);
        for r in rest {
            all.push(self.alias_on(r)?);
        }
        all.insert(0, self);
        Ok(all)
    }

    /// A copy in a fresh buffer on the same rank.
    pub fn deep_copy(&self) -> Result<LocalTensor> {
        let out = self.rank().alloc("copy", self.shape(), self.dtype())?;
        copy_region(self, 0, &out, 0, self.len())?;
        Ok(out)
    }
}

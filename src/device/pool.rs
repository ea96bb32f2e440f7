//! Buffer pools of one wgpu device: storage buffers for tensors (bucketed by
//! size, reused step after step), MAP_READ staging for downloads and
//! MAP_WRITE staging for uploads. A steady training loop of a small model
//! allocates nothing; buffers of [`POOL_MAX_BYTES`] or more are destroyed
//! when dropped rather than pooled.
//!
//! A dropped tensor's buffer is "retired" while a recorded but unsubmitted
//! encoder may still use it, and only becomes free after that submit (the
//! device calls [`BufferPool::release_retired`] under its encoder lock).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

#[derive(Default)]
struct Lists {
    /// Storage buffers ready for reuse, by byte size.
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    /// Dropped while the pending encoder may still use them.
    retired: Vec<(u64, wgpu::Buffer)>,
    /// Large buffers dropped while the pending encoder may still use them,
    /// destroyed after its submit instead of pooled.
    doomed: Vec<(u64, wgpu::Buffer)>,
    /// MAP_READ staging buffers ready for reuse, by byte size.
    read_staging: HashMap<u64, Vec<wgpu::Buffer>>,
    /// MAP_WRITE upload staging buffers ready for reuse (unmapped), by byte size.
    write_staging: HashMap<u64, Vec<wgpu::Buffer>>,
    /// Buffers created since the device was opened (pool misses).
    allocations: u64,
    /// Bytes of every storage buffer that exists (in use, free or retired).
    storage_bytes: u64,
    /// Bytes of the storage buffers in `free` and `retired`.
    idle_bytes: u64,
    /// Bytes of the staging buffers that exist.
    staging_bytes: u64,
    /// The most `storage_bytes + staging_bytes` reached since the device
    /// was opened or [`Device::reset_peak_memory`].
    ///
    /// [`Device::reset_peak_memory`]: crate::Device::reset_peak_memory
    peak_bytes: u64,
}

impl Lists {
    /// Note a new buffer of `size` bytes in `storage_bytes` or `staging_bytes`.
    fn grew(&mut self, size: u64, staging: bool) {
        self.allocations += 1;
        if staging {
            self.staging_bytes += size;
        } else {
            self.storage_bytes += size;
        }
        self.peak_bytes = self.peak_bytes.max(self.storage_bytes + self.staging_bytes);
    }
}

/// Device memory held by one wgpu device's pools, in bytes. On CPU adapters
/// (lavapipe, llvmpipe) this memory is the process's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Storage buffers that back live tensors (or wait for a submit; large
    /// ones waiting to be destroyed count here).
    pub in_use: u64,
    /// Storage buffers pooled for reuse ([`Device::trim_pool`] frees them).
    ///
    /// [`Device::trim_pool`]: crate::Device::trim_pool
    pub pooled: u64,
    /// Download and upload staging buffers.
    pub staging: u64,
    /// The most bytes held at once (all three kinds) since the device was
    /// opened or [`Device::reset_peak_memory`].
    ///
    /// [`Device::reset_peak_memory`]: crate::Device::reset_peak_memory
    pub peak: u64,
}

impl MemoryStats {
    /// Everything held: in use, pooled and staging.
    pub fn total(&self) -> u64 {
        self.in_use + self.pooled + self.staging
    }
}

/// The pools of one device.
pub(crate) struct BufferPool {
    device: wgpu::Device,
    lists: Mutex<Lists>,
}

fn pop(map: &mut HashMap<u64, Vec<wgpu::Buffer>>, size: u64) -> Option<wgpu::Buffer> {
    map.get_mut(&size).and_then(Vec::pop)
}

/// Buffers of at least this many bytes are not pooled: a GPT-2 step makes
/// large temporaries of many sizes (logits, packed weights), and keeping one
/// of each held more memory than the model. Small ones are pooled, so a
/// steady loop of a small model allocates nothing; large ones are few, so
/// creating them again costs little next to the work on them.
pub(crate) const POOL_MAX_BYTES: u64 = 16 << 20;

/// Give a large buffer's memory back now (its last submitted use still
/// completes first: wgpu frees it once that work is done).
fn destroy(l: &mut Lists, size: u64, buffer: wgpu::Buffer) {
    l.storage_bytes -= size;
    buffer.destroy();
}

/// Pool buckets: exact sizes rounded up to 256 bytes, so the same shapes reuse
/// the same buffers step after step.
fn bucket(bytes: u64) -> u64 {
    bytes.max(4).div_ceil(256) * 256
}

impl BufferPool {
    pub(super) fn new(device: wgpu::Device) -> Self {
        BufferPool {
            device,
            lists: Mutex::default(),
        }
    }

    fn lists(&self) -> MutexGuard<'_, Lists> {
        // Pool lists stay consistent even if a holder panicked.
        self.lists.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Buffers created so far (pool misses).
    pub(super) fn allocations(&self) -> u64 {
        self.lists().allocations
    }

    /// Bytes held, by kind.
    pub(super) fn memory(&self) -> MemoryStats {
        let l = self.lists();
        MemoryStats {
            in_use: l.storage_bytes - l.idle_bytes,
            pooled: l.idle_bytes,
            staging: l.staging_bytes,
            peak: l.peak_bytes,
        }
    }

    /// Start the peak again from what is held now.
    pub(super) fn reset_peak(&self) {
        let mut l = self.lists();
        l.peak_bytes = l.storage_bytes + l.staging_bytes;
    }

    /// Drop every pooled buffer that nothing uses.
    pub(super) fn trim(&self) {
        let mut l = self.lists();
        let sizes = |m: &HashMap<u64, Vec<wgpu::Buffer>>| -> u64 {
            m.iter().map(|(s, v)| s * v.len() as u64).sum()
        };
        let (free, staging) = (
            sizes(&l.free),
            sizes(&l.read_staging) + sizes(&l.write_staging),
        );
        l.storage_bytes -= free;
        l.idle_bytes -= free;
        l.staging_bytes -= staging;
        l.free.clear();
        l.read_staging.clear();
        l.write_staging.clear();
    }

    /// A storage buffer of at least `bytes` from the pool (or a new one), and its size.
    pub(crate) fn take(&self, bytes: u64) -> (u64, wgpu::Buffer) {
        let size = bucket(bytes);
        let mut l = self.lists();
        if let Some(b) = pop(&mut l.free, size) {
            l.idle_bytes -= size;
            return (size, b);
        }
        drop(l);
        self.create(bytes)
    }

    /// A new storage buffer of at least `bytes`, bypassing the free list; it
    /// joins the pool when dropped. For long-lived state created mid-training
    /// (optimiser moments): taking free pooled buffers for it would leave the
    /// next step short of the temporaries the previous one used, so that step
    /// would allocate again.
    pub(crate) fn create(&self, bytes: u64) -> (u64, wgpu::Buffer) {
        let size = bucket(bytes);
        {
            self.lists().grew(size, false);
        }
        let b = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-tp pooled"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::UNIFORM
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        (size, b)
    }

    /// Take back a storage buffer; while an encoder is `pending` it waits in
    /// the retired list for [`BufferPool::release_retired`].
    /// Buffers of [`POOL_MAX_BYTES`] or more are destroyed instead (after
    /// that submit).
    pub(super) fn retire(&self, size: u64, buffer: wgpu::Buffer, pending: bool) {
        let mut l = self.lists();
        if size >= POOL_MAX_BYTES {
            if pending {
                l.doomed.push((size, buffer));
            } else {
                destroy(&mut l, size, buffer);
            }
            return;
        }
        l.idle_bytes += size;
        if pending {
            l.retired.push((size, buffer));
        } else {
            l.free.entry(size).or_default().push(buffer);
        }
    }

    /// After a submit: every retired buffer is safe to hand out again.
    pub(super) fn release_retired(&self) {
        let mut l = self.lists();
        let retired = std::mem::take(&mut l.retired);
        for (size, b) in retired {
            l.free.entry(size).or_default().push(b);
        }
        for (size, b) in std::mem::take(&mut l.doomed) {
            destroy(&mut l, size, b);
        }
    }

    /// A MAP_READ staging buffer of `size` bytes (a multiple of 4).
    pub(crate) fn take_read_staging(&self, size: u64) -> wgpu::Buffer {
        let size = size.max(4);
        let mut l = self.lists();
        if let Some(b) = pop(&mut l.read_staging, size) {
            return b;
        }
        l.grew(size, true);
        drop(l);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-tp staging"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// A staging buffer of `size` bytes is dropped rather than given back
    /// (an exchange that failed midway): it no longer counts as held.
    pub(crate) fn forget_staging(&self, size: u64) {
        let mut l = self.lists();
        l.staging_bytes = l.staging_bytes.saturating_sub(size);
    }

    /// Give a read staging buffer (unmapped) back.
    pub(crate) fn return_read_staging(&self, buffer: wgpu::Buffer) {
        let size = buffer.size();
        self.lists()
            .read_staging
            .entry(size)
            .or_default()
            .push(buffer);
    }

    /// A MAP_WRITE | COPY_SRC upload staging buffer of `size` bytes (a
    /// multiple of 4) and whether it is mapped already: a fresh one is created
    /// mapped; a pooled one must be mapped with `map_async(Write)` first.
    ///
    /// Host-staged collectives write their results straight into these and
    /// copy them into the output on the device, instead of `write_buffer`,
    /// which allocates a fresh staging buffer inside wgpu on every call.
    pub(crate) fn take_write_staging(&self, size: u64) -> (wgpu::Buffer, bool) {
        let size = size.max(4);
        let mut l = self.lists();
        if let Some(b) = pop(&mut l.write_staging, size) {
            return (b, false);
        }
        l.grew(size, true);
        drop(l);
        let b = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-tp upload staging"),
            size,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        (b, true)
    }

    /// Give an upload staging buffer back. It must be unmapped and every
    /// command that uses it already submitted (mapping it again then waits
    /// for those commands, which wgpu tracks).
    pub(crate) fn return_write_staging(&self, buffer: wgpu::Buffer) {
        let size = buffer.size();
        self.lists()
            .write_staging
            .entry(size)
            .or_default()
            .push(buffer);
    }
}

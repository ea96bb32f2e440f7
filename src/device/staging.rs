//! Host-staged exchange: the one device → host → device path, behind
//! reading tensors back (`readback.rs`), the host-staged collectives and the
//! host-staged ring steps.
//!
//! One [`Exchange`] stages every input and every output of a collective at
//! once: each input is copied into a pooled MAP_READ staging buffer, each
//! output gets a pooled tensor and a pooled MAP_WRITE staging buffer; then
//! [`Exchange::map`] submits every device, maps everything and waits **once
//! per device**. A caller that wants to record more work before waiting (a
//! ring step overlapped with GEMMs) splits that into [`Exchange::submit`]
//! and [`InFlight::wait`]. The caller reads the inputs straight from the mapped views
//! and writes the results straight into the mapped output views (no host
//! `Vec` in between); [`Mapped::finish`] unmaps, records one
//! `copy_buffer_to_buffer` per output and submits (no wait). Staging buffers
//! go back to their device's pool, so a steady loop allocates nothing, on the
//! host or on the device.

use std::sync::Arc;

use super::context::{Device, distinct_devices};
use super::rank::Rank;
use super::tensor::LocalTensor;
use super::wait::{Signal, block_on};
use crate::element::DType;
use crate::error::{Error, Result};

struct Down {
    device: Arc<Device>,
    staging: wgpu::Buffer,
    bytes: usize,
    rank: usize,
}

struct Up {
    device: Arc<Device>,
    /// `None` for a small output, written through `queue.write_buffer_with`.
    staging: Option<wgpu::Buffer>,
    mapped: bool,
    out: LocalTensor,
}

/// Outputs smaller than this go through `queue.write_buffer_with` (wgpu's own
/// staging, no map round trip); larger ones through pooled MAP_WRITE staging,
/// where wgpu's fresh per-call staging allocation would cost more than the
/// extra map.
const POOLED_UPLOAD_MIN_BYTES: u64 = 1024 * 1024;

/// A writable view of (part of) an output.
pub(crate) enum OutView {
    /// A mapped pooled staging buffer.
    Mapped(wgpu::BufferViewMut),
    /// wgpu's queue staging, copied at the next submit.
    Queue(wgpu::QueueWriteBufferView),
}

impl OutView {
    /// Write-only bytes `bounds` of the view.
    pub(crate) fn slice<S: std::ops::RangeBounds<usize>>(
        &mut self,
        bounds: S,
    ) -> wgpu::WriteOnly<'_, [u8]> {
        match self {
            OutView::Mapped(v) => v.slice(bounds),
            OutView::Queue(v) => v.slice(bounds),
        }
    }
}

/// Inputs to read back and outputs to fill, before mapping.
#[derive(Default)]
pub(crate) struct Exchange {
    downs: Vec<Down>,
    ups: Vec<Up>,
}

impl Exchange {
    /// Room for `inputs` reads and `outputs` writes.
    pub(crate) fn with_capacity(inputs: usize, outputs: usize) -> Self {
        Exchange {
            downs: Vec::with_capacity(inputs),
            ups: Vec::with_capacity(outputs),
        }
    }

    /// Record a copy of `t` into a staging buffer (read back by [`Exchange::map`]).
    pub(crate) fn read(&mut self, t: &LocalTensor) -> Result<()> {
        let device = t.device();
        device.check()?;
        let (bytes, words) = (t.byte_len(), t.word_bytes());
        // Blocked tensors are read block by block (`download_many`).
        let src = t.buffer("exchange")?.clone();
        let staging = device.pool.take_read_staging(words.max(4));
        if bytes > 0 {
            let dst = staging.clone();
            device.record(|enc| enc.copy_buffer_to_buffer(&src, 0, &dst, 0, Some(words)));
        }
        self.downs.push(Down {
            device: device.clone(),
            staging,
            bytes: bytes as usize,
            rank: t.rank_index(),
        });
        Ok(())
    }

    /// A fresh output tensor on `rank`, filled from its mapped view.
    pub(crate) fn write(&mut self, rank: &Rank, shape: &[usize], dtype: DType) -> Result<()> {
        let out = rank.alloc("exchange", shape, dtype)?;
        // A collective's output is one buffer: a blocked one is an error here.
        out.buffer("exchange")?;
        let (staging, mapped) = if out.byte_len() >= POOLED_UPLOAD_MIN_BYTES {
            let (b, mapped) = rank.device.pool.take_write_staging(out.word_bytes());
            (Some(b), mapped)
        } else {
            (None, false)
        };
        self.ups.push(Up {
            device: rank.device.clone(),
            staging,
            mapped,
            out,
        });
        Ok(())
    }

    /// Submit every device, map every staging buffer, wait once per device
    /// (blocking; [`Exchange::map_async`] is the core).
    pub(crate) fn map(self) -> Result<Mapped> {
        self.submit().wait()
    }

    /// [`Exchange::map`] as a future: in a browser, the only way to read back.
    pub(crate) async fn map_async(self) -> Result<Mapped> {
        self.submit().ready().await
    }

    /// Submit every device (so ranks copy together) and start mapping every
    /// staging buffer, without waiting: work recorded before
    /// [`InFlight::wait`] runs meanwhile.
    pub(crate) fn submit(mut self) -> InFlight {
        let devices = distinct_devices(
            self.downs
                .iter()
                .map(|d| &d.device)
                .chain(self.ups.iter().map(|u| &u.device)),
        );
        let waits = devices
            .into_iter()
            .map(|d| {
                let index = d.flush_index();
                (d, index)
            })
            .collect();
        let signal = Signal::default();
        for d in &self.downs {
            d.staging
                .slice(..)
                .map_async(wgpu::MapMode::Read, signal.map_callback());
        }
        for u in &mut self.ups {
            if let Some(b) = &u.staging
                && !u.mapped
            {
                b.slice(..)
                    .map_async(wgpu::MapMode::Write, signal.map_callback());
            }
        }
        InFlight {
            mapped: Mapped {
                downs: std::mem::take(&mut self.downs),
                ups: std::mem::take(&mut self.ups),
                inputs: Vec::new(),
                downs_mapped: false,
            },
            waits,
            signal,
        }
    }
}

/// A submitted [`Exchange`] whose staging buffers are being mapped.
pub(crate) struct InFlight {
    mapped: Mapped,
    /// Per device: the submission that holds the staging copies.
    waits: Vec<(Arc<Device>, wgpu::SubmissionIndex)>,
    /// Completed by the staging buffers' map callbacks.
    signal: Signal,
}

impl InFlight {
    /// Submit what was recorded since [`Exchange::submit`] (so it runs
    /// meanwhile), wait for the staging copies only, and hand out the views
    /// (blocking; [`InFlight::ready`] is the core).
    pub(crate) fn wait(self) -> Result<Mapped> {
        block_on("read back", self.ready())
    }

    /// [`InFlight::wait`] as a future: the map callbacks complete it (on
    /// native after a blocking poll of each device, in a browser from the
    /// page's event loop).
    pub(crate) async fn ready(self) -> Result<Mapped> {
        let InFlight {
            mut mapped,
            waits,
            signal,
        } = self;
        for (d, _) in &waits {
            d.flush();
        }
        for (d, index) in &waits {
            d.settle(index.clone())?;
        }
        let failed = signal.done().await;
        // After the callbacks: in a browser errors arrive with them.
        for (d, _) in &waits {
            d.check()?;
        }
        let rank = mapped
            .downs
            .first()
            .map(|d| d.rank)
            .or(mapped.ups.first().map(|u| u.out.rank_index()))
            .unwrap_or(0);
        if failed {
            return Err(Error::Wgpu {
                rank,
                message: "mapping a staging buffer failed".into(),
            });
        }
        mapped.downs_mapped = true;
        for u in &mut mapped.ups {
            u.mapped = u.staging.is_some();
        }
        for d in &mapped.downs {
            let view = d
                .staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Wgpu {
                    rank: d.rank,
                    message: format!("staging: {e}"),
                })?;
            mapped.inputs.push(view);
        }
        Ok(mapped)
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // Only reached on an error before `map`: nothing is mapped but fresh
        // upload stagings (created mapped), which must not go back mapped.
        for d in self.downs.drain(..) {
            d.device.pool.return_read_staging(d.staging);
        }
        for u in self.ups.drain(..) {
            if let Some(b) = u.staging
                && !u.mapped
            {
                u.device.pool.return_write_staging(b);
            }
        }
    }
}

/// Every staging buffer of an [`Exchange`], mapped.
pub(crate) struct Mapped {
    downs: Vec<Down>,
    ups: Vec<Up>,
    inputs: Vec<wgpu::BufferView>,
    /// Whether the read stagings are mapped (false only on an error in `map`).
    downs_mapped: bool,
}

impl Mapped {
    /// The bytes of input `i` (in the order of [`Exchange::read`]).
    pub(crate) fn input(&self, i: usize) -> &[u8] {
        &self.inputs[i][..self.downs[i].bytes]
    }

    /// Number of outputs.
    pub(crate) fn outputs(&self) -> usize {
        self.ups.len()
    }

    /// Bytes of output `k`'s tensor.
    pub(crate) fn output_len(&self, k: usize) -> usize {
        self.ups[k].out.byte_len() as usize
    }

    /// A writable view of `bytes` of output `k` (the whole output when
    /// `bytes` is empty). Views of disjoint ranges may be written from
    /// different threads; `bytes.start` must be a multiple of 8. Every view
    /// must be dropped before [`Mapped::finish`].
    pub(crate) fn view(&self, k: usize, bytes: std::ops::Range<usize>) -> Result<OutView> {
        let u = &self.ups[k];
        let err = |message: String| Error::Wgpu {
            rank: u.out.rank_index(),
            message,
        };
        let bytes = if bytes.is_empty() {
            0..u.out.byte_len() as usize
        } else {
            bytes
        };
        match &u.staging {
            Some(b) => {
                let slice = if bytes.is_empty() {
                    b.slice(..)
                } else {
                    b.slice(bytes.start as u64..bytes.end as u64)
                };
                let v = slice
                    .get_mapped_range_mut()
                    .map_err(|e| err(format!("staging: {e}")))?;
                Ok(OutView::Mapped(v))
            }
            None => {
                let size = (bytes.len().max(4) as u64).try_into().expect("non-zero");
                // An empty output still gets a 4-byte view (inside its pooled
                // buffer of >= 256 bytes); the caller writes nothing to it.
                let (buf, start) = (u.out.buffer("exchange")?, bytes.start as u64);
                let v = u
                    .device
                    .queue
                    .write_buffer_with(buf, start, size)
                    .ok_or_else(|| err("write_buffer_with refused the upload".into()))?;
                Ok(OutView::Queue(v))
            }
        }
    }

    /// Unmap, record the copy of each output's staging into its tensor, submit
    /// (no wait), and return the outputs in order.
    pub(crate) fn finish(mut self) -> Result<Vec<LocalTensor>> {
        self.inputs.clear();
        for u in &mut self.ups {
            // Queue-staged outputs land at their device's next submit.
            let Some(b) = &u.staging else { continue };
            b.unmap();
            u.mapped = false;
            let bytes = u.out.word_bytes();
            if bytes > 0 {
                let (src, dst) = (b.clone(), u.out.buffer("exchange")?.clone());
                u.device
                    .record(|enc| enc.copy_buffer_to_buffer(&src, 0, &dst, 0, Some(bytes)));
            }
        }
        // The stagings go back to the pool below; submit first so a later
        // `map_async` on one cannot precede the copy that reads it.
        for d in distinct_devices(
            self.ups
                .iter()
                .filter(|u| u.staging.is_some())
                .map(|u| &u.device),
        ) {
            d.flush();
        }
        let outs = self.ups.iter().map(|u| u.out.clone()).collect();
        Ok(outs)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        self.inputs.clear();
        for d in self.downs.drain(..) {
            if self.downs_mapped {
                d.staging.unmap();
                d.device.pool.return_read_staging(d.staging);
            } else {
                d.device.pool.forget_staging(d.staging.size());
            }
        }
        for u in self.ups.drain(..) {
            // A still-mapped one means an error before `finish`, and one of a
            // never-waited exchange may still have a mapping pending: drop
            // those rather than pool a buffer in an unknown state.
            if let Some(b) = u.staging {
                if !u.mapped && self.downs_mapped {
                    u.device.pool.return_write_staging(b);
                } else {
                    u.device.pool.forget_staging(b.size());
                }
            }
        }
    }
}

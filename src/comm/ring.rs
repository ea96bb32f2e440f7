//! Point-to-point ring steps: every participant sends its tensor to the next
//! one, `(i + 1) mod P`, and receives from the previous one. A ring of
//! `P − 1` such steps is an all-gather (pass the chunks on) or, with an add
//! after each step, a reduce-scatter; the sequence-parallel linear layers use
//! it to overlap each step's transfer with the GEMM on the chunk already
//! present (xlstm-jax's `TPAsyncDense`, `async_gather` / `async_scatter`).
//!
//! Two phases, so a caller can record work between them:
//! [`RingShift::start`] begins the transfer, [`RingShift::finish`] returns the
//! received tensors; [`ring_shift`] does both at once. Each started shift
//! counts once as [`Collective::SendRecv`], with bytes = the sum of the
//! participants' tensors.
//!
//! What overlaps on one controller, honestly:
//! - [`Transport::HostStaged`] (each rank its own device): `start` records the
//!   device → staging copies and submits them at once, ahead of whatever the
//!   caller records next; `finish` submits that work too, waits only for the
//!   staging copies' submission, then uploads each tensor to the next rank.
//!   On separate real GPUs the host copies and uploads then run while the
//!   GEMMs recorded in between execute. On CPU adapters (lavapipe, llvmpipe)
//!   the "devices" are the same CPU cores that do the host copies, and each
//!   step still costs a device round-trip, so nothing is gained there.
//! - [`Transport::SharedDevice`] (all ranks on one device): nothing moves;
//!   the next rank gets a tensor over the same (immutable) buffer, so the
//!   step costs nothing and there is nothing to overlap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{bytes_of, check_group};
use crate::device::{Collective, DType, Gpu, LocalTensor, Mesh, Rank, Transport};
use crate::error::{Error, Result};

/// A ring shift in flight: created by [`RingShift::start`], completed by
/// [`RingShift::finish`]. Dropping it unfinished abandons the transfer
/// (nothing is leaked; the received tensors are simply never produced).
#[must_use = "call finish() to receive the shifted tensors"]
pub struct RingShift {
    pending: Pending,
}

impl std::fmt::Debug for RingShift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.pending {
            Pending::Done(_) => "shared-device",
            Pending::Host { .. } => "host-staged",
        };
        f.debug_struct("RingShift")
            .field("transport", &kind)
            .finish()
    }
}

enum Pending {
    /// Shared device (or a group of one): the copies are already recorded.
    Done(Vec<LocalTensor>),
    /// Host-staged: staging buffers mapping, the submissions to wait for.
    Host {
        /// Per participant: its staging buffer, byte count, shape, dtype and
        /// the rank its tensor goes to.
        items: Vec<Staged>,
        /// Per distinct device: the submission holding the staging copies.
        waits: Vec<(Arc<Gpu>, wgpu::SubmissionIndex)>,
        failed: Arc<AtomicBool>,
    },
}

struct Staged {
    staging: wgpu::Buffer,
    gpu: Arc<Gpu>,
    bytes: usize,
    shape: Vec<usize>,
    dtype: DType,
    dest: Rank,
}

impl RingShift {
    /// Begin sending `shards[i]` (on the i-th participating rank) to
    /// participant `(i + 1) mod n`. Shards may differ in shape (ragged
    /// chunks, including empty ones) but must share a dtype and sit on
    /// distinct ranks of `mesh`. Counts one [`Collective::SendRecv`].
    pub fn start(mesh: &Mesh, shards: &[LocalTensor]) -> Result<RingShift> {
        const OP: &str = "ring_shift";
        let ranks = check_group(OP, mesh, shards)?;
        let n = shards.len();
        let pending = if n == 1 {
            Pending::Done(shards.to_vec())
        } else {
            match mesh.transport() {
                Transport::SharedDevice => {
                    // Same device, immutable tensors: the next rank gets the
                    // same buffer (see `LocalTensor::alias_on`).
                    let out = (0..n)
                        .map(|i| shards[i].alias_on(&ranks[(i + 1) % n]))
                        .collect::<Result<Vec<_>>>()?;
                    Pending::Done(received_order(out))
                }
                Transport::HostStaged => start_host(shards, &ranks)?,
            }
        };
        mesh.record_comm(Collective::SendRecv, bytes_of(shards));
        Ok(RingShift { pending })
    }

    /// Complete the shift: element i of the result is participant
    /// `(i − 1) mod n`'s tensor, now on participant i's rank. Host-staged:
    /// submits any work recorded since [`RingShift::start`] (so it runs
    /// meanwhile), waits for the staging copies only, then uploads.
    pub fn finish(self) -> Result<Vec<LocalTensor>> {
        match self.pending {
            Pending::Done(out) => Ok(out),
            Pending::Host {
                items,
                waits,
                failed,
            } => finish_host(items, waits, failed),
        }
    }
}

/// Send each participant's tensor to the next, `(i + 1) mod n`, and return
/// what each received: [`RingShift::start`] then [`RingShift::finish`].
pub fn ring_shift(mesh: &Mesh, shards: &[LocalTensor]) -> Result<Vec<LocalTensor>> {
    RingShift::start(mesh, shards)?.finish()
}

fn start_host(shards: &[LocalTensor], ranks: &[Rank]) -> Result<Pending> {
    let n = shards.len();
    let mut items = Vec::with_capacity(n);
    for (i, t) in shards.iter().enumerate() {
        t.gpu().check()?;
        let bytes = t.byte_len();
        let staging = t.gpu().take_staging(bytes.max(4));
        if bytes > 0 {
            let (src, dst) = (t.buffer().clone(), staging.clone());
            t.gpu()
                .record(|enc| enc.copy_buffer_to_buffer(&src, 0, &dst, 0, Some(bytes)));
        }
        items.push(Staged {
            staging,
            gpu: t.gpu().clone(),
            bytes: bytes as usize,
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            dest: ranks[(i + 1) % n].clone(),
        });
    }
    // Submit the staging copies now, ahead of whatever the caller records next.
    let mut waits: Vec<(Arc<Gpu>, wgpu::SubmissionIndex)> = Vec::new();
    for t in shards {
        if waits.iter().any(|(g, _)| g.id() == t.gpu().id()) {
            continue;
        }
        let g = t.gpu().clone();
        let index = match g.flush() {
            Some(i) => i,
            None => g.queue.submit(std::iter::empty()),
        };
        waits.push((g, index));
    }
    let failed = Arc::new(AtomicBool::new(false));
    for it in &items {
        let failed = failed.clone();
        it.staging
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |r| {
                if r.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
            });
    }
    Ok(Pending::Host {
        items,
        waits,
        failed,
    })
}

fn finish_host(
    items: Vec<Staged>,
    waits: Vec<(Arc<Gpu>, wgpu::SubmissionIndex)>,
    failed: Arc<AtomicBool>,
) -> Result<Vec<LocalTensor>> {
    // Let the work recorded since start run while we wait for the copies.
    for (g, _) in &waits {
        g.flush();
    }
    for (g, index) in waits {
        g.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| Error::Wgpu {
                rank: 0,
                message: format!("ring_shift: {e}"),
            })?;
        g.check()?;
    }
    if failed.load(Ordering::Relaxed) {
        return Err(Error::Wgpu {
            rank: 0,
            message: "ring_shift: mapping a staging buffer failed".into(),
        });
    }
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        let data = {
            let view = it
                .staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Wgpu {
                    rank: it.dest.index(),
                    message: format!("ring_shift readback: {e}"),
                })?;
            view[..it.bytes].to_vec()
        };
        it.staging.unmap();
        it.gpu.return_staging(it.staging);
        out.push(match it.dtype {
            DType::F32 => it
                .dest
                .upload(&it.shape, &bytemuck::pod_collect_to_vec::<u8, f32>(&data))?,
            DType::I32 => it
                .dest
                .upload_i32(&it.shape, &bytemuck::pod_collect_to_vec::<u8, i32>(&data))?,
        });
    }
    Ok(received_order(out))
}

/// Sender order (element i went to participant i + 1) → receiver order.
fn received_order(mut sent: Vec<LocalTensor>) -> Vec<LocalTensor> {
    sent.rotate_right(1);
    sent
}

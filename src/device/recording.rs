//! A device's pending command encoder ([`Recorder`]): kernels and copies are
//! recorded into one encoder (many per submit) and submitted on flush;
//! waiting polls the device. [`Device`](super::Device)'s `record`, `flush`
//! and `wait*` are thin calls into this file.
//!
//! Ordering contract: `queue.write_buffer` lands at the start of the *next*
//! submit, before the commands recorded in it. So a pooled buffer is only handed
//! out again after the submit that last used it (dropped buffers are "retired"
//! until [`Device::flush`](super::Device::flush)); then a write into a freshly
//! taken buffer can never overtake a command that still reads its old contents.

use std::sync::{Mutex, MutexGuard};
use web_time::Instant;

use super::pool::BufferPool;
use super::trace::Tracer;
use crate::error::{Error, Result};

/// Flush the pending encoder after this many recorded dispatches, so one
/// command buffer never grows without bound.
const MAX_RECORDED: usize = 512;

/// Flush it, too, once this many bytes wait for its submit (textures made
/// for its kernels, buffers dropped while it may use them): they are freed
/// only after it, and a GPT-2 step held a gigabyte of them. 16 MiB rather
/// than 64 lowers a training step's peak RSS at the same speed.
const MAX_HELD_BYTES: u64 = 16 << 20;
/// Bytes held by submits the device may not have finished, past which the
/// host waits for the oldest, on CPU adapters: the host records far faster
/// than they run, and each submit's textures stay resident (host memory)
/// until it is done. GPUs are not bounded so: there the wait kept the
/// device idle while the host recorded (BENCHMARKS round 29).
const MAX_IN_FLIGHT_BYTES: u64 = 16 << 20;

/// Lock, surviving a poisoned mutex: a panic while holding one of our locks
/// cannot leave state half-written in a way that matters more than losing
/// the whole mesh, so keep going.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The pending encoder. Its lock is held across a submit and the release of
/// the buffers that submit used, so the two are atomic.
#[derive(Default)]
struct Recording {
    encoder: Option<wgpu::CommandEncoder>,
    recorded: usize,
    /// Bytes freed only after the pending encoder's submit.
    held: u64,
    /// Submits that held bytes, oldest first, perhaps not yet done.
    in_flight: std::collections::VecDeque<(wgpu::SubmissionIndex, u64)>,
    /// Their bytes.
    in_flight_bytes: u64,
}

/// A device's pending encoder and the count of what it holds.
pub(super) struct Recorder {
    state: Mutex<Recording>,
    /// [`MAX_IN_FLIGHT_BYTES`] where the in-flight bound applies, else `None`.
    in_flight_limit: Option<u64>,
}

impl Recorder {
    /// An empty recorder; `bound_in_flight` (CPU adapters) makes
    /// [`Recorder::over_in_flight`] bound what submits hold.
    pub(super) fn new(bound_in_flight: bool) -> Recorder {
        Recorder {
            state: Mutex::default(),
            in_flight_limit: bound_in_flight.then_some(MAX_IN_FLIGHT_BYTES),
        }
    }

    /// Run `f` with the pending command encoder (created on `raw` on
    /// demand), under the encoder lock; also returns whether the encoder is
    /// now full, i.e. the caller should flush.
    pub(super) fn record<R>(
        &self,
        raw: &wgpu::Device,
        f: impl FnOnce(&mut wgpu::CommandEncoder) -> R,
    ) -> (R, bool) {
        let mut st = lock(&self.state);
        let enc = st.encoder.get_or_insert_with(|| {
            raw.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgpu-tp"),
            })
        });
        let r = f(enc);
        st.recorded += 1;
        let full = st.recorded >= MAX_RECORDED || st.held >= MAX_HELD_BYTES;
        drop(st);
        (r, full)
    }

    /// Hand a buffer back to `pool`; reusable after the next submit if
    /// anything is pending (decided under the encoder lock).
    pub(super) fn retire(&self, pool: &BufferPool, size: u64, buffer: wgpu::Buffer) {
        let mut rec = lock(&self.state);
        let pending = rec.encoder.is_some();
        if pending {
            rec.held += size;
        }
        pool.retire(size, buffer, pending);
    }

    /// Note `bytes` freed only after the pending encoder's submit (operand
    /// textures made for its kernels): past [`MAX_HELD_BYTES`] the next
    /// [`Recorder::record`] says to flush.
    pub(super) fn hold(&self, bytes: u64) {
        lock(&self.state).held += bytes;
    }

    /// Submit everything recorded so far to `queue` (no wait); `pool`'s
    /// retired buffers become reusable, and `tracer` learns of the submit.
    pub(super) fn submit(
        &self,
        queue: &wgpu::Queue,
        pool: &BufferPool,
        tracer: &Tracer,
    ) -> Option<wgpu::SubmissionIndex> {
        // Submit while holding the state lock: a retired buffer must not be
        // handed out (and written with `write_buffer`, which lands at the start
        // of the next submit) before the encoder that still uses it is submitted,
        // or the write would overtake those commands.
        let mut st = lock(&self.state);
        let enc = st.encoder.take();
        st.recorded = 0;
        if enc.is_some() && tracer.is_on() {
            tracer.submitting(Instant::now());
        }
        let index = enc.map(|e| queue.submit([e.finish()]));
        if let Some(i) = index.clone().filter(|_| st.held > 0) {
            let held = std::mem::take(&mut st.held);
            // Counted only where bounded, so an unbounded queue grows nothing.
            if self.in_flight_limit.is_some() {
                st.in_flight.push_back((i, held));
                st.in_flight_bytes += held;
            }
        }
        pool.release_retired();
        drop(st);
        index
    }
}

impl Recorder {
    /// The submit to wait for so that at most [`MAX_IN_FLIGHT_BYTES`] stay
    /// held by submits not waited for (`None`: no need to wait, or no bound).
    pub(super) fn over_in_flight(&self) -> Option<wgpu::SubmissionIndex> {
        let limit = self.in_flight_limit?;
        let mut st = lock(&self.state);
        let mut wait = None;
        while st.in_flight_bytes > limit {
            let Some((i, bytes)) = st.in_flight.pop_front() else {
                break;
            };
            st.in_flight_bytes -= bytes;
            wait = Some(i);
        }
        wait
    }

    #[cfg(test)]
    fn in_flight_bytes(&self) -> u64 {
        lock(&self.state).in_flight_bytes
    }
}

/// Poll `raw` as `how` says; an error names `rank` (the device's first).
pub(super) fn poll(raw: &wgpu::Device, rank: usize, how: wgpu::PollType) -> Result<()> {
    raw.poll(how).map(|_| ()).map_err(|e| Error::Wgpu {
        rank,
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::MAX_IN_FLIGHT_BYTES;
    use crate::Mesh;

    /// Submits holding bytes stay counted until they pass the bound; the
    /// flush that passes it waits, which leaves at most the bound counted.
    #[test]
    fn flushes_wait_once_submits_hold_too_much() {
        let mesh = Mesh::simulated(1).unwrap();
        let d = mesh.ranks()[0].device();
        d.synchronize().unwrap();
        if !d.is_cpu() {
            // GPUs are not bounded: nothing is counted, so nothing waits.
            d.hold_until_submit(2 * MAX_IN_FLIGHT_BYTES);
            d.record(|_| ());
            d.flush();
            assert_eq!(d.recording.in_flight_bytes(), 0);
            assert!(d.recording.over_in_flight().is_none());
            return;
        }
        let step = MAX_IN_FLIGHT_BYTES / 3;
        let mut most = 0;
        for n in 1..=7 {
            d.hold_until_submit(step);
            d.record(|_| ());
            d.flush();
            let now = d.recording.in_flight_bytes();
            assert!(
                now <= MAX_IN_FLIGHT_BYTES,
                "flush {n}: {now} bytes in flight"
            );
            most = most.max(now);
        }
        // Submits of a third each are counted until they pass the bound.
        assert!(most >= 2 * step, "in flight at most {most}");
    }
}

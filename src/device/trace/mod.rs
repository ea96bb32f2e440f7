//! Recording what one device runs while a trace is on: every kernel dispatch
//! (its name `family::entry`, the rank it ran for, the shapes of its buffers)
//! and every host-time span an upper layer reports (the comm layer reports
//! each collective and ring step). The result is a list of [`TraceEvent`]s;
//! `timeline/` gathers them per mesh into a [`Trace`](super::Trace).
//!
//! Off by default, and free when off: a dispatch and a submit each pay one
//! relaxed atomic load.
//!
//! Two clocks ([`TraceClock`]):
//! - **device** (the device has `Features::TIMESTAMP_QUERY`; lavapipe and GL
//!   llvmpipe do): each kernel's compute pass writes a timestamp at its
//!   beginning and its end into a `QuerySet` of [`QUERIES_PER_SET`] slots. A
//!   full set is resolved into a buffer and copied into a MAP_READ buffer in
//!   the same command encoder; the last, partly used set when the trace
//!   stops. Nothing is read back before the trace stops. Ticks become
//!   nanoseconds with `queue.get_timestamp_period()`.
//!
//!   The device clock has an epoch of its own. It is shifted onto the host
//!   clock by the one rule the host can check: no kernel starts before the
//!   host submitted the command buffer that holds it. The shift is the
//!   smallest one that satisfies this for every traced kernel, so the kernel
//!   with the tightest bound (normally the first kernel of an idle device)
//!   starts exactly at its submit, and every kernel appears at most that
//!   kernel's submit-to-start latency earlier than it really ran (tens of
//!   microseconds on a CPU adapter). Durations are exact device times.
//! - **host** (no timestamp queries, or asked for): each dispatch waits for
//!   the device before it (so earlier work is not counted) and after it, and
//!   its slice is the host time between its submit and the end of that wait.
//!   Times are real, but kernels no longer overlap with the host, and each
//!   pays a submit and a wait: a traced step is slower than an untraced one.
//!
//! Files: `event.rs` (what is recorded), `timestamps.rs` (query sets), this
//! file (the recorder each [`Device`](super::Device) owns).

mod event;
mod timestamps;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use web_time::Instant;

use crate::error::{Error, Result};

pub(crate) use self::event::micros;
pub use self::event::{EventKind, TraceClock, TraceEvent};
use self::timestamps::{QUERIES_PER_SET, QuerySlots, new_slots, resolve};

/// A kernel waiting for its timestamps (device clock).
struct Pending {
    event: TraceEvent,
    /// Query set (index into `Session::sets`) and its first slot (begin; end is +1).
    set: usize,
    slot: u32,
    /// When the host submitted the command buffer that holds it.
    submitted: Option<Instant>,
}

/// One trace of one device, from start to stop.
struct Session {
    epoch: Instant,
    clock: TraceClock,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
    /// Finished slices: host spans and host-clock kernels.
    done: Vec<TraceEvent>,
    /// Device-clock kernels waiting for their timestamps.
    pending: Vec<Pending>,
    /// Index of the first pending kernel not yet submitted.
    unsubmitted: usize,
    sets: Vec<QuerySlots>,
}

impl Session {
    fn micros_since_epoch(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_secs_f64() * 1e6
    }
}

/// A device's recorder: off (nothing recorded) or one session.
#[derive(Default)]
pub(crate) struct Tracer {
    on: AtomicBool,
    session: Mutex<Option<Session>>,
}

/// What a stopped device trace hands back: its events (kernels timed) and
/// the clock that timed them.
pub(crate) struct Stopped {
    pub events: Vec<TraceEvent>,
    pub clock: TraceClock,
}

impl Tracer {
    fn session(&self) -> MutexGuard<'_, Option<Session>> {
        self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a trace is being recorded (one relaxed load).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Begin a trace whose times count from `epoch`, timed by `clock`
    /// (already resolved to `Device` or `Host`), dropping any trace in
    /// progress.
    pub(crate) fn start(&self, epoch: Instant, clock: TraceClock, period_ns: f64) {
        *self.session() = Some(Session {
            epoch,
            clock,
            period_ns,
            done: Vec::new(),
            pending: Vec::new(),
            unsubmitted: 0,
            sets: Vec::new(),
        });
        self.on.store(true, Ordering::Relaxed);
    }

    /// The clock of the trace in progress.
    pub(crate) fn clock(&self) -> Option<TraceClock> {
        self.session().as_ref().map(|s| s.clock)
    }

    /// A finished slice that ran from `start` to `end` on the host clock.
    pub(crate) fn push_host(&self, mut event: TraceEvent, start: Instant, end: Instant) {
        if let Some(s) = self.session().as_mut() {
            event.start_us = s.micros_since_epoch(start);
            event.duration_us = end.saturating_duration_since(start).as_secs_f64() * 1e6;
            s.done.push(event);
        }
    }

    /// Device clock: queue `event` for timestamps and return the query set
    /// and the slot its pass writes its beginning to (the end goes to the
    /// next slot). `None` when no device-clock trace is on.
    pub(crate) fn begin_kernel(
        &self,
        device: &wgpu::Device,
        event: TraceEvent,
    ) -> Option<(wgpu::QuerySet, u32)> {
        let mut guard = self.session();
        let s = guard.as_mut().filter(|s| s.clock == TraceClock::Device)?;
        if s.sets.last().is_none_or(|q| q.resolved) {
            s.sets.push(new_slots(device));
        }
        let set = s.sets.len() - 1;
        let q = &mut s.sets[set];
        let slot = q.used;
        q.used += 2;
        let query_set = q.set.clone();
        s.pending.push(Pending {
            event,
            set,
            slot,
            submitted: None,
        });
        Some((query_set, slot))
    }

    /// After a kernel's pass: once the current query set is full, record its
    /// resolve (and the copy to its readback buffer) into `enc`.
    pub(crate) fn end_kernel(&self, enc: &mut wgpu::CommandEncoder) {
        if let Some(s) = self.session().as_mut()
            && let Some(q) = s.sets.last_mut()
            && !q.resolved
            && q.used + 2 > QUERIES_PER_SET
        {
            resolve(q, enc);
        }
    }

    /// When the trace stops: record the resolve of the last, partly used
    /// query set into `enc`.
    pub(crate) fn resolve_open(&self, enc: &mut wgpu::CommandEncoder) {
        if let Some(s) = self.session().as_mut()
            && let Some(q) = s.sets.last_mut()
            && !q.resolved
            && q.used > 0
        {
            resolve(q, enc);
        }
    }

    /// The host is about to submit everything recorded so far: that is when
    /// the not yet submitted kernels were submitted.
    pub(crate) fn submitting(&self, at: Instant) {
        if let Some(s) = self.session().as_mut() {
            for p in &mut s.pending[s.unsubmitted..] {
                p.submitted = Some(at);
            }
            s.unsubmitted = s.pending.len();
        }
    }

    /// Turn recording off and take the session, if one was on.
    fn take(&self) -> Option<Session> {
        self.on.store(false, Ordering::Relaxed);
        self.session().take()
    }

    /// Stop: turn recording off and time every kernel. The caller has
    /// recorded [`Tracer::resolve_open`] and submitted it (see
    /// `Device::stop_trace`); this maps the readback buffers and waits with
    /// `wait` (which must block until the device is idle).
    pub(crate) fn stop(
        &self,
        rank_for_errors: usize,
        wait: impl FnOnce() -> Result<()>,
    ) -> Result<Option<Stopped>> {
        let Some(s) = self.take() else {
            return Ok(None);
        };
        let failed = std::sync::Arc::new(AtomicBool::new(false));
        for q in s.sets.iter().filter(|q| q.resolved) {
            let failed = failed.clone();
            q.readback
                .slice(..)
                .map_async(wgpu::MapMode::Read, move |r| {
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                });
        }
        wait()?;
        if failed.load(Ordering::Relaxed) {
            return Err(Error::Wgpu {
                rank: rank_for_errors,
                message: "mapping the trace's timestamp buffer failed; trace with \
                          TraceClock::Host instead"
                    .into(),
            });
        }
        let mut ticks: Vec<Option<Vec<u64>>> = Vec::with_capacity(s.sets.len());
        for q in &s.sets {
            if !q.resolved {
                ticks.push(None);
                continue;
            }
            let view = q
                .readback
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Wgpu {
                    rank: rank_for_errors,
                    message: format!("trace timestamps: {e}"),
                })?;
            let values: Vec<u64> = bytemuck::pod_collect_to_vec(&view[..q.used as usize * 8]);
            drop(view);
            q.readback.unmap();
            ticks.push(Some(values));
        }
        let kernels = time_kernels(&s, &ticks);
        let mut events = s.done;
        events.extend(kernels);
        events.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        Ok(Some(Stopped {
            events,
            clock: s.clock,
        }))
    }
}

/// Device-clock kernels with host times: the device clock shifted so that no
/// kernel starts before its submit, and the tightest one starts at it (see
/// the module docs). Kernels whose timestamps were never resolved or never
/// submitted are left out.
fn time_kernels(s: &Session, ticks: &[Option<Vec<u64>>]) -> Vec<TraceEvent> {
    let read = |p: &Pending| -> Option<(u64, u64, Instant)> {
        let t = ticks[p.set].as_ref()?;
        let (b, e) = (*t.get(p.slot as usize)?, *t.get(p.slot as usize + 1)?);
        Some((b, e, p.submitted?))
    };
    let timed: Vec<(&Pending, u64, u64, Instant)> = s
        .pending
        .iter()
        .filter_map(|p| read(p).map(|(b, e, at)| (p, b, e, at)))
        .collect();
    // Relative to the smallest tick, so f64 keeps sub-nanosecond precision.
    let Some(base) = timed.iter().map(|t| t.1).min() else {
        return Vec::new();
    };
    let ns = |tick: u64| (tick as i128 - base as i128) as f64 * s.period_ns;
    let offset_ns = timed
        .iter()
        .map(|&(_, b, _, at)| s.micros_since_epoch(at) * 1e3 - ns(b))
        .fold(f64::NEG_INFINITY, f64::max);
    timed
        .into_iter()
        .map(|(p, b, e, _)| {
            let mut event = p.event.clone();
            event.start_us = (ns(b) + offset_ns) / 1e3;
            event.duration_us = (ns(e) - ns(b)).max(0.0) / 1e3;
            event
        })
        .collect()
}

//! What a trace records: [`TraceEvent`]s (kernels and host spans on one
//! rank's track) and the [`TraceClock`] that times kernels.

use std::time::Duration;

/// Which clock times the kernels of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceClock {
    /// The device's timestamp queries where it has `TIMESTAMP_QUERY`, host
    /// timestamps otherwise (what [`Mesh::start_trace`](crate::device::Mesh::start_trace) uses).
    Auto,
    /// Timestamp queries written by the device at the beginning and end of
    /// each kernel's compute pass; an error on a device without them.
    Device,
    /// Host timestamps around each kernel, waiting for the device before and
    /// after it (real times, no overlap, slower).
    Host,
}

/// What a [`TraceEvent`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// One kernel dispatch, timed by the trace's [`TraceClock`].
    Kernel,
    /// A span of host time an upper layer reported (a collective, a ring step).
    HostSpan,
}

/// One slice of a [`Trace`](crate::device::Trace): a kernel or a host span on one rank's track.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TraceEvent {
    /// The rank whose track it is on (for a kernel: the rank that owns the
    /// buffer it writes).
    pub rank: usize,
    /// `family::entry` of a kernel (e.g. `gemm::gemm_tex_16x16_8m`), or the span's
    /// name (a collective's kind, e.g. `AllReduce`).
    pub name: String,
    /// Kernel or host span.
    pub kind: EventKind,
    /// `"kernel"` for kernels; the reporting layer's category for host spans
    /// (`"comm"` for collectives).
    pub category: &'static str,
    /// Start, in microseconds since the trace started (host clock).
    pub start_us: f64,
    /// Duration in microseconds (never negative).
    pub duration_us: f64,
    /// Kernels: the shape of each bound buffer, in binding order. Empty for host spans.
    pub shapes: Vec<Vec<usize>>,
    /// Named numbers: `workgroups` for kernels; `bytes` (the collective's
    /// whole payload, as counted in `Mesh::comm_stats`), `rank_bytes` (this
    /// rank's part) and `participants` for collectives.
    pub args: Vec<(&'static str, u64)>,
}

impl TraceEvent {
    /// A slice with no time yet, for the tracer to time.
    pub(crate) fn new(
        rank: usize,
        name: String,
        kind: EventKind,
        category: &'static str,
        shapes: Vec<Vec<usize>>,
        args: Vec<(&'static str, u64)>,
    ) -> Self {
        TraceEvent {
            rank,
            name,
            kind,
            category,
            start_us: 0.0,
            duration_us: 0.0,
            shapes,
            args,
        }
    }

    /// The value of argument `key`, if the event has it.
    pub fn arg(&self, key: &str) -> Option<u64> {
        self.args.iter().find(|(k, _)| *k == key).map(|&(_, v)| v)
    }

    /// End, in microseconds since the trace started.
    pub fn end_us(&self) -> f64 {
        self.start_us + self.duration_us
    }
}

/// Microseconds as a [`Duration`] (negative counts as zero).
pub(crate) fn micros(us: f64) -> Duration {
    Duration::from_secs_f64(us.max(0.0) / 1e6)
}

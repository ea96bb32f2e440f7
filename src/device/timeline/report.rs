//! The [`Trace`] a mesh's devices recorded and its reports: Chrome
//! trace-event JSON ([`Trace::write_chrome_json`]) and the kernels that
//! took the most time ([`Trace::top_kernels`]); see the `timeline/` module
//! docs for the JSON's layout.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::super::trace::{EventKind, TraceClock, TraceEvent, micros};
use crate::error::{Error, Result};

/// `tid` of rank `r`'s collectives track is this plus `r`.
const HOST_TID_BASE: usize = 100_000;

/// One rank's tracks in a [`Trace`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceTrack {
    /// The rank.
    pub rank: usize,
    /// Its adapter's name.
    pub adapter: String,
    /// Its backend (`Vulkan`, `Gl`, …).
    pub backend: String,
    /// The clock that timed its kernels ([`TraceClock::Device`] or [`TraceClock::Host`]).
    pub clock: TraceClock,
}

/// Time spent in one kernel over a whole trace (every rank); see [`Trace::top_kernels`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct KernelTotal {
    /// `family::entry`.
    pub name: String,
    /// Dispatches.
    pub calls: u64,
    /// Sum of their durations.
    pub total: Duration,
    /// `total` over the summed duration of every kernel in the trace (0..=1).
    pub share: f64,
}

/// What a mesh recorded between [`Mesh::start_trace`](crate::device::Mesh::start_trace) and [`Mesh::stop_trace`](crate::device::Mesh::stop_trace).
#[derive(Clone, Debug)]
pub struct Trace {
    pub(super) events: Vec<TraceEvent>,
    pub(super) tracks: Vec<TraceTrack>,
    pub(super) title: String,
}

impl Trace {
    /// Every slice, kernels and host spans of every rank, by start time.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// The kernel slices, by start time.
    pub fn kernels(&self) -> impl Iterator<Item = &TraceEvent> {
        self.events.iter().filter(|e| e.kind == EventKind::Kernel)
    }

    /// The host spans (collectives, ring steps), by start time.
    pub fn host_spans(&self) -> impl Iterator<Item = &TraceEvent> {
        self.events.iter().filter(|e| e.kind == EventKind::HostSpan)
    }

    /// One entry per rank of the mesh, in rank order.
    pub fn tracks(&self) -> &[TraceTrack] {
        &self.tracks
    }

    /// Summed duration of every kernel slice (all ranks).
    pub fn kernel_time(&self) -> Duration {
        micros(self.kernels().map(|e| e.duration_us).sum())
    }

    /// From the first slice's start to the last one's end (zero when empty).
    pub fn span(&self) -> Duration {
        let start = self
            .events
            .iter()
            .map(|e| e.start_us)
            .fold(f64::INFINITY, f64::min);
        let end = self.events.iter().map(|e| e.end_us()).fold(0.0, f64::max);
        if start.is_finite() {
            micros(end - start)
        } else {
            Duration::ZERO
        }
    }

    /// The `n` kernels with the largest summed duration over all ranks,
    /// largest first, with their calls and share of [`Trace::kernel_time`].
    pub fn top_kernels(&self, n: usize) -> Vec<KernelTotal> {
        let mut by_name: HashMap<&str, (u64, f64)> = HashMap::new();
        let mut all = 0.0;
        for e in self.kernels() {
            let entry = by_name.entry(e.name.as_str()).or_default();
            entry.0 += 1;
            entry.1 += e.duration_us;
            all += e.duration_us;
        }
        let mut totals: Vec<KernelTotal> = by_name
            .into_iter()
            .map(|(name, (calls, us))| KernelTotal {
                name: name.to_string(),
                calls,
                total: micros(us),
                share: if all > 0.0 { us / all } else { 0.0 },
            })
            .collect();
        totals.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
        totals.truncate(n);
        totals
    }

    /// The trace as Chrome trace-event JSON (see the module docs for its layout).
    pub fn to_chrome_json(&self) -> String {
        let pid = std::process::id();
        let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        let mut first = true;
        let mut push = |line: String| {
            if !first {
                out.push_str(",\n");
            }
            first = false;
            out.push_str(&line);
        };
        let meta = |name: &str, tid: usize, args: String| {
            format!(
                "{{\"name\":\"{name}\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"args\":{args}}}"
            )
        };
        push(meta(
            "process_name",
            0,
            format!("{{\"name\":{}}}", json_string(&self.title)),
        ));
        for t in &self.tracks {
            let clock = match t.clock {
                TraceClock::Device => "device clock",
                _ => "host clock",
            };
            let kernels = format!(
                "rank {} · {} ({}) · kernels ({clock})",
                t.rank, t.adapter, t.backend
            );
            let host = format!("rank {} · collectives (host clock)", t.rank);
            for (tid, name, order) in [
                (t.rank, kernels, 2 * t.rank),
                (HOST_TID_BASE + t.rank, host, 2 * t.rank + 1),
            ] {
                push(meta(
                    "thread_name",
                    tid,
                    format!("{{\"name\":{}}}", json_string(&name)),
                ));
                push(meta(
                    "thread_sort_index",
                    tid,
                    format!("{{\"sort_index\":{order}}}"),
                ));
            }
        }
        for e in &self.events {
            let tid = match e.kind {
                EventKind::Kernel => e.rank,
                EventKind::HostSpan => HOST_TID_BASE + e.rank,
            };
            let mut args = String::from("{");
            if e.kind == EventKind::Kernel {
                let shapes: Vec<String> = e.shapes.iter().map(|s| format!("{s:?}")).collect();
                let _ = write!(args, "\"shapes\":[{}]", shapes.join(",").replace(' ', ""));
            }
            for (k, v) in &e.args {
                if args.len() > 1 {
                    args.push(',');
                }
                let _ = write!(args, "{}:{v}", json_string(k));
            }
            args.push('}');
            push(format!(
                "{{\"name\":{},\"cat\":{},\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{pid},\"tid\":{tid},\"args\":{args}}}",
                json_string(&e.name),
                json_string(e.category),
                e.start_us,
                e.duration_us.max(0.0),
            ));
        }
        out.push_str("\n]}\n");
        out
    }

    /// Write [`Trace::to_chrome_json`] to `path` (open it in
    /// <https://ui.perfetto.dev> or `chrome://tracing`).
    pub fn write_chrome_json(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_chrome_json()).map_err(|e| {
            Error::invalid(
                "Trace::write_chrome_json",
                format!(
                    "could not write {}: {e}; pass a path in a directory that exists and is writable",
                    path.display()
                ),
            )
        })
    }
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

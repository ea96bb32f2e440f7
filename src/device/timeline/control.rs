//! Starting and stopping a mesh's trace ([`Mesh::start_trace`],
//! [`Mesh::stop_trace`]), the host spans upper layers time their work with,
//! and tracing a mesh for its whole life (`WGPU_TP_TRACE`).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use web_time::Instant;

use super::super::context::distinct_devices;
use super::super::mesh::Mesh;
use super::super::rank::Rank;
use super::super::trace::{EventKind, TraceClock, TraceEvent};
use super::report::{Trace, TraceTrack};
use crate::error::{Error, Result};

/// A span of host time being timed for the trace: begun by
/// [`Mesh::host_span`], recorded by [`HostSpan::finish`], forgotten when dropped.
pub(crate) struct HostSpan {
    start: Instant,
}

impl HostSpan {
    /// End the span now: one slice `name` of `category` on the host track of
    /// each `(rank, args)` in `tracks` whose device still traces.
    pub(crate) fn finish(
        self,
        mesh: &Mesh,
        name: &str,
        category: &'static str,
        tracks: impl IntoIterator<Item = (usize, Vec<(&'static str, u64)>)>,
    ) {
        let end = Instant::now();
        for (rank, args) in tracks {
            if let Some(r) = mesh.ranks().get(rank)
                && r.device().tracing()
            {
                let event = TraceEvent::new(
                    rank,
                    name.to_string(),
                    EventKind::HostSpan,
                    category,
                    Vec::new(),
                    args,
                );
                r.device().tracer.push_host(event, self.start, end);
            }
        }
    }
}

impl Mesh {
    /// Begin tracing every dispatch and collective of every rank, timing
    /// kernels with the device's timestamp queries where it has them
    /// ([`TraceClock::Auto`]). A trace already in progress is dropped.
    /// Nothing is read back until [`Mesh::stop_trace`].
    pub fn start_trace(&self) -> Result<()> {
        self.start_trace_with(TraceClock::Auto)
    }

    /// [`Mesh::start_trace`] with a chosen clock; [`TraceClock::Device`] is an
    /// error on a device without `TIMESTAMP_QUERY` (and then nothing traces).
    pub fn start_trace_with(&self, clock: TraceClock) -> Result<()> {
        let epoch = Instant::now();
        let devices = self.devices();
        for d in &devices {
            if let Err(e) = d.start_trace(epoch, clock) {
                for d in &devices {
                    let _ = d.stop_trace();
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Whether this mesh is recording a trace.
    pub fn is_tracing(&self) -> bool {
        self.ranks().iter().any(|r| r.device().tracing())
    }

    /// Stop tracing: submit what is pending, wait for every device, read the
    /// timestamps back and return the trace. An error when no trace was on.
    pub fn stop_trace(&self) -> Result<Trace> {
        stop(self.ranks(), self.title())
    }

    /// Start timing a host span if this mesh traces; `None` otherwise, at the
    /// cost of one relaxed atomic load per rank.
    pub(crate) fn host_span(&self) -> Option<HostSpan> {
        self.is_tracing().then(|| HostSpan {
            start: Instant::now(),
        })
    }

    /// Trace from now until the mesh is dropped, then write the trace to
    /// `path` (a later mesh of this process given the same path writes
    /// `stem-2.ext`, `stem-3.ext`, …).
    pub(crate) fn trace_until_drop(&self, path: &Path) -> Result<()> {
        self.start_trace()?;
        let path = claim_path(path);
        *self
            .extension::<TraceOnDrop>()
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            Some((path, self.ranks().to_vec(), self.title()));
        Ok(())
    }

    fn title(&self) -> String {
        format!(
            "wgpu-tp mesh: {} ranks ({:?}) on {}",
            self.size(),
            self.layout(),
            self.adapter_summary()
        )
    }
}

/// Stop the trace of `ranks`' devices (flushing every device first, so they
/// finish together) and gather it.
fn stop(ranks: &[Rank], title: String) -> Result<Trace> {
    let devices = distinct_devices(ranks.iter().map(Rank::device));
    for d in &devices {
        d.flush();
    }
    let mut events = Vec::new();
    let mut clocks: Vec<(u64, TraceClock)> = Vec::new();
    for d in &devices {
        if let Some(stopped) = d.stop_trace()? {
            events.extend(stopped.events);
            clocks.push((d.id(), stopped.clock));
        }
    }
    if clocks.is_empty() {
        return Err(Error::invalid(
            "stop_trace",
            "this mesh is not tracing; call Mesh::start_trace first (or build the mesh with \
             WGPU_TP_TRACE=path.json set)",
        ));
    }
    events.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let tracks = ranks
        .iter()
        .map(|r| {
            let info = r.device().adapter_info();
            TraceTrack {
                rank: r.index(),
                adapter: info.name.clone(),
                backend: format!("{:?}", info.backend),
                clock: clocks
                    .iter()
                    .find(|(id, _)| *id == r.device().id())
                    .map_or(TraceClock::Host, |&(_, c)| c),
            }
        })
        .collect();
    Ok(Trace {
        events,
        tracks,
        title,
    })
}

/// `path` the first time; `stem-2.ext`, `stem-3.ext`, … for later meshes of
/// this process given the same path.
fn claim_path(path: &Path) -> PathBuf {
    static CLAIMED: Mutex<Vec<(PathBuf, usize)>> = Mutex::new(Vec::new());
    let mut claimed = CLAIMED.lock().unwrap_or_else(PoisonError::into_inner);
    let n = match claimed.iter_mut().find(|(p, _)| p == path) {
        Some((_, n)) => {
            *n += 1;
            *n
        }
        None => {
            claimed.push((path.to_path_buf(), 1));
            1
        }
    };
    if n == 1 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{n}"),
    };
    path.with_file_name(name)
}

/// The mesh's extension slot for [`Mesh::trace_until_drop`]: where to write,
/// and the ranks (their devices outlive the mesh's own list while dropping).
#[derive(Default)]
struct TraceOnDrop(Mutex<Option<(PathBuf, Vec<Rank>, String)>>);

impl Drop for TraceOnDrop {
    fn drop(&mut self) {
        let taken = self
            .0
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((path, ranks, title)) = taken else {
            return;
        };
        if !ranks.iter().any(|r| r.device().tracing()) {
            // Stopped by hand (Mesh::stop_trace): that caller has the trace.
            return;
        }
        // A destructor cannot return an error: say what happened on stderr.
        match stop(&ranks, title).and_then(|t| t.write_chrome_json(&path).map(|()| t)) {
            Ok(t) => eprintln!(
                "wgpu-tp: wrote a trace of {} events on {} ranks to {}",
                t.events.len(),
                t.tracks.len(),
                path.display()
            ),
            Err(e) => eprintln!("wgpu-tp: trace for {} not written: {e}", path.display()),
        }
    }
}

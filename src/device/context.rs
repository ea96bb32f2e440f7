//! [`Device`]: one wgpu device and queue, shared by the ranks placed on it,
//! with the pending command encoder (many kernels per submit) and wgpu's
//! errors turned into [`Error`] values instead of panics. It owns the buffer
//! pool (`pool.rs`), the pipeline cache (`pipeline.rs`) and the trace
//! recorder (`trace/`); the pending encoder, submits and polls, with the
//! ordering contract that keeps pooled buffers safe, are in `recording.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use web_time::Instant;

use super::pipeline::{KernelSpec, Pipeline, PipelineCache};
use super::pool::{BufferPool, MemoryStats};
use super::recording::{Recorder, lock, poll};
use super::trace::{Stopped, TraceClock, Tracer};
use crate::error::{Error, Result};

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// One wgpu device and queue, shared by the ranks placed on it. On a
/// software adapter (lavapipe, llvmpipe, WARP) it is the CPU.
pub struct Device {
    pub(crate) raw: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    id: u64,
    pipelines: PipelineCache,
    pub(crate) pool: BufferPool,
    pub(crate) tracer: Tracer,
    pub(super) recording: Recorder,
    error: Arc<Mutex<Option<String>>>,
    lost: Arc<Mutex<Option<String>>>,
    poison: AtomicBool,
    /// The first rank placed on this device, for error messages.
    first_rank: usize,
    /// Cooperative matrices on for the f16 GEMM (`capability.rs`).
    pub(super) coop_f16: bool,
    /// Bytes uploaded through `queue.write_buffer` since the last wait
    /// [`Device::staged`] made.
    staged: AtomicU64,
}

/// Uploads staged past which [`Device::staged`] submits them and waits
/// (native only).
#[cfg(not(target_arch = "wasm32"))]
const MAX_STAGED_BYTES: u64 = 16 << 20;

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("adapter", &self.info.name)
            .field("backend", &self.info.backend)
            .field("id", &self.id)
            .finish()
    }
}

impl Device {
    /// Wrap a device that was just requested; installs the error handlers.
    pub(crate) fn new(
        raw: wgpu::Device,
        queue: wgpu::Queue,
        info: wgpu::AdapterInfo,
        first_rank: usize,
        coop_f16: bool,
    ) -> Arc<Self> {
        let error = Arc::new(Mutex::new(None::<String>));
        let lost = Arc::new(Mutex::new(None::<String>));
        {
            // wgpu's default handler panics; keep the first error for the next sync point.
            let error = error.clone();
            raw.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                let mut slot = lock(&error);
                if slot.is_none() {
                    *slot = Some(e.to_string());
                }
            }));
            let lost = lost.clone();
            raw.set_device_lost_callback(move |reason, msg| {
                if reason != wgpu::DeviceLostReason::Destroyed {
                    *lock(&lost) = Some(format!("{reason:?}: {msg}"));
                }
            });
        }
        let limits = raw.limits();
        let recording = Recorder::new(info.device_type == wgpu::DeviceType::Cpu);
        Arc::new(Device {
            pool: BufferPool::new(raw.clone()),
            raw,
            queue,
            info,
            limits,
            id: NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed),
            pipelines: PipelineCache::default(),
            tracer: Tracer::default(),
            recording,
            error,
            lost,
            poison: AtomicBool::new(false),
            first_rank,
            coop_f16,
            staged: AtomicU64::new(0),
        })
    }

    /// The adapter this device was opened on.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The limits the device was opened with (the adapter's own unless
    /// [`MeshBuilder::limits`](super::MeshBuilder::limits) asked for others).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// Invocations per workgroup of the one-invocation-per-element kernels
    /// on this device: 256, or less where the device allows less.
    pub fn grid_workgroup(&self) -> u32 {
        super::pipeline::grid_workgroup(&self.limits)
    }

    /// The features the device was opened with.
    pub fn features(&self) -> wgpu::Features {
        self.raw.features()
    }

    /// The raw wgpu device, for users who want to add their own kernels.
    pub fn wgpu_device(&self) -> &wgpu::Device {
        &self.raw
    }

    /// The raw wgpu queue.
    pub fn wgpu_queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// A process-unique id, used to tell devices apart.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// When on, every kernel output buffer is filled with `0xFFFFFFFF` (NaN as
    /// f32) before the kernel runs, so elements a kernel forgot to write show.
    pub fn set_poison(&self, on: bool) {
        self.poison.store(on, Ordering::Relaxed);
    }

    /// Number of pipelines compiled on this device so far.
    pub fn pipelines_built(&self) -> u64 {
        self.pipelines.count()
    }

    /// Wall time spent compiling this device's pipelines so far.
    pub fn pipeline_build_time(&self) -> std::time::Duration {
        self.pipelines.build_time()
    }

    /// Number of buffers created so far (pool misses).
    pub fn buffers_allocated(&self) -> u64 {
        self.pool.allocations()
    }

    /// Device memory this device's pools hold now (see [`MemoryStats`]).
    pub fn memory(&self) -> MemoryStats {
        self.pool.memory()
    }

    /// Start [`MemoryStats::peak`] again from what is held now.
    pub fn reset_peak_memory(&self) {
        self.pool.reset_peak();
    }

    /// Drop every pooled buffer that nothing uses (frees device memory).
    pub fn trim_pool(&self) {
        self.pool.trim();
    }

    /// Whether this device is recording a trace (one relaxed atomic load).
    pub(crate) fn tracing(&self) -> bool {
        self.tracer.is_on()
    }

    /// Begin recording a trace whose times count from `epoch` (dropping one
    /// in progress); returns the clock that times its kernels.
    pub(crate) fn start_trace(&self, epoch: Instant, clock: TraceClock) -> Result<TraceClock> {
        let has_queries = self.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let clock = match clock {
            TraceClock::Auto if has_queries => TraceClock::Device,
            TraceClock::Auto => TraceClock::Host,
            TraceClock::Device if !has_queries => {
                return Err(Error::invalid(
                    "start_trace",
                    format!(
                        "adapter {:?} has no TIMESTAMP_QUERY, so the device cannot time kernels; \
                         trace with TraceClock::Auto or TraceClock::Host",
                        self.info.name
                    ),
                ));
            }
            c => c,
        };
        // Work recorded before the trace goes now, untraced, so the first
        // traced submit holds traced work only.
        self.flush();
        let period_ns = self.queue.get_timestamp_period() as f64;
        self.tracer.start(epoch, clock, period_ns);
        Ok(clock)
    }

    /// Stop recording: submit what is pending, wait for the device, read the
    /// kernels' timestamps back. `None` when no trace was on.
    pub(crate) fn stop_trace(&self) -> Result<Option<Stopped>> {
        if self.tracer.clock() == Some(TraceClock::Device) {
            self.record(|enc| self.tracer.resolve_open(enc));
        }
        self.flush();
        let stopped = self.tracer.stop(self.first_rank, || self.wait())?;
        self.check()?;
        Ok(stopped)
    }

    /// Find or build the pipeline for `spec` (built once per device).
    pub(crate) fn pipeline(&self, spec: &KernelSpec) -> Result<Arc<Pipeline>> {
        self.pipelines.get_or_build(&self.raw, spec)
    }

    /// Hand a tensor's buffer back to the pool; reusable after the next submit.
    pub(crate) fn retire_buffer(&self, size: u64, buffer: wgpu::Buffer) {
        self.recording.retire(&self.pool, size, buffer);
    }

    /// Fill a fresh output buffer with NaN bits when poisoning is on.
    pub(crate) fn maybe_poison(&self, buffer: &wgpu::Buffer, bytes: u64) {
        if bytes > 0 && self.poison.load(Ordering::Relaxed) {
            let fill = vec![0xFFu8; bytes.div_ceil(4) as usize * 4];
            self.queue.write_buffer(buffer, 0, &fill);
        }
    }

    /// Return the first error wgpu reported since the last check, or device loss.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(msg) = lock(&self.lost).clone() {
            return Err(Error::DeviceLost {
                rank: self.first_rank,
                message: msg,
            });
        }
        if let Some(msg) = lock(&self.error).take() {
            return Err(Error::Wgpu {
                rank: self.first_rank,
                message: msg,
            });
        }
        Ok(())
    }

    /// Bytes one row block (`blocks.rs`) may hold on this device, and the
    /// name of the limit that sets it: the smaller of the binding and buffer
    /// limits, rounded down to 256 bytes (the pool's bucket, and a multiple
    /// of the 16 a vec4 binding rounds to).
    pub(crate) fn block_limit(&self) -> (u64, &'static str) {
        let l = self.limits();
        let (limit, name) = if l.max_storage_buffer_binding_size <= l.max_buffer_size {
            (
                l.max_storage_buffer_binding_size,
                "max_storage_buffer_binding_size",
            )
        } else {
            (l.max_buffer_size, "max_buffer_size")
        };
        ((limit / 256 * 256).max(256), name)
    }

    /// Check a byte size against the storage-binding and buffer-size limits.
    pub(crate) fn check_binding(&self, op: &'static str, bytes: u64) -> Result<()> {
        let limits = [
            (
                self.limits.max_storage_buffer_binding_size,
                "max_storage_buffer_binding_size",
            ),
            (self.limits.max_buffer_size, "max_buffer_size"),
        ];
        for (limit, limit_name) in limits {
            if bytes > limit {
                return Err(Error::TooLarge {
                    op,
                    what: "a tensor",
                    needed: bytes,
                    limit,
                    limit_name,
                });
            }
        }
        Ok(())
    }

    /// Note `bytes` made for the pending encoder's kernels and freed only
    /// after its submit (operand textures): past a budget the next
    /// recording submits it.
    pub(crate) fn hold_until_submit(&self, bytes: u64) {
        self.recording.hold(bytes);
    }

    /// Note `bytes` just written through `queue.write_buffer` (an
    /// upload). wgpu stages each write in memory of its own until the
    /// submit that carries it is done, and a CPU adapter's device memory is
    /// the process's, whose suballocator blocks keep every page once
    /// touched: a model's uploads all staged before one submit left as
    /// many bytes again resident after loading. Past [`MAX_STAGED_BYTES`]
    /// they are submitted and waited for, so the next writes reuse the
    /// same staging memory (native only: a browser cannot wait).
    pub(crate) fn staged(&self, bytes: u64) {
        #[cfg(not(target_arch = "wasm32"))]
        {
            let total = self.staged.fetch_add(bytes, Ordering::AcqRel) + bytes;
            if total >= MAX_STAGED_BYTES {
                self.staged.store(0, Ordering::Release);
                let index = self.flush_index();
                let _ = self.wait_for(index);
            }
        }
        #[cfg(target_arch = "wasm32")]
        let _ = (&self.staged, bytes);
    }

    /// Run `f` with the pending command encoder (created on demand).
    pub(crate) fn record<R>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
        let (r, full) = self.recording.record(&self.raw, f);
        if full {
            self.flush();
        }
        r
    }

    /// Submit everything recorded so far (no wait). Retired buffers become reusable.
    pub fn flush(&self) -> Option<wgpu::SubmissionIndex> {
        let index = self.recording.submit(&self.queue, &self.pool, &self.tracer);
        // Bound what submits not yet done hold (a browser cannot block; an
        // error here is the device's, reported by its next check).
        if let Some(oldest) = self.recording.over_in_flight() {
            #[cfg(not(target_arch = "wasm32"))]
            let _ = self.wait_for(oldest);
            #[cfg(target_arch = "wasm32")]
            let _ = oldest;
        }
        index
    }

    /// [`Device::flush`], or an empty submit when nothing was recorded: an
    /// index that covers everything submitted so far.
    pub(crate) fn flush_index(&self) -> wgpu::SubmissionIndex {
        match self.flush() {
            Some(i) => i,
            None => self.queue.submit(std::iter::empty()),
        }
    }

    /// Submit pending work and block until the device is idle (in a
    /// browser, [`Error::WouldBlock`]: use [`Device::synchronize_async`]).
    pub fn synchronize(&self) -> Result<()> {
        super::wait::block_on("Device::synchronize", self.synchronize_async())
    }

    /// Submit pending work; resolves when the device is idle.
    pub async fn synchronize_async(&self) -> Result<()> {
        // Flush first: the callback covers only work submitted before it.
        let index = self.flush_index();
        let signal = super::wait::Signal::default();
        self.queue.on_submitted_work_done(signal.done_callback());
        self.settle(index)?;
        signal.done().await;
        self.check()
    }

    /// On native, block until submission `index` is done, which runs the
    /// callbacks (mapping, work done) it completes; in a browser the page's
    /// event loop runs them while their future is awaited, and polling
    /// would not wait.
    pub(crate) fn settle(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.wait_for(index)
        }
        #[cfg(target_arch = "wasm32")]
        {
            let _ = index;
            Ok(())
        }
    }

    /// Block until all submitted work is done.
    pub(crate) fn wait(&self) -> Result<()> {
        self.poll(wgpu::PollType::wait_indefinitely())
    }

    /// Block until submission `index` (and everything before it) is done.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn wait_for(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        self.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        })
    }

    fn poll(&self, how: wgpu::PollType) -> Result<()> {
        poll(&self.raw, self.first_rank, how)
    }
}

/// Each device once, in first-seen order (ranks of a shared-device mesh, or
/// the tensors of one collective, name the same device many times).
pub(crate) fn distinct_devices<'a>(all: impl Iterator<Item = &'a Arc<Device>>) -> Vec<Arc<Device>> {
    let mut devices: Vec<Arc<Device>> = Vec::new();
    for d in all {
        if !devices.iter().any(|e| e.id() == d.id()) {
            devices.push(d.clone());
        }
    }
    devices
}

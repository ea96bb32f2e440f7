//! One wgpu `Device` + `Queue` with what every kernel needs: a pipeline cache,
//! a buffer pool, a pending command encoder (many kernels per submit), and
//! wgpu's errors turned into [`Error`] values instead of panics.
//!
//! Ordering contract: `queue.write_buffer` lands at the start of the *next*
//! submit, before the commands recorded in it. So a pooled buffer is only handed
//! out again after the submit that last used it (dropped buffers are "retired"
//! until [`Gpu::flush`]); then a write into a freshly taken buffer can never
//! overtake a command that still reads its old contents.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Flush the pending encoder after this many recorded dispatches, so one
/// command buffer never grows without bound.
const MAX_RECORDED: usize = 512;

static NEXT_GPU_ID: AtomicU64 = AtomicU64::new(1);

/// How a kernel binds one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    ReadWrite,
}

/// What the pipeline cache needs to build (or find) a compute pipeline.
#[derive(Clone, Debug)]
pub(crate) struct KernelSpec {
    /// Shader family, e.g. "gemm"; also names the file in `shaders/`.
    pub family: &'static str,
    /// WGSL source (from `include_str!`).
    pub source: &'static str,
    /// Entry point.
    pub entry: &'static str,
    /// Storage bindings after the uniform at binding 0, in binding order.
    pub bindings: &'static [Access],
    /// Values for WGSL `override` constants.
    pub constants: Vec<(&'static str, f64)>,
}

impl KernelSpec {
    fn key(&self) -> String {
        let mut k = format!("{}::{}", self.family, self.entry);
        for (n, v) in &self.constants {
            k.push_str(&format!(";{n}={v}"));
        }
        k
    }
}

/// A compiled pipeline and its bind-group layout.
pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
}

#[derive(Default)]
struct State {
    encoder: Option<wgpu::CommandEncoder>,
    recorded: usize,
    /// Pooled storage buffers ready for reuse, by byte size.
    free: HashMap<u64, Vec<wgpu::Buffer>>,
    /// Dropped while the pending encoder may still use them.
    retired: Vec<(u64, wgpu::Buffer)>,
    /// MAP_READ staging buffers ready for reuse, by byte size.
    staging: HashMap<u64, Vec<wgpu::Buffer>>,
    /// MAP_WRITE upload staging buffers ready for reuse (unmapped), by byte size.
    upload_staging: HashMap<u64, Vec<wgpu::Buffer>>,
    /// Buffers created since the mesh was built (pool misses).
    allocations: u64,
}

/// One wgpu device and queue, shared by the ranks placed on it.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    id: u64,
    pipelines: Mutex<HashMap<String, Arc<Pipeline>>>,
    pipelines_built: AtomicU64,
    state: Mutex<State>,
    error: Arc<Mutex<Option<String>>>,
    lost: Arc<Mutex<Option<String>>>,
    poison: AtomicBool,
    /// The first rank placed on this device, for error messages.
    first_rank: usize,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.info.name)
            .field("backend", &self.info.backend)
            .field("id", &self.id)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave our state half-written in a
    // way that matters more than losing the whole mesh, so keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Pool buckets: exact sizes rounded up to 256 bytes, so the same shapes reuse
/// the same buffers step after step.
fn bucket(bytes: u64) -> u64 {
    bytes.max(4).div_ceil(256) * 256
}

impl Gpu {
    /// Wrap a device that was just requested; installs the error handlers.
    pub(crate) fn new(
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: wgpu::AdapterInfo,
        first_rank: usize,
    ) -> Arc<Self> {
        let error = Arc::new(Mutex::new(None::<String>));
        let lost = Arc::new(Mutex::new(None::<String>));
        {
            // wgpu's default handler panics; keep the first error for the next sync point.
            let error = error.clone();
            device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                let mut slot = lock(&error);
                if slot.is_none() {
                    *slot = Some(e.to_string());
                }
            }));
            let lost = lost.clone();
            device.set_device_lost_callback(move |reason, msg| {
                if reason != wgpu::DeviceLostReason::Destroyed {
                    *lock(&lost) = Some(format!("{reason:?}: {msg}"));
                }
            });
        }
        let limits = device.limits();
        Arc::new(Gpu {
            device,
            queue,
            info,
            limits,
            id: NEXT_GPU_ID.fetch_add(1, Ordering::Relaxed),
            pipelines: Mutex::new(HashMap::new()),
            pipelines_built: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            error,
            lost,
            poison: AtomicBool::new(false),
            first_rank,
        })
    }

    /// The adapter this device was opened on.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The limits the device was opened with (the adapter's own).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The features the device was opened with.
    pub fn features(&self) -> wgpu::Features {
        self.device.features()
    }

    /// The raw wgpu device, for users who want to add their own kernels.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The raw wgpu queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// A process-unique id, used to tell devices apart.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this is a software (CPU) adapter such as lavapipe, llvmpipe or WARP.
    pub fn is_cpu(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Number of pipelines compiled on this device so far.
    pub fn pipelines_built(&self) -> u64 {
        self.pipelines_built.load(Ordering::Relaxed)
    }

    /// Number of buffers created so far (pool misses).
    pub fn buffers_allocated(&self) -> u64 {
        lock(&self.state).allocations
    }

    /// When on, every kernel output buffer is filled with `0xFFFFFFFF` (NaN as
    /// f32) before the kernel runs, so elements a kernel forgot to write show.
    pub fn set_poison(&self, on: bool) {
        self.poison.store(on, Ordering::Relaxed);
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

    /// Check a byte size against the storage-binding limit.
    pub(crate) fn check_binding(&self, op: &'static str, bytes: u64) -> Result<()> {
        let limit = self.limits.max_storage_buffer_binding_size;
        if bytes > limit {
            return Err(Error::TooLarge {
                op,
                what: "a tensor",
                needed: bytes,
                limit,
                limit_name: "max_storage_buffer_binding_size",
            });
        }
        let limit = self.limits.max_buffer_size;
        if bytes > limit {
            return Err(Error::TooLarge {
                op,
                what: "a tensor",
                needed: bytes,
                limit,
                limit_name: "max_buffer_size",
            });
        }
        Ok(())
    }

    /// Take a storage buffer of at least `bytes` from the pool (or create one).
    pub(crate) fn take_buffer(&self, bytes: u64) -> (u64, wgpu::Buffer) {
        let size = bucket(bytes);
        let mut st = lock(&self.state);
        if let Some(b) = st.free.get_mut(&size).and_then(|v| v.pop()) {
            return (size, b);
        }
        drop(st);
        self.new_buffer(bytes)
    }

    /// Create a storage buffer of at least `bytes` without taking one from the
    /// free list; it joins the pool when dropped. For long-lived state created
    /// mid-training (optimiser moments): taking free pooled buffers for it
    /// would leave the next step short of the temporaries the previous one
    /// used, so that step would allocate again.
    pub(crate) fn new_buffer(&self, bytes: u64) -> (u64, wgpu::Buffer) {
        let size = bucket(bytes);
        lock(&self.state).allocations += 1;
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

    /// Hand a buffer back; it is reusable after the next submit.
    pub(crate) fn retire_buffer(&self, size: u64, buffer: wgpu::Buffer) {
        let mut st = lock(&self.state);
        if st.encoder.is_some() {
            st.retired.push((size, buffer));
        } else {
            st.free.entry(size).or_default().push(buffer);
        }
    }

    /// Fill a fresh output buffer with NaN bits when poisoning is on.
    pub(crate) fn maybe_poison(&self, buffer: &wgpu::Buffer, bytes: u64) {
        if bytes > 0 && self.poison.load(Ordering::Relaxed) {
            let fill = vec![0xFFu8; bytes.div_ceil(4) as usize * 4];
            self.queue.write_buffer(buffer, 0, &fill);
        }
    }

    /// Find or build the pipeline for `spec` (built once per device).
    pub(crate) fn pipeline(&self, spec: &KernelSpec) -> Result<Arc<Pipeline>> {
        let key = spec.key();
        if let Some(p) = lock(&self.pipelines).get(&key) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(spec.family),
                source: wgpu::ShaderSource::Wgsl(spec.source.into()),
            });
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }];
        for (i, a) in spec.bindings.iter().enumerate() {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: i as u32 + 1,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage {
                        read_only: *a == Access::Read,
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let layout = self
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(spec.family),
                entries: &entries,
            });
        let pl = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(spec.family),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(spec.entry),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(spec.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &spec.constants,
                    // Our kernels write workgroup memory before reading it; the
                    // zero-fill costs 10-50 s of compile time on GL llvmpipe.
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Shader {
                name: spec.family,
                message: format!("entry {}: {e}", spec.entry),
            });
        }
        let p = Arc::new(Pipeline { pipeline, layout });
        self.pipelines_built.fetch_add(1, Ordering::Relaxed);
        lock(&self.pipelines).insert(key, p.clone());
        Ok(p)
    }

    /// Run `f` with the pending command encoder (created on demand).
    pub(crate) fn record<R>(&self, f: impl FnOnce(&mut wgpu::CommandEncoder) -> R) -> R {
        let mut st = lock(&self.state);
        let enc = st.encoder.get_or_insert_with(|| {
            self.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("wgpu-tp"),
                })
        });
        let r = f(enc);
        st.recorded += 1;
        let full = st.recorded >= MAX_RECORDED;
        drop(st);
        if full {
            self.flush();
        }
        r
    }

    /// Submit everything recorded so far (no wait). Retired buffers become reusable.
    pub fn flush(&self) -> Option<wgpu::SubmissionIndex> {
        // Submit while holding the state lock: a retired buffer must not be
        // handed out (and written with `write_buffer`, which lands at the start
        // of the next submit) before the encoder that still uses it is submitted,
        // or the write would overtake those commands.
        let mut st = lock(&self.state);
        let enc = st.encoder.take();
        st.recorded = 0;
        let index = enc.map(|e| self.queue.submit([e.finish()]));
        let retired = std::mem::take(&mut st.retired);
        for (size, b) in retired {
            st.free.entry(size).or_default().push(b);
        }
        index
    }

    /// Submit pending work and block until the device is idle.
    pub fn synchronize(&self) -> Result<()> {
        self.flush();
        self.wait()?;
        self.check()
    }

    /// Block until all submitted work is done.
    pub(crate) fn wait(&self) -> Result<()> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| Error::Wgpu {
                rank: self.first_rank,
                message: e.to_string(),
            })
    }

    /// Take a MAP_READ staging buffer of `size` bytes (a multiple of 4).
    pub(crate) fn take_staging(&self, size: u64) -> wgpu::Buffer {
        let size = size.max(4);
        let mut st = lock(&self.state);
        if let Some(b) = st.staging.get_mut(&size).and_then(|v| v.pop()) {
            return b;
        }
        st.allocations += 1;
        drop(st);
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-tp staging"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Give a staging buffer (unmapped) back to the pool.
    pub(crate) fn return_staging(&self, buffer: wgpu::Buffer) {
        let size = buffer.size();
        lock(&self.state)
            .staging
            .entry(size)
            .or_default()
            .push(buffer);
    }

    /// Take a MAP_WRITE | COPY_SRC upload staging buffer of `size` bytes (a
    /// multiple of 4) and whether it is mapped already: a fresh one is created
    /// mapped; a pooled one must be mapped with `map_async(Write)` first.
    ///
    /// Host-staged collectives write their results straight into these and
    /// copy them into the output on the device, instead of `write_buffer`,
    /// which allocates a fresh staging buffer inside wgpu on every call.
    pub(crate) fn take_upload_staging(&self, size: u64) -> (wgpu::Buffer, bool) {
        let size = size.max(4);
        let mut st = lock(&self.state);
        if let Some(b) = st.upload_staging.get_mut(&size).and_then(|v| v.pop()) {
            return (b, false);
        }
        st.allocations += 1;
        drop(st);
        let b = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-tp upload staging"),
            size,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        });
        (b, true)
    }

    /// Give an upload staging buffer back to the pool. It must be unmapped and
    /// every command that uses it already submitted (mapping it again then
    /// waits for those commands, which wgpu tracks).
    pub(crate) fn return_upload_staging(&self, buffer: wgpu::Buffer) {
        let size = buffer.size();
        lock(&self.state)
            .upload_staging
            .entry(size)
            .or_default()
            .push(buffer);
    }

    /// Drop every pooled buffer that nothing uses (frees device memory).
    pub fn trim_pool(&self) {
        let mut st = lock(&self.state);
        st.free.clear();
        st.staging.clear();
        st.upload_staging.clear();
    }
}

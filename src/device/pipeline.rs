//! Compute pipelines: what a kernel declares ([`KernelSpec`]: WGSL source,
//! entry point, bindings, override constants) and the per-device cache that
//! compiles each one once. Compilation is the expensive part on software
//! adapters, so the cache also counts pipelines and the time spent building
//! them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use web_time::Instant;

use crate::error::{Error, Result};

/// How a kernel binds one resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Access {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    ReadWrite,
    /// `var<uniform>`: a small operand every invocation reads at the same
    /// addresses (CPU adapters load uniforms without per-lane loops).
    Uniform,
    /// `texture_2d<f32>` read with `textureLoad`: a matrix copied into an
    /// RGBA texture (`texture.rs`).
    Texture,
    /// `texture_storage_2d<format, read>`: the same texture bound as a
    /// read-only storage texture, whose loads skip the sampler's level
    /// logic (cheaper fetches on lavapipe).
    StorageTexture(wgpu::TextureFormat),
}

impl Access {
    /// Whether a texture view, not a buffer, fills this binding.
    pub(crate) fn is_texture(self) -> bool {
        matches!(self, Access::Texture | Access::StorageTexture(_))
    }
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
    /// Bindings after the uniform at binding 0, in binding order.
    pub bindings: &'static [Access],
    /// Values for WGSL `override` constants.
    pub constants: Vec<(&'static str, f64)>,
    /// Storage buffers declared as `array<vec4<f32>>`: bound in whole
    /// vec4s ([`KernelSpec::in_vec4s`]).
    pub vec4s: bool,
}

impl KernelSpec {
    /// A kernel of `family` (its WGSL `source`) at `entry`, with the uniform
    /// at binding 0 and `bindings` after it, and no override constants.
    pub(crate) fn new(
        family: &'static str,
        source: &'static str,
        bindings: &'static [Access],
        entry: &'static str,
    ) -> Self {
        KernelSpec {
            family,
            source,
            entry,
            bindings,
            constants: Vec::new(),
            vec4s: false,
        }
    }

    /// The same kernel with its storage buffers read and written as
    /// `array<vec4<f32>>`: each is bound with its size rounded up to 16
    /// bytes (pooled buffers come in 256-byte buckets, so the room is
    /// there), and the kernel may write the pad past a tensor's last
    /// element, which nothing reads. Lavapipe loads storage lane by lane,
    /// so a vec4 per invocation makes element-wise kernels much faster
    /// there, for a longer compile.
    pub(crate) fn in_vec4s(mut self) -> Self {
        self.vec4s = true;
        self
    }

    /// The same kernel with these values for its WGSL `override` constants.
    pub(crate) fn with_constants(mut self, constants: Vec<(&'static str, f64)>) -> Self {
        self.constants = constants;
        self
    }

    fn key(&self) -> String {
        let mut k = format!("{}::{}", self.family, self.entry);
        for (n, v) in &self.constants {
            k.push_str(&format!(";{n}={v}"));
        }
        k
    }
}

/// A compiled pipeline and the bind-group layout its bind groups follow.
pub(crate) struct Pipeline {
    pub pipeline: wgpu::ComputePipeline,
    pub bind_group_layout: wgpu::BindGroupLayout,
}

/// Pipelines of one device by [`KernelSpec`] key, and what building them cost.
#[derive(Default)]
pub(super) struct PipelineCache {
    built: Mutex<HashMap<String, Arc<Pipeline>>>,
    count: AtomicU64,
    nanos: AtomicU64,
}

impl PipelineCache {
    /// Pipelines compiled so far.
    pub(super) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Wall time spent compiling so far.
    pub(super) fn build_time(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Find or build the pipeline for `spec` on `device` (built once).
    pub(super) fn get_or_build(
        &self,
        device: &wgpu::Device,
        spec: &KernelSpec,
    ) -> Result<Arc<Pipeline>> {
        let key = spec.key();
        let built = || self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = built().get(&key) {
            return Ok(p.clone());
        }
        let started = Instant::now();
        let p = Arc::new(build(device, spec)?);
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        built().insert(key, p.clone());
        Ok(p)
    }
}

/// Invocations per workgroup of the element grid (`WG` in `shaders/grid.wgsl`)
/// on a device with these limits: 256, or the largest power of two the
/// device allows (GLES 3.1 and Vulkan only guarantee 128).
pub(crate) fn grid_workgroup(limits: &wgpu::Limits) -> u32 {
    let cap = limits
        .max_compute_invocations_per_workgroup
        .min(limits.max_compute_workgroup_size_x)
        .clamp(1, 256);
    1 << (31 - cap.leading_zeros())
}

fn build(device: &wgpu::Device, spec: &KernelSpec) -> Result<Pipeline> {
    let limits = device.limits();
    let storage = spec.bindings.iter().filter(|a| !a.is_texture()).count() as u32;
    if storage > limits.max_storage_buffers_per_shader_stage {
        return Err(Error::DeviceLimit {
            op: format!("{}::{}", spec.family, spec.entry),
            limit_name: "max_storage_buffers_per_shader_stage",
            needed: storage.into(),
            limit: limits.max_storage_buffers_per_shader_stage.into(),
        });
    }
    // The element grid's workgroup size follows the device (see grid_workgroup).
    let mut constants = spec.constants.clone();
    if spec.source.contains("override WG:") && !constants.iter().any(|(n, _)| *n == "WG") {
        constants.push(("WG", grid_workgroup(&limits).into()));
    }
    // A browser cannot wait for the scope: there a shader error reaches the
    // uncaptured-error handler and the next readback returns it.
    #[cfg(not(target_arch = "wasm32"))]
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(spec.family),
        source: wgpu::ShaderSource::Wgsl(spec.source.into()),
    });
    let buffer_entry = |binding: u32, ty: wgpu::BufferBindingType| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries = vec![buffer_entry(0, wgpu::BufferBindingType::Uniform)];
    for (i, a) in spec.bindings.iter().enumerate() {
        let binding = i as u32 + 1;
        entries.push(match a {
            Access::Texture => wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Texture {
                    sample_type: wgpu::TextureSampleType::Float { filterable: false },
                    view_dimension: wgpu::TextureViewDimension::D2,
                    multisampled: false,
                },
                count: None,
            },
            Access::StorageTexture(format) => wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::StorageTexture {
                    access: wgpu::StorageTextureAccess::ReadOnly,
                    format: *format,
                    view_dimension: wgpu::TextureViewDimension::D2,
                },
                count: None,
            },
            Access::Uniform => buffer_entry(binding, wgpu::BufferBindingType::Uniform),
            _ => buffer_entry(
                binding,
                wgpu::BufferBindingType::Storage {
                    read_only: *a == Access::Read,
                },
            ),
        });
    }
    let bind_group_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(spec.family),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(spec.family),
        bind_group_layouts: &[Some(&bind_group_layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(spec.entry),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(spec.entry),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: &constants,
            // Our kernels write workgroup memory before reading it; the
            // zero-fill costs 10-50 s of compile time on GL llvmpipe.
            zero_initialize_workgroup_memory: false,
        },
        cache: None,
    });
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(Error::Shader {
            name: spec.family,
            message: format!("entry {}: {e}", spec.entry),
        });
    }
    Ok(Pipeline {
        pipeline,
        bind_group_layout,
    })
}

//! Choosing adapters and opening the ranks' wgpu devices.
//!
//! Default: a hardware adapter if there is one, else a software one in the
//! order Vulkan (lavapipe), GL (llvmpipe through EGL), DX12 (WARP). The
//! environment variables `WGPU_BACKEND` (e.g. `vulkan`, `gl`) and
//! `WGPU_ADAPTER_NAME` (case-insensitive substring) narrow the choice the way
//! wgpu's own tools do, but a mismatch is an [`Error`], never a panic.
//! The settings' `trace` (`WGPU_TP_TRACE`) traces the mesh from build to
//! drop ([`MeshBuilder::trace_to`]), their `limits` (`WGPU_TP_LIMITS`)
//! open the devices with weaker limits ([`MeshBuilder::limits`]).

use std::path::PathBuf;

use super::adapters::{instance_for, parse_backends};
use super::mesh::{DeviceLayout, Mesh};
use super::open::open;
use super::rank::Rank;
use super::settings::current;
use crate::error::{Error, Result};

/// Builder for a [`Mesh`]: backend, adapter, power preference and placement.
#[derive(Clone, Debug)]
pub struct MeshBuilder {
    ranks: usize,
    backends: Option<wgpu::Backends>,
    adapter_name: Option<String>,
    power: wgpu::PowerPreference,
    allow_software: bool,
    force_software: bool,
    use_env: bool,
    /// `None`: [`DeviceLayout::default_for`] the adapter chosen.
    layout: Option<DeviceLayout>,
    trace_path: Option<PathBuf>,
    limits: Option<wgpu::Limits>,
    without_features: wgpu::Features,
    pub(super) memory_hints: wgpu::MemoryHints,
    pub(super) mpi_timeout: Option<std::time::Duration>,
    /// Named axes (`axes.rs`); empty for none.
    pub(super) axes: Vec<(String, usize)>,
}

impl Default for MeshBuilder {
    fn default() -> Self {
        Self::new()
    }
}

fn backend_rank(b: wgpu::Backend) -> u32 {
    match b {
        wgpu::Backend::Vulkan => 0,
        wgpu::Backend::Metal => 1,
        wgpu::Backend::Dx12 => 2,
        wgpu::Backend::Gl => 3,
        _ => 4,
    }
}

impl Mesh {
    /// `n` simulated ranks on the default adapter, sharing one wgpu device
    /// where `n` > 1 ([`DeviceLayout::default_for`]). See [`MeshBuilder`] for other choices.
    pub fn simulated(n: usize) -> Result<Mesh> {
        MeshBuilder::new().ranks(n).build()
    }
}

impl MeshBuilder {
    /// One simulated rank on the default adapter, honouring the environment.
    pub fn new() -> Self {
        MeshBuilder {
            ranks: 1,
            backends: None,
            adapter_name: None,
            power: wgpu::PowerPreference::HighPerformance,
            allow_software: true,
            force_software: false,
            use_env: true,
            layout: None,
            trace_path: None,
            limits: None,
            without_features: wgpu::Features::empty(),
            memory_hints: wgpu::MemoryHints::Performance,
            mpi_timeout: None,
            axes: Vec::new(),
        }
    }

    /// Do not turn on these optional features even where the adapter has
    /// them (the crate asks for `SHADER_F16`, `TIMESTAMP_QUERY` and `SUBGROUP`): to try
    /// the path users without them take, e.g. that f16 gives
    /// [`Error::Unsupported`].
    pub fn without_features(mut self, features: wgpu::Features) -> Self {
        self.without_features = features;
        self
    }

    /// Open every device with these limits instead of the adapter's own, to
    /// check that a model fits a weaker adapter: `wgpu::Limits::default()`
    /// (what browsers' WebGPU guarantees) or `downlevel_defaults()` (GLES
    /// 3.1-class). Each limit must be within the adapter's. Kernels that need
    /// more than a limit allows fail with [`Error::DeviceLimit`] naming it.
    /// `WGPU_TP_LIMITS=webgpu` or `downlevel` (the settings' `limits`) does
    /// the same.
    pub fn limits(mut self, limits: wgpu::Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    fn resolved_limits(&self) -> Option<wgpu::Limits> {
        if self.limits.is_some() || !self.use_env {
            return self.limits.clone();
        }
        current().limits.limits()
    }

    /// How wgpu suballocates each device's memory (default
    /// `wgpu::MemoryHints::Performance`: blocks of 128–256 MiB). On a CPU
    /// adapter device memory is the process's own; smaller blocks
    /// (`MemoryUsage`, or `Manual` with a few MiB) give freed memory back
    /// sooner, so the process peaks lower, and run slower (BENCHMARKS.md
    /// measures both on GPT-2's training step).
    pub fn memory_hints(mut self, hints: wgpu::MemoryHints) -> Self {
        self.memory_hints = hints;
        self
    }

    /// Lay the ranks out over named axes, row-major (the last axis
    /// fastest), e.g. `axes(&[("dp", 2), ("tp", 2)])`; sets the number of
    /// ranks to the sizes' product (over MPI or one rank per adapter, the
    /// product must equal the number of processes or adapters). See
    /// [`Mesh::with_axes`] and [`Mesh::axis`].
    pub fn axes(mut self, axes: &[(&str, usize)]) -> Self {
        self.axes = axes.iter().map(|(n, s)| (n.to_string(), *s)).collect();
        self.ranks(axes.iter().fold(1usize, |acc, a| acc.saturating_mul(a.1)))
    }

    /// Number of ranks (ignored for [`DeviceLayout::PerAdapter`]).
    pub fn ranks(mut self, n: usize) -> Self {
        self.ranks = n;
        self
    }

    /// Restrict to these backends (overrides `WGPU_BACKEND`).
    pub fn backends(mut self, b: wgpu::Backends) -> Self {
        self.backends = Some(b);
        self
    }

    /// Restrict to adapters whose name contains `name`, case-insensitively
    /// (overrides `WGPU_ADAPTER_NAME`).
    pub fn adapter_name(mut self, name: impl Into<String>) -> Self {
        self.adapter_name = Some(name.into());
        self
    }

    /// Prefer low-power (integrated) or high-performance (discrete) hardware.
    pub fn power_preference(mut self, p: wgpu::PowerPreference) -> Self {
        self.power = p;
        self
    }

    /// Whether a software adapter may be used when no hardware one matches (default true).
    pub fn allow_software(mut self, allow: bool) -> Self {
        self.allow_software = allow;
        self
    }

    /// Use only software adapters (lavapipe, llvmpipe, WARP).
    pub fn force_software(mut self, force: bool) -> Self {
        self.force_software = force;
        self
    }

    /// Whether `WGPU_BACKEND` / `WGPU_ADAPTER_NAME` are read, and the
    /// process's [`Settings`](crate::Settings) `trace` and `limits`
    /// (`WGPU_TP_TRACE`, `WGPU_TP_LIMITS`) apply (default true).
    pub fn use_env(mut self, on: bool) -> Self {
        self.use_env = on;
        self
    }

    /// How ranks are laid onto adapters (default:
    /// [`DeviceLayout::default_for`] the adapter chosen).
    pub fn layout(mut self, p: DeviceLayout) -> Self {
        self.layout = Some(p);
        self
    }

    /// Trace the mesh from when it is built until it is dropped, then write
    /// the trace to `path` as Chrome trace-event JSON (overrides
    /// `WGPU_TP_TRACE`, which does the same). The file is written when the
    /// last handle to the mesh drops, unless [`Mesh::stop_trace`] took the
    /// trace first; a failure to write is reported on stderr, as a
    /// destructor cannot return it. A later mesh of this process given the
    /// same path writes `stem-2.ext`, then `stem-3.ext`, … instead.
    pub fn trace_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.trace_path = Some(path.into());
        self
    }

    fn resolved_trace_path(&self) -> Option<PathBuf> {
        if self.trace_path.is_some() || !self.use_env {
            return self.trace_path.clone();
        }
        current().trace.clone()
    }

    /// Shorthand for `layout(DeviceLayout::SharedDevice)`.
    pub fn shared_device(self) -> Self {
        self.layout(DeviceLayout::SharedDevice)
    }

    /// Shorthand for `layout(DeviceLayout::PerAdapter)`.
    pub fn per_adapter(self) -> Self {
        self.layout(DeviceLayout::PerAdapter)
    }

    fn resolved_backends(&self) -> Result<wgpu::Backends> {
        if let Some(b) = self.backends {
            return Ok(b);
        }
        if self.use_env
            && let Ok(v) = std::env::var("WGPU_BACKEND")
            && !v.trim().is_empty()
        {
            return parse_backends(&v);
        }
        Ok(wgpu::Backends::all())
    }

    fn resolved_name(&self) -> Option<String> {
        if self.adapter_name.is_some() {
            return self.adapter_name.clone();
        }
        if self.use_env {
            std::env::var("WGPU_ADAPTER_NAME")
                .ok()
                .filter(|s| !s.trim().is_empty())
        } else {
            None
        }
    }

    /// Matching adapters, best first.
    pub(super) async fn candidates(
        &self,
        instance: &wgpu::Instance,
        backends: wgpu::Backends,
    ) -> Vec<wgpu::Adapter> {
        let name = self.resolved_name().map(|s| s.to_lowercase());
        let mut list: Vec<wgpu::Adapter> = instance
            .enumerate_adapters(backends)
            .await
            .into_iter()
            .filter(|a| {
                let info = a.get_info();
                let is_cpu = info.device_type == wgpu::DeviceType::Cpu;
                name.as_ref()
                    .is_none_or(|n| info.name.to_lowercase().contains(n.as_str()))
                    && (!self.force_software || is_cpu)
                    && (self.allow_software || !is_cpu)
            })
            .collect();
        let power = self.power;
        list.sort_by_key(|a| {
            let i = a.get_info();
            let hw = match (i.device_type, power) {
                (wgpu::DeviceType::DiscreteGpu, wgpu::PowerPreference::LowPower) => 1,
                (wgpu::DeviceType::DiscreteGpu, _) => 0,
                (wgpu::DeviceType::IntegratedGpu, wgpu::PowerPreference::LowPower) => 0,
                (wgpu::DeviceType::IntegratedGpu, _) => 1,
                (wgpu::DeviceType::VirtualGpu, _) => 2,
                (wgpu::DeviceType::Other, _) => 3,
                (wgpu::DeviceType::Cpu, _) => 4,
            };
            (hw, backend_rank(i.backend))
        });
        list
    }

    /// Open the devices and build the mesh (tracing it when
    /// [`MeshBuilder::trace_to`] or `WGPU_TP_TRACE` asks). Blocks; in a
    /// browser use [`MeshBuilder::build_async`].
    pub fn build(self) -> Result<Mesh> {
        super::wait::block_on("MeshBuilder::build", self.build_async())
    }

    /// [`MeshBuilder::build`] as a future (requesting adapters and devices
    /// is asynchronous in WebGPU). In a browser a page gets one device, so
    /// there the default layout is [`DeviceLayout::SharedDevice`].
    pub async fn build_async(self) -> Result<Mesh> {
        let mut mesh = self.open_mesh().await?;
        if !self.axes.is_empty() {
            let axes: Vec<(&str, usize)> =
                self.axes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
            mesh = mesh.with_axes(&axes)?;
        }
        if let Some(path) = self.resolved_trace_path() {
            mesh.trace_until_drop(&path)?;
        }
        Ok(mesh)
    }

    async fn open_mesh(&self) -> Result<Mesh> {
        let any_count = matches!(
            self.layout,
            Some(DeviceLayout::PerAdapter | DeviceLayout::Process)
        );
        if self.ranks == 0 && !any_count {
            return Err(Error::invalid(
                "MeshBuilder::build",
                "a mesh needs at least one rank",
            ));
        }
        let one_device_each = match self.layout {
            Some(DeviceLayout::Simulated) => self.ranks > 1,
            Some(DeviceLayout::Process) => true,
            _ => false,
        };
        if cfg!(target_arch = "wasm32") && one_device_each {
            return Err(Error::invalid(
                "MeshBuilder::build",
                "a browser gives a page one WebGPU device, so its ranks share it: use \
                 MeshBuilder::shared_device() (the default in a browser)",
            ));
        }
        let backends = self.resolved_backends()?;
        let limits = self.resolved_limits();
        let limits = (limits.as_ref(), self.without_features, &self.memory_hints);
        let instance = instance_for(backends);
        let list = self.candidates(&instance, backends).await;
        if list.is_empty() {
            let mut detail = String::new();
            if backends != wgpu::Backends::all() {
                detail.push_str(&format!(" for backends {backends:?}"));
            }
            if let Some(n) = self.resolved_name() {
                detail.push_str(&format!(" named like {n:?}"));
            }
            if cfg!(target_arch = "wasm32") {
                detail.push_str(
                    " (this browser gave no WebGPU adapter: it needs WebGPU, on Linux Chrome with --enable-unsafe-webgpu; chrome://gpu tells)",
                );
            }
            if self.force_software {
                detail.push_str(" (software only)");
            } else if !self.allow_software {
                detail.push_str(" (hardware only)");
            }
            return Err(Error::NoAdapter { detail });
        }
        let layout = self.layout.unwrap_or_else(|| {
            DeviceLayout::default_for(list[0].get_info().device_type, self.ranks)
        });
        match layout {
            DeviceLayout::Simulated => {
                let adapter = &list[0];
                let mut ranks = Vec::with_capacity(self.ranks);
                for r in 0..self.ranks {
                    ranks.push(Rank {
                        index: r,
                        device: open(adapter, r, limits).await?,
                    });
                }
                Ok(Mesh::from_parts(instance, ranks, layout))
            }
            DeviceLayout::SharedDevice => {
                let device = open(&list[0], 0, limits).await?;
                let ranks = (0..self.ranks)
                    .map(|r| Rank {
                        index: r,
                        device: device.clone(),
                    })
                    .collect();
                Ok(Mesh::from_parts(instance, ranks, layout))
            }
            DeviceLayout::PerAdapter => {
                // The same chip shows up under several backends (llvmpipe on
                // Vulkan and GL): keep the best-ranked entry of each.
                let mut seen: Vec<(String, u32, u32)> = Vec::new();
                let mut ranks = Vec::new();
                for a in &list {
                    let i = a.get_info();
                    let key = (i.name.clone(), i.vendor, i.device);
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key);
                    let r = ranks.len();
                    ranks.push(Rank {
                        index: r,
                        device: open(a, r, limits).await?,
                    });
                }
                Ok(Mesh::from_parts(instance, ranks, layout))
            }
            DeviceLayout::Process => self.open_process_mesh(instance, &list, limits).await,
        }
    }
}

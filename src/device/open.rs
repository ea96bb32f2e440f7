//! Opening one wgpu device on an adapter, with the limits asked for and the
//! optional features the crate uses.

use std::sync::{Arc, Mutex, Weak};

use super::context::Device;
use crate::error::{Error, Result};

const COOP: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;

/// How [`open`] opens each device: limits (else the adapter's own), optional
/// features not to turn on, and how its memory is suballocated.
pub(super) type OpenWith<'a> = (
    Option<&'a wgpu::Limits>,
    wgpu::Features,
    &'a wgpu::MemoryHints,
);

/// Open a device as its [`OpenWith`] says, with the optional features the
/// adapter has.
pub(super) async fn open(
    adapter: &wgpu::Adapter,
    rank: usize,
    (limits, without, hints): OpenWith<'_>,
) -> Result<Arc<Device>> {
    let info = adapter.get_info();
    let limits = limits.cloned().unwrap_or_else(|| adapter.limits());
    let coop = super::capability::coop_f16(adapter, &limits) && !without.contains(COOP);
    let wanted = (wgpu::Features::SHADER_F16
        | wgpu::Features::TIMESTAMP_QUERY
        | wgpu::Features::SUBGROUP
        | if coop { COOP } else { wgpu::Features::empty() })
        - without;
    let desc = wgpu::DeviceDescriptor {
        label: Some("wgpu-tp rank"),
        required_features: adapter.features() & wanted,
        required_limits: limits,
        experimental_features: if coop {
            // SAFETY: wgpu marks cooperative matrices experimental; the one
            // kernel using them (`shaders/gemm_coop.wgsl`) is checked
            // against f64 on the adapters that offer them.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        },
        memory_hints: hints.clone(),
        trace: wgpu::Trace::Off,
    };
    let (device, queue) = adapter.request_device(&desc).await.map_err(|e| {
        let open = live_devices();
        // GPU drivers open a limited number of devices per process (the
        // NVIDIA driver refuses with VK_ERROR_INITIALIZATION_FAILED, which
        // wgpu reports as a lost device); say what to do about it.
        let hint = if open > 0 {
            format!(
                " ({open} devices of this process are open, and a GPU driver opens a limited number: \
                 build meshes with MeshBuilder::shared_device() to put every rank on one device, \
                 or drop meshes no longer in use)"
            )
        } else {
            String::new()
        };
        Error::RequestDevice {
            adapter: info.name.clone(),
            message: format!("{e}{hint}"),
        }
    })?;
    let device = Device::new(device, queue, info, rank, coop);
    let mut opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    opened.retain(|d| d.strong_count() > 0);
    opened.push(Arc::downgrade(&device));
    Ok(device)
}

/// The devices this process opened, to count the live ones in errors.
static OPENED: Mutex<Vec<Weak<Device>>> = Mutex::new(Vec::new());

/// How many devices this process has open.
fn live_devices() -> usize {
    let opened = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    opened.iter().filter(|d| d.strong_count() > 0).count()
}

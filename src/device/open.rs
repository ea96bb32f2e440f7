//! Opening one wgpu device on an adapter, with the limits asked for and the
//! optional features the crate uses.

use std::sync::Arc;

use super::context::Device;
use crate::error::{Error, Result};

/// Open a device with `limits` (else the adapter's own) and the optional
/// features the adapter has, less `without`.
pub(super) async fn open(
    adapter: &wgpu::Adapter,
    rank: usize,
    (limits, without): (Option<&wgpu::Limits>, wgpu::Features),
) -> Result<Arc<Device>> {
    let info = adapter.get_info();
    let wanted =
        (wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP)
            - without;
    let desc = wgpu::DeviceDescriptor {
        label: Some("wgpu-tp rank"),
        required_features: adapter.features() & wanted,
        required_limits: limits.cloned().unwrap_or_else(|| adapter.limits()),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    };
    let (device, queue) =
        adapter
            .request_device(&desc)
            .await
            .map_err(|e| Error::RequestDevice {
                adapter: info.name.clone(),
                message: e.to_string(),
            })?;
    Ok(Device::new(device, queue, info, rank))
}

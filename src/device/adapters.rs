//! What wgpu can see: every adapter with its limits and features
//! ([`adapters`], what `cargo run --example devices` prints), and parsing the
//! `WGPU_BACKEND`-style backend lists [`MeshBuilder`](super::MeshBuilder) honours.

use crate::error::{Error, Result};

/// What [`adapters`] reports for one adapter.
#[derive(Clone, Debug)]
pub struct AdapterReport {
    /// wgpu's adapter info (name, backend, type, driver).
    pub info: wgpu::AdapterInfo,
    /// The adapter's own limits.
    pub limits: wgpu::Limits,
    /// The adapter's features.
    pub features: wgpu::Features,
    /// The cooperative-matrix shapes it multiplies (empty without
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX`).
    pub cooperative_matrix: Vec<wgpu::CooperativeMatrixProperties>,
}

/// Every adapter wgpu can see on the given backends (all if `None`).
/// Blocks; in a browser, where this returns an empty list, use
/// [`adapters_async`].
pub fn adapters(backends: Option<wgpu::Backends>) -> Vec<AdapterReport> {
    super::wait::block_on("adapters", async { Ok(adapters_async(backends).await) })
        .unwrap_or_default()
}

/// [`adapters`] as a future (in a browser: the one adapter the page gets).
pub async fn adapters_async(backends: Option<wgpu::Backends>) -> Vec<AdapterReport> {
    let backends = backends.unwrap_or(wgpu::Backends::all());
    instance_for(backends)
        .enumerate_adapters(backends)
        .await
        .into_iter()
        .map(|a| AdapterReport {
            info: a.get_info(),
            limits: a.limits(),
            features: a.features(),
            cooperative_matrix: a.cooperative_matrix_properties(),
        })
        .collect()
}

/// A wgpu instance for these backends, without a display.
pub(super) fn instance_for(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// Parse a `WGPU_BACKEND`-style comma list, rejecting names wgpu does not know.
pub fn parse_backends(list: &str) -> Result<wgpu::Backends> {
    let mut out = wgpu::Backends::empty();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let b = wgpu::Backends::from_comma_list(name);
        if b.is_empty() {
            return Err(Error::UnknownBackend(name.to_string()));
        }
        out |= b;
    }
    if out.is_empty() {
        return Err(Error::UnknownBackend(list.to_string()));
    }
    Ok(out)
}

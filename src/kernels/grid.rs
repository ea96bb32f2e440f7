//! The one-invocation-per-element grid that most kernel families share:
//! `shaders/grid.wgsl` (the `WG` workgroup size and `linear_id`) composed in
//! front of each family's source, since WGSL has no include.

use crate::device::Device;

/// Workgroups for one invocation per element over `elements` on `device`:
/// the pipeline cache sets `WG` to [`Device::grid_workgroup`] (256, or what
/// a weaker device allows), and the dispatch must use the same number.
pub(crate) fn grid_groups(device: &Device, elements: usize) -> u64 {
    (elements as u64).div_ceil(device.grid_workgroup().into())
}

/// A family's WGSL source with the grid prefix in front:
/// `grid_source!("elementwise.wgsl")`.
macro_rules! grid_source {
    ($file:literal) => {
        concat!(
            include_str!("../../shaders/grid.wgsl"),
            include_str!(concat!("../../shaders/", $file))
        )
    };
}
pub(crate) use grid_source;

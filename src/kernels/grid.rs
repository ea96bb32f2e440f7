//! The one-invocation-per-element grid that most kernel families share:
//! `shaders/grid.wgsl` (the `WG` workgroup size and `linear_id`) composed in
//! front of each family's source, since WGSL has no include.

/// Invocations per workgroup of the element grid: `grid.wgsl`'s `WG` default.
pub(crate) const GRID_WORKGROUP: u64 = 256;

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

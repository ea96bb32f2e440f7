//! Layer 2, kernels: one typed Rust wrapper per WGSL shader family in
//! `shaders/`. Each wrapper checks shapes, dtypes and ranks, allocates its
//! output on the operands' rank, and records one or more dispatches into that
//! device's pending encoder without waiting.

pub(crate) mod collective;
pub mod elementwise;

pub use elementwise::{Activation, activation, activation_backward, add, axpby, scale};

/// Every shader family's WGSL source by name, for validation and translation tests.
pub const SHADERS: &[(&str, &str)] = &[
    (
        "elementwise",
        include_str!("../../shaders/elementwise.wgsl"),
    ),
    ("collective", include_str!("../../shaders/collective.wgsl")),
];

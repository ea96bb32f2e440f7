//! Layer 4, `src/tensor/`: the distributed tensor and the conjugate mappings.
//! - `dtensor`: placements, redistribution, construction checks;
//! - `mappings`: each mapping's forward/backward value and communication;
//! - `elementwise`: add, scale and activations on every placement.

mod dtensor;
mod elementwise;
mod mappings;

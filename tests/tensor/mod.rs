//! Layer 4, `src/tensor/`: the distributed tensor and the conjugate mappings.
//! - `dtensor`: placements, redistribution, construction checks;
//! - `mappings`: each mapping's forward/backward value and communication.

mod dtensor;
mod mappings;

//! Layer 4, `src/tensor/`: DTensor placements and the conjugate mappings.

mod dtensor;

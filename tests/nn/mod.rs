//! Layer 5, `src/nn/`: layers, optimisers, checkpoints and models.

mod embedding;
mod linear;
mod model;
mod optim;
mod sequence_parallel;

//! Layer 3, `src/comm/`: collectives and the ring step on both transports
//! (host-staged: one wgpu device per rank; shared-device: every rank on one):
//! - `collectives`: every collective against f64 and exact values, every
//!   world size, uneven and empty shards, subgroups, bad inputs;
//! - `ring`: `ring_shift` and the two-phase `RingShift`;
//! - `host`: the host-staged transport's pooled staging at large sizes;
//! - `same_device`: the shared-device transport's one-buffer replicated
//!   results;
//! - `stats`: exact call and byte counters.

mod blocks;
mod collectives;
mod host;
mod ring;
mod same_device;
mod stats;

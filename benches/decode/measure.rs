//! What the decode bench measures besides tokens: the host's copy
//! bandwidth (the floor), the process's peak RSS, the bytes a model's
//! parameters hold and the devices' memory in use.

use std::time::{Duration, Instant};

use wgpu_tp::Mesh;
use wgpu_tp::models::CausalLm;
use wgpu_tp::nn::Params;

/// Bytes the model's parameters hold on this process's ranks' devices.
pub fn held_bytes(m: &CausalLm) -> u64 {
    m.named_parameters()
        .iter()
        .flat_map(|(_, p)| p.value.shards())
        .map(|s| s.byte_len())
        .sum()
}

/// Device memory backing live tensors on the mesh's devices, in MiB,
/// after the pools are trimmed (the KV caches of past generations are
/// dropped).
pub fn device_mib(mesh: &Mesh) -> f64 {
    let mut total = 0;
    for d in mesh.devices() {
        d.trim_pool();
        total += d.memory().in_use;
    }
    total as f64 / 1048576.0
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The process's peak resident set (VmHWM), in bytes, where Linux reports it.
pub fn peak_rss() -> Option<u64> {
    status_bytes("VmHWM:")
}

/// The process's resident set now, in bytes (Linux only).
pub fn rss_now() -> Option<u64> {
    status_bytes("VmRSS:")
}

/// A `/proc/self/status` field given in kB, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|kib| kib * 1024)
}

/// Host copy bandwidth in bytes/s over a buffer of `bytes` (best of 5).
pub fn copy_bandwidth(bytes: u64) -> f64 {
    let src = vec![1u8; bytes as usize];
    let mut dst = vec![0u8; bytes as usize];
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed());
        std::hint::black_box(&mut dst);
    }
    bytes as f64 / best.as_secs_f64()
}

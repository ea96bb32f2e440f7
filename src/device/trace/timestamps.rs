//! Timestamp query sets: two slots per kernel (begin, end), resolved into a
//! buffer and copied into a MAP_READ buffer in the same encoder, so nothing
//! is read back before the trace stops.

/// Timestamp slots per query set: two per kernel, so a set holds 1024 kernels.
pub(crate) const QUERIES_PER_SET: u32 = 2048;

/// One query set and the buffers its results go through.
pub(crate) struct QuerySlots {
    pub(crate) set: wgpu::QuerySet,
    pub(crate) used: u32,
    pub(crate) resolve: wgpu::Buffer,
    pub(crate) readback: wgpu::Buffer,
    /// Whether the resolve and the copy into `readback` were recorded.
    pub(crate) resolved: bool,
}

/// A fresh, empty query set with its resolve and readback buffers.
pub(crate) fn new_slots(device: &wgpu::Device) -> QuerySlots {
    let bytes = QUERIES_PER_SET as u64 * wgpu::QUERY_SIZE as u64;
    QuerySlots {
        set: device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("wgpu-tp trace"),
            ty: wgpu::QueryType::Timestamp,
            count: QUERIES_PER_SET,
        }),
        used: 0,
        resolve: device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-tp trace resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }),
        readback: device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("wgpu-tp trace readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }),
        resolved: false,
    }
}

/// Record resolving the used slots and copying them into `readback`.
pub(crate) fn resolve(q: &mut QuerySlots, enc: &mut wgpu::CommandEncoder) {
    enc.resolve_query_set(&q.set, 0..q.used, &q.resolve, 0);
    let bytes = q.used as u64 * wgpu::QUERY_SIZE as u64;
    enc.copy_buffer_to_buffer(&q.resolve, 0, &q.readback, 0, Some(bytes));
    q.resolved = true;
}

//! Recording a compute dispatch: kernel, uniform parameters, buffers (and
//! operand textures) and grid, with the grid folded into two dimensions past
//! the per-dimension limit.
//! Each dispatch is its own compute pass; while the device traces
//! (`trace/`), the pass writes its timestamps or the dispatch is timed on
//! the host.

use std::sync::Arc;
use web_time::Instant;

use super::context::Device;
use super::pipeline::{Access, KernelSpec};
use super::tensor::LocalTensor;
use super::trace::{EventKind, TraceClock, TraceEvent};
use crate::error::{Error, Result};

/// A compute dispatch: kernel, uniform parameters, buffers and grid.
pub(crate) struct Dispatch<'a> {
    pub spec: &'a KernelSpec,
    /// Bytes of the uniform at binding 0 (padded to 16 here).
    pub params: &'a [u8],
    /// Storage buffers in binding order (1, 2, ...), skipping the
    /// texture bindings ([`Access::is_texture`]; see [`Dispatch::record_with_textures`]).
    pub buffers: &'a [&'a LocalTensor],
    /// Number of workgroups (linear); folded into x/y past the per-dimension limit.
    pub workgroups: u64,
}

/// Split `n` workgroups into an (x, y) grid within the per-dimension limit.
/// Shaders recover the linear id as `wg.y * num_workgroups.x + wg.x` and skip
/// ids past their work.
pub(crate) fn fold_workgroups(n: u64, max_dim: u32) -> Result<(u32, u32)> {
    let max = max_dim as u64;
    if n <= max {
        return Ok((n as u32, 1));
    }
    let y = n.div_ceil(max);
    if y > max {
        return Err(Error::TooLarge {
            op: "dispatch",
            what: "a kernel grid",
            needed: n,
            limit: max * max,
            limit_name: "max_compute_workgroups_per_dimension squared",
        });
    }
    Ok((max as u32, y as u32))
}

fn binding(binding: u32, buffer: &wgpu::Buffer, bytes: u64) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry {
        binding,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer,
            offset: 0,
            size: std::num::NonZeroU64::new(bytes),
        }),
    }
}

impl Dispatch<'_> {
    /// The trace slice for this dispatch, on the track of the rank that owns
    /// the buffer it writes (the last read-write binding).
    fn trace_event(&self) -> TraceEvent {
        let written = self
            .spec
            .bindings
            .iter()
            .filter(|a| !a.is_texture())
            .enumerate()
            .filter(|(_, a)| **a == Access::ReadWrite)
            .last()
            .map(|(i, _)| i)
            .and_then(|i| self.buffers.get(i))
            .or(self.buffers.last());
        TraceEvent::new(
            written.map_or(0, |t| t.rank_index()),
            format!("{}::{}", self.spec.family, self.spec.entry),
            EventKind::Kernel,
            "kernel",
            self.buffers.iter().map(|t| t.shape().to_vec()).collect(),
            vec![("workgroups", self.workgroups)],
        )
    }

    /// Record the dispatch into the device's pending encoder.
    pub(crate) fn record(&self, device: &Arc<Device>) -> Result<()> {
        self.record_with_textures(device, &[])
    }

    /// [`record`](Self::record) for a kernel with texture
    /// bindings: `textures` fill them in binding order.
    pub(crate) fn record_with_textures(
        &self,
        device: &Arc<Device>,
        textures: &[&wgpu::TextureView],
    ) -> Result<()> {
        if self.workgroups == 0 {
            return Ok(());
        }
        // What this kernel writes is changed: operands derived from it before
        // (cached GEMM packs of a weight an optimiser updates) are stale.
        let written = self.spec.bindings.iter().filter(|a| !a.is_texture());
        for (t, a) in self.buffers.iter().zip(written) {
            if *a == Access::ReadWrite {
                t.bump_version();
            }
        }
        let clock = if device.tracing() {
            device.tracer.clock()
        } else {
            None
        };
        if clock == Some(TraceClock::Host) {
            // Host clock: an idle device before, a finished kernel after;
            // the pipeline is built outside the timed part.
            device.pipeline(self.spec)?;
            device.flush();
            device.wait()?;
            let start = Instant::now();
            self.record_pass(device, textures, None)?;
            device.flush();
            device.wait()?;
            device
                .tracer
                .push_host(self.trace_event(), start, Instant::now());
            return Ok(());
        }
        let traced = clock == Some(TraceClock::Device);
        self.record_pass(device, textures, traced.then(|| self.trace_event()))
    }

    /// Record the pass; with `traced`, its timestamps go to the device's trace.
    fn record_pass(
        &self,
        device: &Arc<Device>,
        textures: &[&wgpu::TextureView],
        traced: Option<TraceEvent>,
    ) -> Result<()> {
        device.check()?;
        if self.buffers.len() + textures.len() != self.spec.bindings.len() {
            return Err(Error::invalid(
                self.spec.entry,
                "the buffers and textures supplied do not match the kernel's bindings",
            ));
        }
        let bound_bytes = |t: &LocalTensor| {
            if self.spec.vec4s {
                t.byte_len().next_multiple_of(16).max(16)
            } else {
                t.word_bytes().max(4)
            }
        };
        let accesses = self.spec.bindings.iter().filter(|a| !a.is_texture());
        for (b, access) in self.buffers.iter().zip(accesses) {
            // A blocked tensor has no one buffer: an error naming the kernel.
            b.buffer(self.spec.entry)?;
            device.check_binding(self.spec.entry, bound_bytes(b))?;
            let limit = device.limits().max_uniform_buffer_binding_size;
            if *access == Access::Uniform && bound_bytes(b) > limit {
                return Err(Error::TooLarge {
                    op: self.spec.entry,
                    what: "a uniform operand",
                    needed: bound_bytes(b),
                    limit,
                    limit_name: "max_uniform_buffer_binding_size",
                });
            }
        }
        let (x, y) = fold_workgroups(
            self.workgroups,
            device.limits().max_compute_workgroups_per_dimension,
        )?;
        let pipeline = device.pipeline(self.spec)?;
        // Uniform parameters: a pooled buffer written before the next submit.
        let mut params = self.params.to_vec();
        params.resize(params.len().max(16).div_ceil(16) * 16, 0);
        let (params_size, params_buffer) = device.pool.take(params.len() as u64);
        device.queue.write_buffer(&params_buffer, 0, &params);
        let mut entries = vec![binding(0, &params_buffer, params.len() as u64)];
        let (mut buffers, mut textures) = (self.buffers.iter(), textures.iter());
        for (i, access) in self.spec.bindings.iter().enumerate() {
            let slot = i as u32 + 1;
            let missing = || Error::invalid(self.spec.entry, "a binding was not supplied");
            entries.push(if access.is_texture() {
                wgpu::BindGroupEntry {
                    binding: slot,
                    resource: wgpu::BindingResource::TextureView(
                        textures.next().ok_or_else(missing)?,
                    ),
                }
            } else {
                let b = buffers.next().ok_or_else(missing)?;
                binding(slot, b.buffer(self.spec.entry)?, bound_bytes(b))
            });
        }
        let bind_group = device.raw.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(self.spec.entry),
            layout: &pipeline.bind_group_layout,
            entries: &entries,
        });
        device.record(|enc| {
            // Under the encoder lock, so slots are taken in recording order.
            let slots = traced.and_then(|e| device.tracer.begin_kernel(&device.raw, e));
            let timestamp_writes =
                slots
                    .as_ref()
                    .map(|(set, slot)| wgpu::ComputePassTimestampWrites {
                        query_set: set,
                        beginning_of_pass_write_index: Some(*slot),
                        end_of_pass_write_index: Some(*slot + 1),
                    });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(self.spec.entry),
                timestamp_writes,
            });
            pass.set_pipeline(&pipeline.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(x, y, 1);
            drop(pass);
            if slots.is_some() {
                device.tracer.end_kernel(enc);
            }
        });
        device.retire_buffer(params_size, params_buffer);
        Ok(())
    }
}

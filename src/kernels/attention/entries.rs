//! Which entries run attention's two products (`masked_dots`, `mix`), and
//! how their operands are bound. The scalar entries
//! (`shaders/attention.wgsl`) take any sizes. Where every row a product
//! reads or writes starts at a multiple of 4 elements, the vec4 entries
//! (`attention_vec4.wgsl`) read their operands from storage buffers or, on
//! CPU adapters, from textures (Mesa's gallivm fetches a texel per lane at
//! once but loads a buffer lane by lane), copied for the call: only where
//! enough queries read each key to repay the copy, so not when decoding.
//! All three give the same bits.
//! `WGPU_TP_ATTENTION_ENTRIES` = `scalar`, `buffers` or `textures` (the
//! settings' `attention_entries`) picks one where it can run.

use super::params::Params;
use crate::device::settings::{self, AttentionEntries};
use crate::device::{
    Access, Device, Dispatch, KernelSpec, LocalTensor, flat_texture_shift, storage_textures_work,
};
use crate::error::Result;

/// The scalar entries.
pub(crate) const SOURCE: &str = concat!(
    include_str!("../../../shaders/attention_header.wgsl"),
    include_str!("../../../shaders/attention.wgsl")
);
/// `masked_dots` and `mix` on vec4s, their operands in storage buffers.
pub(crate) const SOURCE_VEC4: &str = concat!(
    include_str!("../../../shaders/attention_header.wgsl"),
    include_str!("../../../shaders/attention_buffers.wgsl"),
    include_str!("../../../shaders/attention_vec4.wgsl")
);
/// `masked_dots` and `mix` on vec4s, their operands in textures.
pub(crate) const SOURCE_TEXTURES: &str = concat!(
    include_str!("../../../shaders/attention_header.wgsl"),
    include_str!("../../../shaders/attention_textures.wgsl"),
    include_str!("../../../shaders/attention_vec4.wgsl")
);
/// a source, b source, score-shaped matrix, out: one layout for every entry.
const BINDINGS: &[Access] = &[Access::Read, Access::Read, Access::Read, Access::ReadWrite];
const TEXTURE: Access = Access::StorageTexture(wgpu::TextureFormat::Rgba32Uint);
/// The same slots with the three operands as textures.
const TEXTURE_BINDINGS: &[Access] = &[TEXTURE, TEXTURE, TEXTURE, Access::ReadWrite];

/// Queries a product needs before its operands are copied into textures:
/// the kernels read a key once per 4 queries, the copy reads it once.
const TEXTURE_MIN_QUERIES: usize = 16;

/// The entries a product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entries {
    Scalar,
    Buffers,
    Textures,
}

#[cfg(test)]
thread_local! {
    /// Entries this thread's products take where they can (a test compares
    /// them).
    pub(super) static FORCE: std::cell::Cell<Option<Entries>> = const { std::cell::Cell::new(None) };
    /// Products this thread ran on the scalar, buffer and texture entries.
    pub(super) static RUNS: std::cell::Cell<[usize; 3]> = const { std::cell::Cell::new([0; 3]) };
}

impl Entries {
    /// The entries for a product of `queries` query rows reading `inputs` on
    /// `device`, where `aligned` says whether the vec4 entries can take its
    /// sizes and views.
    pub(super) fn choose(
        device: &Device,
        (aligned, queries): (bool, usize),
        inputs: &[&LocalTensor],
    ) -> Entries {
        #[cfg(test)]
        let forced = FORCE.with(|c| c.get());
        #[cfg(not(test))]
        let forced = None;
        let wanted = forced.or_else(|| {
            settings::current().attention_entries.map(|e| match e {
                AttentionEntries::Scalar => Entries::Scalar,
                AttentionEntries::Buffers => Entries::Buffers,
                AttentionEntries::Textures => Entries::Textures,
            })
        });
        let textures = || textures_fit(device, inputs);
        match wanted {
            _ if !aligned => Entries::Scalar,
            Some(Entries::Textures) if !textures() => Entries::Buffers,
            Some(e) => e,
            None if device.is_cpu() && queries >= TEXTURE_MIN_QUERIES && textures() => {
                Entries::Textures
            }
            None => Entries::Buffers,
        }
    }

    /// The vec4 entries (buffers or textures).
    pub(super) fn vec4(self) -> bool {
        self != Entries::Scalar
    }

    fn spec(self, entry: &'static str) -> KernelSpec {
        match self {
            Entries::Scalar => KernelSpec::new("attention", SOURCE, BINDINGS, entry),
            Entries::Buffers => {
                KernelSpec::new("attention_vec4", SOURCE_VEC4, BINDINGS, entry).in_vec4s()
            }
            Entries::Textures => KernelSpec::new(
                "attention_textures",
                SOURCE_TEXTURES,
                TEXTURE_BINDINGS,
                entry,
            )
            .in_vec4s(),
        }
    }

    /// Record `entry` over `workgroups` with `params` (whose `shift` word
    /// this fills for textures): `inputs` fill bindings 1..=3 (None →
    /// `any`, unused), `out` binding 4.
    pub(super) fn record(
        self,
        entry: &'static str,
        params: &mut Params,
        workgroups: u64,
        (inputs, any): ([Option<&LocalTensor>; 3], &LocalTensor),
        out: &LocalTensor,
    ) -> Result<()> {
        #[cfg(test)]
        RUNS.with(|c| {
            let mut runs = c.get();
            runs[self as usize] += 1;
            c.set(runs);
        });
        let device = any.device();
        let spec = self.spec(entry);
        if self != Entries::Textures {
            let [a, b, m] = inputs.map(|x| x.unwrap_or(any));
            let dispatch = Dispatch {
                spec: &spec,
                params: bytemuck::bytes_of(params),
                buffers: &[a, b, m, out],
                workgroups,
            };
            return dispatch.record(device);
        }
        let shift = flat_texture_shift(device);
        params.shift = shift;
        // One texture per distinct tensor (q, k and v may share one).
        let mut made: Vec<(&LocalTensor, wgpu::TextureView)> = Vec::new();
        for t in inputs.iter().flatten() {
            if !made.iter().any(|(u, _)| std::ptr::eq(*u, *t)) {
                made.push((t, t.to_flat_texture("attention", shift)?));
            }
        }
        if made.is_empty() {
            made.push((any, any.to_flat_texture("attention", shift)?));
        }
        let view = |x: Option<&LocalTensor>| {
            let at = x.and_then(|t| made.iter().position(|(u, _)| std::ptr::eq(*u, t)));
            &made[at.unwrap_or(0)].1
        };
        let views = inputs.map(view);
        Dispatch {
            spec: &spec,
            params: bytemuck::bytes_of(params),
            buffers: &[out],
            workgroups,
        }
        .record_with_textures(device, &views)
    }
}

/// Whether every one of `inputs` fits a flat texture on `device`, and its
/// kernels can bind three.
fn textures_fit(device: &Device, inputs: &[&LocalTensor]) -> bool {
    let shift = flat_texture_shift(device);
    device.limits().max_storage_textures_per_shader_stage >= 3
        && storage_textures_work(device, wgpu::TextureFormat::Rgba32Uint)
        && shift >= 4
        && inputs.iter().all(|t| {
            let texels = (t.byte_len() / 16) as usize;
            t.byte_len().is_multiple_of(16)
                && t.texture_fits(texels.div_ceil(1 << shift), 1 << shift)
        })
}

//! Operand textures: a row-major matrix copied into an RGBA float texture,
//! four consecutive elements of a row per texel. CPU adapters read textures
//! much faster than storage buffers: Mesa's gallivm (lavapipe, llvmpipe)
//! turns every storage load inside a loop into per-lane bounds-checked scalar
//! loads, while a texel fetch loads each lane's 16 bytes at once. The GEMM
//! reads its operands this way there.

use super::tensor::LocalTensor;
use crate::element::DType;
use crate::error::{Error, Result};

/// Row pitch, in elements, that a texture's source tensor needs: wgpu copies
/// buffer rows to textures only at multiples of 256 bytes.
pub(crate) fn texture_row_align(dtype: DType) -> usize {
    wgpu::COPY_BYTES_PER_ROW_ALIGNMENT as usize / dtype.size_bytes()
}

/// The RGBA format holding four elements of `dtype` per texel.
pub(crate) fn texel_format(op: &'static str, dtype: DType) -> Result<wgpu::TextureFormat> {
    match dtype {
        DType::F32 => Ok(wgpu::TextureFormat::Rgba32Float),
        DType::F16 => Ok(wgpu::TextureFormat::Rgba16Float),
        DType::I32 | DType::BF16 | DType::Quant(_) => Err(Error::invalid(
            op,
            "textures hold f32 or f16 matrices; widen bf16 first (kernels::cast)",
        )),
    }
}

/// Texels a row of [`LocalTensor::to_flat_texture`]'s textures, as a power
/// of 2: 2^11, or the device's side if smaller.
pub(crate) fn flat_texture_shift(device: &super::Device) -> u32 {
    let side = device.limits().max_texture_dimension_2d.max(1);
    (31 - side.leading_zeros()).min(11)
}

/// Whether `device` can bind two `format` textures as read-only storage
/// textures in one compute kernel.
pub(crate) fn storage_textures_work(device: &super::Device, format: wgpu::TextureFormat) -> bool {
    let features = format.guaranteed_format_features(device.features());
    device.limits().max_storage_textures_per_shader_stage >= 2
        && features
            .allowed_usages
            .contains(wgpu::TextureUsages::STORAGE_BINDING)
        && features
            .flags
            .contains(wgpu::TextureFormatFeatureFlags::STORAGE_READ_ONLY)
}

impl LocalTensor {
    /// Whether a `rows` × `texels` texture fits this tensor's device.
    pub(crate) fn texture_fits(&self, rows: usize, texels: usize) -> bool {
        let max = self.device().limits().max_texture_dimension_2d as usize;
        (1..=max).contains(&rows) && (1..=max).contains(&texels)
    }

    /// A fresh `rows` × `texels` RGBA texture holding this row-major tensor
    /// (f32 or f16), whose rows start `pitch` elements apart (`pitch` a
    /// multiple of [`texture_row_align`]): texel `(c, r)` holds elements
    /// `r·pitch + 4c ..+ 4`. The copy is recorded on the device's pending
    /// encoder, ahead of the kernels that read the texture. With `storage`,
    /// kernels may also bind it as a read-only storage texture.
    pub(crate) fn to_texture(
        &self,
        op: &'static str,
        rows: usize,
        texels: usize,
        pitch: usize,
        storage: bool,
    ) -> Result<wgpu::TextureView> {
        let format = texel_format(op, self.dtype())?;
        let size = self.dtype().size_bytes();
        let needed = rows.saturating_sub(1) * pitch + 4 * texels;
        if !self.texture_fits(rows, texels)
            || pitch < 4 * texels
            || !pitch.is_multiple_of(texture_row_align(self.dtype()))
            || needed > self.len()
        {
            return Err(Error::invalid(
                op,
                format!(
                    "cannot copy a [{rows}, {}] matrix with row pitch {pitch} from a tensor of {} \
                     elements into a texture (max side {})",
                    4 * texels,
                    self.len(),
                    self.device().limits().max_texture_dimension_2d
                ),
            ));
        }
        let device = self.device();
        device.check()?;
        let extent = wgpu::Extent3d {
            width: texels as u32,
            height: rows as u32,
            depth_or_array_layers: 1,
        };
        let texture = device.raw.create_texture(&wgpu::TextureDescriptor {
            label: Some(op),
            size: extent,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: if storage {
                wgpu::TextureUsages::STORAGE_BINDING | wgpu::TextureUsages::COPY_DST
            } else {
                wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST
            },
            view_formats: &[],
        });
        let buffer = self.buffer(op)?;
        device.hold_until_submit((rows * texels * 4 * size) as u64);
        device.record(|enc| {
            enc.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer,
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: 0,
                        bytes_per_row: Some((pitch * size) as u32),
                        rows_per_image: Some(rows as u32),
                    },
                },
                texture.as_image_copy(),
                extent,
            )
        });
        Ok(texture.create_view(&Default::default()))
    }
}

impl LocalTensor {
    /// A fresh `Rgba32Uint` texture holding this tensor's bytes in order
    /// (f32 or bf16: four words a texel, read as bits), `2^shift` texels a
    /// row (the last row part-filled): texel `i` is at `(i mod 2^shift,
    /// i >> shift)`. For kernels that stream a whole weight: any row length
    /// that is a whole number of texels, and matrices taller than the
    /// device's texture side. The copy is recorded on the device's pending
    /// encoder; the texture binds as a read-only storage texture.
    pub(crate) fn to_flat_texture(
        &self,
        op: &'static str,
        shift: u32,
    ) -> Result<wgpu::TextureView> {
        if !matches!(self.dtype(), DType::F32 | DType::BF16) {
            return Err(Error::invalid(
                op,
                format!(
                    "flat textures hold f32 or bf16 tensors, not {}",
                    self.dtype()
                ),
            ));
        }
        let format = wgpu::TextureFormat::Rgba32Uint;
        let bytes = self.byte_len();
        let width = 1usize << shift;
        let texels = (bytes / 16) as usize;
        let rows = texels.div_ceil(width);
        if !bytes.is_multiple_of(16) || shift < 4 || !self.texture_fits(rows, width) {
            return Err(Error::invalid(
                op,
                format!(
                    "cannot lay {bytes} bytes out as 16-byte texels {width} a row (16 or more, and \
                     a multiple of 16 bytes; max side {})",
                    self.device().limits().max_texture_dimension_2d
                ),
            ));
        }
        let device = self.device();
        device.check()?;
        let texture = device.raw.create_texture(&wgpu::TextureDescriptor {
            label: Some(op),
            size: wgpu::Extent3d {
                width: width as u32,
                height: rows as u32,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: wgpu::TextureUsages::STORAGE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        });
        let buffer = self.buffer(op)?;
        device.hold_until_submit((rows * width * 16) as u64);
        // Whole rows in one copy, the part-filled last row in another.
        let (full, rest) = (texels / width, texels % width);
        let parts = [(0, full, width), (full, usize::from(rest > 0), rest)];
        device.record(|enc| {
            for (row, height, texels) in parts {
                if height == 0 {
                    continue;
                }
                enc.copy_buffer_to_texture(
                    wgpu::TexelCopyBufferInfo {
                        buffer,
                        layout: wgpu::TexelCopyBufferLayout {
                            offset: (row * width * 16) as u64,
                            bytes_per_row: Some((width * 16) as u32),
                            rows_per_image: Some(height as u32),
                        },
                    },
                    wgpu::TexelCopyTextureInfo {
                        texture: &texture,
                        mip_level: 0,
                        origin: wgpu::Origin3d {
                            x: 0,
                            y: row as u32,
                            z: 0,
                        },
                        aspect: wgpu::TextureAspect::All,
                    },
                    wgpu::Extent3d {
                        width: texels as u32,
                        height: height as u32,
                        depth_or_array_layers: 1,
                    },
                )
            }
        });
        Ok(texture.create_view(&Default::default()))
    }
}

//! What a device can compute beyond f32: f16 (`SHADER_F16`) and
//! cooperative matrices (tensor cores through Vulkan's
//! `VK_KHR_cooperative_matrix`), for the one shape the f16 GEMM uses them for.

use super::context::Device;
use crate::element::DType;
use crate::error::{Error, Result};

impl Device {
    /// Whether f16 tensors and kernels work here (`SHADER_F16` is on).
    pub fn has_f16(&self) -> bool {
        self.features().contains(wgpu::Features::SHADER_F16)
    }

    /// Whether tensors of `dtype` can live here: f16 needs `SHADER_F16`,
    /// else [`Error::Unsupported`] naming it.
    pub fn check_dtype(&self, op: &'static str, dtype: DType) -> Result<()> {
        if dtype == DType::F16 && !self.has_f16() {
            return Err(Error::no_f16(op, &self.adapter_info().name));
        }
        Ok(())
    }

    /// Whether f16 GEMMs run on cooperative matrices here (tensor cores:
    /// 16×16×16 f16 products accumulated in f32, subgroups of 32).
    pub fn has_coop_f16(&self) -> bool {
        self.coop_f16
    }
}

/// The shape `shaders/gemm_coop.wgsl` multiplies: 16×16×16, f16 operands,
/// f32 accumulator.
fn is_f16_16(p: &wgpu::CooperativeMatrixProperties) -> bool {
    (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
        && p.ab_type == wgpu::CooperativeScalarType::F16
        && p.cr_type == wgpu::CooperativeScalarType::F32
}

/// Workgroup memory the cooperative-matrix kernel stages through: 8 KiB of
/// A, 8 KiB of B, 8 KiB of scratch for the epilogue.
const COOP_WORKGROUP_BYTES: u32 = 24 << 10;

/// Whether f16 GEMMs on `adapter`, opened with `limits`, can run on
/// cooperative matrices: wgpu offers the feature, the adapter lists
/// 16×16×16 f16 × f16 + f32, has `SHADER_F16`, runs subgroups of exactly 32
/// invocations (the kernel's workgroup is 8 subgroups of 32), and `limits`
/// allow its 256 invocations and 24 KiB of workgroup memory (WebGPU's
/// default limits do not).
pub(super) fn coop_f16(adapter: &wgpu::Adapter, limits: &wgpu::Limits) -> bool {
    let info = adapter.get_info();
    let features = adapter.features();
    features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16)
        && (info.subgroup_min_size, info.subgroup_max_size) == (32, 32)
        && limits.max_compute_invocations_per_workgroup >= 256
        && limits.max_compute_workgroup_storage_size >= COOP_WORKGROUP_BYTES
        && adapter
            .cooperative_matrix_properties()
            .iter()
            .any(is_f16_16)
}

//! What the adapter and host are, beyond wgpu's own report: the CPU's
//! vendor (where a CPU adapter's kernels run) and the Mesa version in a
//! driver string. Kernels choose tiles and layouts by them (the GEMM's
//! register tiles, `kernels/gemm/tile.rs`).

use std::sync::OnceLock;

use super::context::Device;

/// Whether this process runs on an Intel CPU, which is where a CPU
/// adapter's kernels run. Its cores ran the shared-rows GEMM faster with
/// 32 rows a lane, AMD's (Zen 3) with 16; the vendor rather than a feature
/// flag, since the difference lies in the cores, not in the code lavapipe
/// emits (256-bit either way).
pub(crate) fn intel_cpu() -> bool {
    static INTEL: OnceLock<bool> = OnceLock::new();
    *INTEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            // Leaf 0: the vendor string in EBX, EDX, ECX.
            #[allow(unused_unsafe)]
            // SAFETY: every x86-64 CPU has CPUID leaf 0.
            let id = unsafe { std::arch::x86_64::__cpuid(0) };
            let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
                .iter()
                .flat_map(|r| r.to_le_bytes())
                .collect();
            vendor == b"GenuineIntel"
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Whether the device runs a Mesa older than 24 (lavapipe 22.3, Debian 12's
/// stock GL llvmpipe), whose compiler wants other tiles and layouts.
pub(crate) fn old_mesa(device: &Device) -> bool {
    mesa_major(&device.adapter_info().driver_info).is_some_and(|major| major < 24)
}

/// Loop iterations one invocation may run in all on `device`, where that is
/// bounded: Mesa < 24's llvmpipe (GL, and lavapipe of the same code) ends
/// every loop of an invocation, silently, once about 65535 have run. GPUs
/// on the same Mesa (RADV, radeonsi, iris) have no such limit.
pub(crate) fn loop_limit(device: &Device) -> Option<u64> {
    (device.is_cpu() && old_mesa(device)).then_some(65_535)
}

/// The Mesa major version in a driver string such as `Mesa 22.3.6 (LLVM
/// 15.0.6)` (lavapipe) or `4.5 (Core Profile) Mesa 25.0.7` (GL).
fn mesa_major(driver_info: &str) -> Option<u32> {
    let rest = &driver_info[driver_info.find("Mesa ")? + 5..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Device {
    /// Whether this is a software (CPU) adapter such as lavapipe, llvmpipe or WARP.
    pub fn is_cpu(&self) -> bool {
        self.adapter_info().device_type == wgpu::DeviceType::Cpu
    }

    /// Whether this is a hardware GPU (discrete or integrated), where kernels
    /// built for many invocations in flight are chosen (the split-K GEMV,
    /// the tree-reduced norm).
    pub fn is_gpu(&self) -> bool {
        matches!(
            self.adapter_info().device_type,
            wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::IntegratedGpu
        )
    }
}

#[cfg(test)]
mod tests {
    use super::mesa_major;

    #[test]
    fn mesa_versions_are_read_from_driver_strings() {
        assert_eq!(mesa_major("Mesa 22.3.6 (LLVM 15.0.6)"), Some(22));
        assert_eq!(mesa_major("Mesa 25.0.7-2~bpo12+1 (LLVM 15.0.6)"), Some(25));
        assert_eq!(mesa_major("4.5 (Core Profile) Mesa 22.3.6"), Some(22));
        assert_eq!(mesa_major("NVIDIA 550.54"), None);
        assert_eq!(mesa_major("Mesa "), None);
    }
}

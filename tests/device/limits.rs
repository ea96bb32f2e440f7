//! Weaker device limits ([`MeshBuilder::limits`]): a device allowing only 128
//! invocations per workgroup (the GLES 3.1 / Vulkan guarantee) runs the
//! element grid at 128 and gives the same results; WebGPU's default limits
//! run the layers; GLES-class `downlevel_defaults()` (4 storage buffers per
//! stage) runs what fits and refuses the rest with an error naming the limit
//! and the kernel, leaving the mesh usable. Small memory blocks
//! ([`MeshBuilder::memory_hints`]) give the same results.

use crate::util::{Rng, assert_close, mesh_env};
use wgpu_tp::kernels::{self, GemmOptions, GemmVariant};
use wgpu_tp::{DeviceLayout, Error, MeshBuilder};

#[test]
fn a_128_invocation_device_runs_the_element_grid_at_128() {
    mesh_env();
    let limits = wgpu::Limits {
        max_compute_invocations_per_workgroup: 128,
        max_compute_workgroup_size_x: 128,
        max_compute_workgroup_size_y: 128,
        ..wgpu::Limits::default()
    };
    let m = MeshBuilder::new().ranks(1).limits(limits).build().unwrap();
    let r = &m.ranks()[0];
    assert_eq!(r.device().grid_workgroup(), 128);
    assert_eq!(
        r.device().limits().max_compute_invocations_per_workgroup,
        128
    );
    let mut rng = Rng::fresh("limits128");
    // Ragged, past one workgroup, and folded past 65535 workgroups.
    for n in [7usize, 1000, 128 * 65_535 + 13] {
        let (a, b) = (rng.vec(n), rng.vec(n));
        let (ta, tb) = (r.upload(&[n], &a).unwrap(), r.upload(&[n], &b).unwrap());
        let got = kernels::add(&ta, &tb).unwrap().to_vec().unwrap();
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert!(got == want, "add of {n} elements with WG = 128");
    }
    // GEMM picks a kernel that fits (the 256-invocation tiled one does not).
    let (av, bv) = (rng.vec(91), rng.vec(65));
    let a = r.upload(&[7, 13], &av).unwrap();
    let b = r.upload(&[13, 5], &bv).unwrap();
    let c = kernels::gemm(&a, &b, GemmOptions::default()).unwrap();
    let want = crate::util::reference::gemm(&av, &bv, 7, 5, 13, false, false);
    assert_close(
        "gemm on a 128-invocation device",
        &c.to_vec().unwrap(),
        &want,
        1e-5,
    );
}

/// Devices suballocating memory in 4 MiB blocks ([`MeshBuilder::memory_hints`])
/// compute the same: tensors past a block (dedicated allocations) and within
/// one, on two ranks, each its own device (every device opened takes them).
#[test]
fn small_memory_blocks_give_the_same_results() {
    mesh_env();
    let hints = wgpu::MemoryHints::Manual {
        suballocated_device_memory_block_size: (4 << 20)..(4 << 20),
    };
    let m = MeshBuilder::new()
        .ranks(2)
        .layout(DeviceLayout::Simulated)
        .memory_hints(hints)
        .build()
        .unwrap();
    let mut rng = Rng::fresh("memory_hints");
    for r in m.ranks() {
        // A: 1103 × 1009 f32 is 4.5 MB, past one block.
        let (mm, k, n) = (1103, 1009, 17);
        let (av, bv) = (rng.vec(mm * k), rng.vec(k * n));
        let a = r.upload(&[mm, k], &av).unwrap();
        let b = r.upload(&[k, n], &bv).unwrap();
        let c = kernels::gemm(&a, &b, GemmOptions::default()).unwrap();
        let want = crate::util::reference::gemm(&av, &bv, mm, n, k, false, false);
        assert_close("gemm with 4 MiB blocks", &c.to_vec().unwrap(), &want, 1e-5);
        let sum = kernels::add(&a, &a).unwrap().to_vec().unwrap();
        assert!(sum.iter().zip(&av).all(|(s, x)| *s == x + x), "add");
    }
}

#[test]
fn downlevel_limits_run_what_fits_and_name_the_limit_otherwise() {
    mesh_env();
    let m = MeshBuilder::new()
        .ranks(2)
        .limits(wgpu::Limits::downlevel_defaults())
        .build()
        .unwrap();
    let r = &m.ranks()[1];
    assert_eq!(r.device().limits().max_storage_buffers_per_shader_stage, 4);
    let x = r.upload(&[3], &[1.0, 2.0, 3.0]).unwrap();
    // Three storage buffers: fits.
    assert_eq!(
        kernels::add(&x, &x).unwrap().to_vec().unwrap(),
        vec![2.0, 4.0, 6.0]
    );
    let a = r.upload(&[2, 3], &[1.0; 6]).unwrap();
    let b = a.reshape(&[3, 2]).unwrap();
    // On CPU adapters the GEMM reads its operands from textures and binds
    // three storage buffers: it fits.
    if r.device().is_cpu() {
        let c = kernels::gemm(&a, &b, GemmOptions::new()).unwrap();
        assert_eq!(c.to_vec().unwrap(), vec![3.0; 4]);
    }
    // The storage-buffer GEMM binds five: a clear error, not a wgpu panic or
    // validation dump.
    let err =
        kernels::gemm(&a, &b, GemmOptions::default().variant(GemmVariant::Buffer)).unwrap_err();
    match &err {
        Error::DeviceLimit {
            op,
            limit_name,
            needed,
            limit,
        } => {
            assert!(op.starts_with("gemm::"), "{op}");
            assert_eq!(*limit_name, "max_storage_buffers_per_shader_stage");
            assert_eq!((*needed, *limit), (5, 4));
        }
        other => panic!("expected DeviceLimit, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("max_storage_buffers_per_shader_stage")
    );
    // Bad input lost no state: the rank still works.
    assert_eq!(
        kernels::scale(&x, 2.0).unwrap().to_vec().unwrap(),
        vec![2.0, 4.0, 6.0]
    );
}

#[test]
fn webgpu_default_limits_open_on_the_test_adapter() {
    // CI also runs the whole suite with WGPU_TP_LIMITS=webgpu.
    mesh_env();
    let limits = wgpu::Limits::default();
    let m = MeshBuilder::new()
        .ranks(1)
        .limits(limits.clone())
        .build()
        .unwrap();
    let got = m.ranks()[0].device().limits();
    assert_eq!(
        got.max_storage_buffers_per_shader_stage,
        limits.max_storage_buffers_per_shader_stage
    );
    assert_eq!(got.max_compute_invocations_per_workgroup, 256);
}

/// Without the `mpi` feature, asking for an MPI mesh is an error that says
/// how to get one, not a panic.
#[cfg(not(feature = "mpi"))]
#[test]
fn mpi_mesh_without_the_feature_says_how_to_build_one() {
    let e = MeshBuilder::new().mpi().build().unwrap_err();
    assert!(matches!(e, Error::Mpi(_)), "{e}");
    assert!(e.to_string().contains("--features mpi"), "{e}");
}

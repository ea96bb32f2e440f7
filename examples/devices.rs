//! Lists every adapter wgpu can see (backend, type, name, driver, the limits
//! and features wgpu-tp cares about), then the adapter `MeshBuilder::new()`
//! picks, honouring `WGPU_BACKEND` and `WGPU_ADAPTER_NAME`.
//!
//! Run: `cargo run --example devices` (try `WGPU_BACKEND=gl` too).

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn main() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        // Vulkan loaders warn without it; harmless but noisy.
        let dir = std::env::temp_dir().join("wgpu-tp-xdg");
        let _ = std::fs::create_dir_all(&dir);
        // SAFETY: single-threaded here, before wgpu starts any thread.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", dir) };
    }
    let list = wgpu_tp::adapters(None);
    println!("{} adapter(s):", list.len());
    for (i, a) in list.iter().enumerate() {
        let info = &a.info;
        let l = &a.limits;
        println!(
            "[{i}] {:?} {:?}: {}",
            info.backend, info.device_type, info.name
        );
        println!("    driver: {} ({})", info.driver, info.driver_info);
        println!(
            "    max_storage_buffer_binding_size {} | max_buffer_size {}",
            mib(l.max_storage_buffer_binding_size),
            mib(l.max_buffer_size)
        );
        println!(
            "    max_compute_workgroup_storage_size {} | max_compute_invocations_per_workgroup {} | max_compute_workgroups_per_dimension {}",
            mib(l.max_compute_workgroup_storage_size as u64),
            l.max_compute_invocations_per_workgroup,
            l.max_compute_workgroups_per_dimension
        );
        let has = |f: wgpu::Features| if a.features.contains(f) { "yes" } else { "no" };
        println!(
            "    SHADER_F16 {} | TIMESTAMP_QUERY {} | SUBGROUP {} (size {}..={})",
            has(wgpu::Features::SHADER_F16),
            has(wgpu::Features::TIMESTAMP_QUERY),
            has(wgpu::Features::SUBGROUP),
            info.subgroup_min_size,
            info.subgroup_max_size
        );
        // Tensor cores: wgpu-tp's f16 GEMM uses 16×16×16 f16 × f16 + f32.
        let coop: Vec<String> = a
            .cooperative_matrix
            .iter()
            .map(|p| {
                let (ab, cr) = (p.ab_type, p.cr_type);
                format!("{}x{}x{} {ab:?}->{cr:?}", p.m_size, p.n_size, p.k_size)
            })
            .collect();
        println!(
            "    EXPERIMENTAL_COOPERATIVE_MATRIX {}: [{}]",
            has(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX),
            coop.join(", ")
        );
    }
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "(unset)".into());
    println!(
        "\nWGPU_BACKEND={} WGPU_ADAPTER_NAME={}",
        env("WGPU_BACKEND"),
        env("WGPU_ADAPTER_NAME")
    );
    match wgpu_tp::MeshBuilder::new().build() {
        Ok(mesh) => println!("MeshBuilder::new() picks: {}", mesh.adapter_summary()),
        Err(e) => {
            println!("MeshBuilder::new() fails: {e}");
            std::process::exit(1);
        }
    }
}

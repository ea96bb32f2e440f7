//! Every shader the crate builds (`wgpu_tp::kernels::all_shaders()`) goes
//! through Chromium's WGSL compiler, Tint, which enforces WGSL's uniformity
//! analysis (naga does not): each module is created and its compilation
//! messages read, then a pipeline is built for each entry point with its
//! overrides set, and any validation error fails the test. Shaders that
//! need a feature or more storage buffers than the page's device has are
//! listed as skipped, with why.

use wasm_bindgen_test::wasm_bindgen_test;

use crate::{limit_sets, log, mesh};

/// Values for overrides without a default, as tests/shaders.rs sets them:
/// integers 64, floats 1, bools false.
fn overrides(module: &naga::Module) -> Vec<(String, f64)> {
    module
        .overrides
        .iter()
        .filter(|(_, o)| o.init.is_none())
        .filter_map(|(_, o)| {
            let key = match (o.id, &o.name) {
                (Some(id), _) => id.to_string(),
                (None, Some(name)) => name.clone(),
                (None, None) => return None,
            };
            let value = match module.types[o.ty].inner.scalar_kind() {
                Some(naga::ScalarKind::Float) => 1.0,
                Some(naga::ScalarKind::Bool) => 0.0,
                _ => 64.0,
            };
            Some((key, value))
        })
        .collect()
}

#[wasm_bindgen_test]
async fn every_shader_compiles_in_tint() {
    for (label, limits) in limit_sets() {
        let m = mesh(1, limits).await;
        let device = m.devices()[0].clone();
        let raw = device.wgpu_device();
        let f16 = device.features().contains(wgpu::Features::SHADER_F16);
        let (mut compiled, mut pipelines, mut failures) = (0, 0, Vec::new());
        let (mut skipped_f16, mut skipped_subgroups, mut skipped_storage) = (0, 0, 0);
        for (name, source) in wgpu_tp::kernels::all_shaders() {
            if source
                .lines()
                .any(|l| l.trim_start().starts_with("enable f16"))
                && !f16
            {
                skipped_f16 += 1;
                continue;
            }
            if source.contains("subgroupBroadcast") || source.contains("subgroup_invocation_id") {
                // wgpu's WebGPU backend offers no SUBGROUP feature, so the
                // crate never builds these in a browser; Tint would also
                // want `enable subgroups;`, which naga rejects.
                skipped_subgroups += 1;
                continue;
            }
            let module_ir = naga::front::wgsl::parse_str(source)
                .unwrap_or_else(|e| panic!("{name}: naga: {e}"));
            // More storage buffers than the device binds (the grouped
            // products): the crate checks the limit and never builds them.
            let storage = (module_ir.global_variables.iter())
                .filter(|(_, g)| matches!(g.space, naga::AddressSpace::Storage { .. }))
                .count() as u32;
            if storage > device.limits().max_storage_buffers_per_shader_stage {
                skipped_storage += 1;
                continue;
            }
            let scope = raw.push_error_scope(wgpu::ErrorFilter::Validation);
            let module = raw.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            let info = module.get_compilation_info().await;
            for msg in &info.messages {
                if msg.message_type == wgpu::CompilationMessageType::Error {
                    failures.push(format!("{name}: {}", msg.message));
                }
            }
            if let Some(e) = scope.pop().await {
                failures.push(format!("{name}: module: {e}"));
                continue;
            }
            compiled += 1;
            let constants = overrides(&module_ir);
            let constants: Vec<(&str, f64)> =
                constants.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            for ep in &module_ir.entry_points {
                let scope = raw.push_error_scope(wgpu::ErrorFilter::Validation);
                let _pipeline = raw.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(&ep.name),
                    layout: None,
                    module: &module,
                    entry_point: Some(&ep.name),
                    compilation_options: wgpu::PipelineCompilationOptions {
                        constants: &constants,
                        zero_initialize_workgroup_memory: false,
                    },
                    cache: None,
                });
                match scope.pop().await {
                    Some(e) => failures.push(format!("{name}::{}: pipeline: {e}", ep.name)),
                    None => pipelines += 1,
                }
            }
        }
        log!(
            "{label}: Tint compiled {compiled} shaders ({pipelines} pipelines); skipped {skipped_f16} that need shader-f16 (not on this adapter), {skipped_subgroups} that need subgroups (wgpu's WebGPU backend offers none) and {skipped_storage} that bind more storage buffers than it allows"
        );
        assert!(
            failures.is_empty(),
            "{label}: Tint rejected {} of them:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert!(compiled > 20, "{label}: only {compiled} shaders compiled");
    }
}

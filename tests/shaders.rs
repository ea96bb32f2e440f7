//! Every shader the crate builds (`wgpu_tp::kernels::all_shaders()`: the WGSL
//! families and the generated GEMM register kernels) parses and validates
//! with naga, has no store FXC rejects, and translates to MSL 2.0 and HLSL
//! (shader models 5.1 and 6.0) with the binding maps and options wgpu's
//! Metal and DX12 backends pass (num_workgroups from DX12's special
//! constants), to SPIR-V, and to GLSL (430 core and ES 310, one translation
//! per compute entry point),
//! also with the element grid at 128 invocations as GLES 3.1-class devices
//! get it. Where installed (CI installs them), `spirv-val` checks the SPIR-V
//! for Vulkan 1.0 and 1.1 and `glslangValidator` the GLSL, the ES 3.10 form
//! also against GLES 3.1's minimum work-group size. CI cannot run Metal or
//! DX12, so this is how we know those backends get shaders that compile.

use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

/// Values for `override` constants the shader leaves without a default:
/// integers 64 (plausible workgroup sizes and tile counts), floats 1, bools false.
fn override_values(module: &naga::Module) -> naga::back::PipelineConstants {
    let mut out = naga::back::PipelineConstants::default();
    for (_, o) in module.overrides.iter() {
        if o.init.is_some() {
            continue;
        }
        let key = match (o.id, &o.name) {
            (Some(id), _) => id.to_string(),
            (None, Some(name)) => name.clone(),
            (None, None) => continue,
        };
        let value = match module.types[o.ty].inner.scalar_kind() {
            Some(naga::ScalarKind::Float) => 1.0,
            Some(naga::ScalarKind::Bool) => 0.0,
            _ => 64.0,
        };
        out.insert(key, value);
    }
    out
}

/// Stores into one component of a vector picked by a runtime index
/// (`v[i] = x` with `v: vec4`, or `(*av)[j][t] = x`): FXC, which wgpu's DX12
/// backend falls back to without dxcompiler.dll, rejects the HLSL they
/// become (error X3500, wgpu issue 4460).
fn dynamic_vector_component_stores(module: &naga::Module, info: &ModuleInfo) -> Vec<String> {
    use naga::{Expression, Statement, TypeInner};
    fn walk(
        block: &naga::Block,
        f: &naga::Function,
        fi: &naga::valid::FunctionInfo,
        module: &naga::Module,
        where_: &str,
        out: &mut Vec<String>,
    ) {
        for st in block.iter() {
            match st {
                Statement::Store { pointer, .. } => {
                    if let Expression::Access { base, .. } = f.expressions[*pointer] {
                        let inner = fi[base].ty.inner_with(&module.types);
                        let vector = match inner {
                            TypeInner::Pointer { base, .. } => {
                                matches!(module.types[*base].inner, TypeInner::Vector { .. })
                            }
                            TypeInner::ValuePointer { size: Some(_), .. } => true,
                            _ => false,
                        };
                        if vector {
                            out.push(format!(
                                "{where_}: store to a vector component at a runtime index"
                            ));
                        }
                    }
                }
                Statement::Block(b) => walk(b, f, fi, module, where_, out),
                Statement::If { accept, reject, .. } => {
                    walk(accept, f, fi, module, where_, out);
                    walk(reject, f, fi, module, where_, out);
                }
                Statement::Loop {
                    body, continuing, ..
                } => {
                    walk(body, f, fi, module, where_, out);
                    walk(continuing, f, fi, module, where_, out);
                }
                Statement::Switch { cases, .. } => {
                    for c in cases {
                        walk(&c.body, f, fi, module, where_, out);
                    }
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    for (h, f) in module.functions.iter() {
        let name = f.name.clone().unwrap_or_default();
        walk(&f.body, f, &info[h], module, &name, &mut out);
    }
    for (i, ep) in module.entry_points.iter().enumerate() {
        walk(
            &ep.function.body,
            &ep.function,
            info.get_entry_point(i),
            module,
            &ep.name,
            &mut out,
        );
    }
    out
}

fn translate(name: &str, source: &str) -> Vec<String> {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(source)));
    let info: ModuleInfo = Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name}: validation error:\n{}", e.emit_to_string(source)));
    let fxc = dynamic_vector_component_stores(&module, &info);
    assert!(
        fxc.is_empty(),
        "{name}: HLSL that FXC rejects (X3500):\n{}",
        fxc.join("\n")
    );
    let mut constants = override_values(&module);
    let entries = emit(name, source, &module, &info, &constants, false);
    // What a GLES 3.1-class device gets: the element grid at 128 invocations
    // (Device::grid_workgroup), checked against GLES 3.1's minimum limits.
    if module
        .overrides
        .iter()
        .any(|(_, o)| o.name.as_deref() == Some("WG"))
    {
        constants.insert("WG".to_string(), 128.0);
        emit(name, source, &module, &info, &constants, true);
    }
    entries
}

/// Translate `module` with these override values to MSL, HLSL, SPIR-V and
/// GLSL, and run the external validators where they are installed. With
/// `gles_limits`, only GLSL ES 3.10 against GLES 3.1's minimum work-group size.
fn emit(
    name: &str,
    source: &str,
    module: &naga::Module,
    info: &ModuleInfo,
    constants: &naga::back::PipelineConstants,
    gles_limits: bool,
) -> Vec<String> {
    let (module, info) =
        naga::back::pipeline_constants::process_overrides(module, info, None, constants)
            .unwrap_or_else(|e| panic!("{name}: resolving overrides {constants:?}: {e}"));
    let (module, info) = (module.as_ref(), info.as_ref());
    let entries: Vec<String> = module
        .entry_points
        .iter()
        .filter(|ep| ep.stage == naga::ShaderStage::Compute)
        .map(|ep| ep.name.clone())
        .collect();
    assert!(!entries.is_empty(), "{name}: no compute entry points");

    if !gles_limits {
        let (msl_options, hlsl_options) = backend_options(module, &entries);
        msl::write_string(module, info, &msl_options, &msl::PipelineOptions::default())
            .unwrap_or_else(|e| panic!("{name}: MSL: {e}"));
        // wgpu's DX12 backend offers SHADER_F16 only with DXC at SM 6.2+.
        let shader_models: &[hlsl::ShaderModel] = if uses_f16(source) {
            &[hlsl::ShaderModel::V6_2]
        } else if uses_subgroups(source) {
            &[hlsl::ShaderModel::V6_0]
        } else {
            &[hlsl::ShaderModel::V5_1, hlsl::ShaderModel::V6_0]
        };
        for &shader_model in shader_models {
            let options = hlsl::Options {
                shader_model,
                ..hlsl_options.clone()
            };
            let mut hlsl_out = String::new();
            hlsl::Writer::new(&mut hlsl_out, &options, &hlsl::PipelineOptions::default())
                .write(module, info, None)
                .unwrap_or_else(|e| panic!("{name}: HLSL {shader_model:?}: {e}"));
            // num_workgroups must come from wgpu's special-constants root
            // constants (without them naga reads SV_GroupID instead).
            // They take the register after the module's uniforms (b0, b1, ...).
            if source.contains("@builtin(num_workgroups)") {
                let register = format!(
                    "ConstantBuffer<NagaConstants> _NagaConstants: register(b{}",
                    source.matches("var<uniform>").count()
                );
                assert!(
                    hlsl_out.contains(&register),
                    "{name}: HLSL {shader_model:?} reads num_workgroups without wgpu's special constants"
                );
            }
        }

        // wgpu asks naga for SPIR-V 1.3 (Vulkan 1.1) where SUBGROUP is on.
        let (spv_options, envs): (_, &[&str]) = if uses_subgroups(source) {
            let options = spv::Options {
                lang_version: (1, 3),
                ..Default::default()
            };
            (options, &["vulkan1.1"])
        } else {
            (spv::Options::default(), &["vulkan1.0", "vulkan1.1"])
        };
        let words = spv::write_vec(module, info, &spv_options, None)
            .unwrap_or_else(|e| panic!("{name}: SPIR-V: {e}"));
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for &env in envs {
            external(
                "spirv-val",
                &["--target-env", env],
                &format!("{name}.spv"),
                &bytes,
            );
        }
    }

    // wgpu's GL backend never offers SHADER_F16 or SUBGROUP, so kernels
    // using them need no GLSL.
    let glsl_versions: &[glsl::Version] = if uses_f16(source) || uses_subgroups(source) {
        &[]
    } else if gles_limits {
        &[glsl::Version::new_gles(310)]
    } else {
        &[glsl::Version::Desktop(430), glsl::Version::new_gles(310)]
    };
    for &version in glsl_versions {
        for entry in &entries {
            let options = glsl::Options {
                version,
                ..Default::default()
            };
            let pipeline = glsl::PipelineOptions {
                shader_stage: naga::ShaderStage::Compute,
                entry_point: entry.clone(),
                multiview: None,
            };
            let mut out = String::new();
            glsl::Writer::new(
                &mut out,
                module,
                info,
                &options,
                &pipeline,
                naga::proc::BoundsCheckPolicies::default(),
            )
            .and_then(|mut w| w.write())
            .unwrap_or_else(|e| panic!("{name}::{entry}: GLSL {version}: {e}"));
            let file = format!(
                "{name}.{entry}.{}.comp",
                if version.is_es() { "es" } else { "core" }
            );
            if gles_limits {
                let conf = gles31_limits_conf();
                if let Some(conf) = conf {
                    external(
                        "glslangValidator",
                        &[conf.as_str(), "-S", "comp"],
                        &file,
                        out.as_bytes(),
                    );
                }
            } else {
                external("glslangValidator", &["-S", "comp"], &file, out.as_bytes());
            }
        }
    }
    entries
}

/// Whether a shader needs `SHADER_F16` (then: HLSL SM 6.2 only, no GLSL).
fn uses_f16(source: &str) -> bool {
    source.contains("enable f16;")
}

/// Kernels with subgroup operations: wgpu offers `SUBGROUP` on Vulkan
/// (SPIR-V 1.3), DX12 (SM 6.0) and Metal, never on GL.
fn uses_subgroups(source: &str) -> bool {
    source.contains("subgroup")
}

/// MSL and HLSL options as wgpu's Metal and DX12 backends pass them for our
/// one bind group: binding 0 the uniform, then storage buffers in binding
/// order. Metal: buffer slots in binding order and a sizes buffer for the
/// runtime-sized arrays; DX12: the uniform at b0, read-only storage as SRVs
/// t0.., read-write as UAVs u0.., num_workgroups from the special-constants
/// root constants at b1, no made-up bindings.
fn backend_options(module: &naga::Module, entries: &[String]) -> (msl::Options, hlsl::Options) {
    let mut msl_map = msl::BindingMap::default();
    let mut hlsl_map = hlsl::BindingMap::default();
    let (mut cbv, mut srv, mut uav) = (0u32, 0u32, 0u32);
    let mut globals: Vec<_> = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| g.binding.map(|b| (b, g.space)))
        .collect();
    globals.sort_by_key(|(b, _)| (b.group, b.binding));
    for (binding, space) in &globals {
        let mutable = matches!(
            space,
            naga::AddressSpace::Storage { access } if access.contains(naga::StorageAccess::STORE)
        );
        msl_map.insert(
            *binding,
            msl::BindTarget {
                buffer: Some(binding.binding as u8),
                mutable,
                ..Default::default()
            },
        );
        let register = match space {
            naga::AddressSpace::Uniform => &mut cbv,
            _ if mutable => &mut uav,
            _ => &mut srv,
        };
        hlsl_map.insert(
            *binding,
            hlsl::BindTarget {
                space: binding.group as u8,
                register: *register,
                ..Default::default()
            },
        );
        *register += 1;
    }
    let resources = msl::EntryPointResources {
        resources: msl_map,
        immediates_buffer: None,
        sizes_buffer: Some(globals.len() as u8),
    };
    let msl = msl::Options {
        lang_version: (2, 0),
        per_entry_point_map: entries
            .iter()
            .map(|e| (e.clone(), resources.clone()))
            .collect(),
        fake_missing_bindings: false,
        zero_initialize_workgroup_memory: false,
        force_loop_bounding: true,
        ..Default::default()
    };
    let hlsl = hlsl::Options {
        binding_map: hlsl_map,
        fake_missing_bindings: false,
        special_constants_binding: Some(hlsl::BindTarget {
            space: 0,
            register: cbv,
            ..Default::default()
        }),
        zero_initialize_workgroup_memory: false,
        restrict_indexing: true,
        force_loop_bounding: true,
        ..Default::default()
    };
    (msl, hlsl)
}

/// Where the validators' input files go (removed at the end of the test).
fn scratch_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("wgpu-tp-shaders-{}", std::process::id()))
}

/// Whether `tool` runs here. In CI (`CI` set) a missing validator fails the
/// test: `.ci/run` installs them (`spirv-tools`, `glslang-tools`).
fn have(tool: &str) -> bool {
    static SEEN: std::sync::Mutex<Vec<(String, bool)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, ok)) = seen.iter().find(|(t, _)| t == tool) {
        return *ok;
    }
    let ok = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok();
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{tool} not found: CI must install it (apt-get install spirv-tools glslang-tools)"
        );
        eprintln!(
            "[shaders] {tool} not found: that output is translated but NOT externally validated (install spirv-tools / glslang-tools)"
        );
    }
    seen.push((tool.to_string(), ok));
    ok
}

/// Run `tool args.. FILE` on `bytes` written to FILE, if the tool is installed;
/// a non-zero exit fails the test with the tool's output.
fn external(tool: &str, args: &[&str], file: &str, bytes: &[u8]) {
    if !have(tool) {
        return;
    }
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new(tool)
        .args(args)
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("running {tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {} {}: rejected\n{}{}",
        args.join(" "),
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A glslang resource file with GLES 3.1's minimum compute limits (work
/// groups of 128 × 128 × 64), or None without glslangValidator. Written
/// once: the workers validate in parallel, and rewriting the file while
/// another worker's glslangValidator read it gave that one a truncated file,
/// whose limits rejected dropout's work group (CI, 684729f).
fn gles31_limits_conf() -> Option<String> {
    static CONF: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    CONF.get_or_init(write_gles31_limits_conf).clone()
}

fn write_gles31_limits_conf() -> Option<String> {
    if !have("glslangValidator") {
        return None;
    }
    let out = std::process::Command::new("glslangValidator")
        .arg("-c")
        .output()
        .ok()?;
    let conf: String = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let key = l.split_whitespace().next().unwrap_or("");
            match key {
                "MaxComputeWorkGroupSizeX" | "MaxComputeWorkGroupSizeY" => format!("{key} 128"),
                "MaxComputeWorkGroupSizeZ" => format!("{key} 64"),
                _ => l.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join("gles31.conf");
    std::fs::write(&path, conf).ok()?;
    Some(path.display().to_string())
}

#[test]
fn every_shader_validates_and_translates_to_all_backends() {
    let shaders = wgpu_tp::kernels::all_shaders();
    assert!(!shaders.is_empty());
    // One worker per core: the generated GEMM variants make this the
    // suite's longest test, and each shader is independent.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((name, source)) = shaders.get(i) else {
                        break;
                    };
                    let entries = translate(name, source);
                    let targets = if uses_f16(source) {
                        // wgpu's GL backend never offers SHADER_F16.
                        "MSL, HLSL SM 6.2, SPIR-V (f16; no GLSL: wgpu's GL has no SHADER_F16)"
                    } else if uses_subgroups(source) {
                        "MSL, HLSL SM 6.0, SPIR-V 1.3 (subgroups; no GLSL: wgpu's GL has none)"
                    } else {
                        "MSL, HLSL SM 5.1/6.0, SPIR-V, GLSL 430/310es"
                    };
                    eprintln!("[shaders] {name}: {} -> {targets}", entries.join(", "));
                }
            });
        }
    });
    eprintln!("[shaders] {} families translated", shaders.len());
    let _ = std::fs::remove_dir_all(scratch_dir());
}

#[test]
fn the_fxc_check_catches_runtime_indexed_component_stores() {
    // The pattern an earlier GEMM shader had (wgpu issue 4460), and a clean twin.
    let bad = "@compute @workgroup_size(1) fn main(@builtin(local_invocation_index) i: u32) {
        var av: array<vec4<f32>, 4>;
        av[i][i % 4u] = 1.0;
    }";
    let good = "@compute @workgroup_size(1) fn main(@builtin(local_invocation_index) i: u32) {
        var av: array<vec4<f32>, 4>;
        av[i] = vec4<f32>(1.0);
    }";
    let check = |src: &str| {
        let module = naga::front::wgsl::parse_str(src).unwrap();
        let info = Validator::new(ValidationFlags::all(), Capabilities::all())
            .validate(&module)
            .unwrap();
        dynamic_vector_component_stores(&module, &info)
    };
    assert_eq!(check(bad).len(), 1, "{:?}", check(bad));
    assert!(check(good).is_empty());
}

/// The cooperative-matrix GEMM (`kernels::coop_shaders`) validates with
/// naga's cooperative-matrix capability and becomes SPIR-V 1.6, the version
/// wgpu asks for on Vulkan 1.3 devices (those with `VK_KHR_cooperative_matrix`),
/// which `spirv-val` accepts for Vulkan 1.3. Only SPIR-V: wgpu offers the
/// feature on Vulkan and Metal, and naga's MSL writer takes 8×8 matrices only.
#[test]
fn the_cooperative_matrix_gemm_validates_and_translates_to_spirv() {
    let shaders = wgpu_tp::kernels::coop_shaders();
    assert_eq!(shaders.len(), 2, "f16 operands, C f32 or f16");
    let dir = std::env::temp_dir().join(format!("wgpu-tp-coop-{}", std::process::id()));
    for (name, source) in shaders {
        assert!(source.contains("coopMultiplyAdd"), "{name}");
        let module = naga::front::wgsl::parse_str(source)
            .unwrap_or_else(|e| panic!("{name}: WGSL parse error:\n{}", e.emit_to_string(source)));
        let info = Validator::new(ValidationFlags::all(), Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: validation error:\n{}", e.emit_to_string(source)));
        // Without the capability naga must refuse it (the check above is real).
        let refused = Validator::new(
            ValidationFlags::all(),
            Capabilities::all() - Capabilities::COOPERATIVE_MATRIX,
        )
        .validate(&module);
        assert!(
            refused.is_err(),
            "{name}: validated without COOPERATIVE_MATRIX"
        );
        let options = spv::Options {
            lang_version: (1, 6),
            ..Default::default()
        };
        let words = spv::write_vec(&module, &info, &options, None)
            .unwrap_or_else(|e| panic!("{name}: SPIR-V: {e}"));
        if !have("spirv-val") {
            continue;
        }
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.spv"));
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(&path, bytes).unwrap();
        let out = std::process::Command::new("spirv-val")
            .args(["--target-env", "vulkan1.3"])
            .arg(&path)
            .output()
            .expect("running spirv-val");
        let err = String::from_utf8_lossy(&out.stderr);
        // 6022 is CooperativeMatrixKHR: SPIRV-Tools v2023.1 (Debian 12) predates it.
        if err.contains("Invalid capability operand: 6022") {
            eprintln!(
                "[shaders] {name}: this spirv-val predates SPV_KHR_cooperative_matrix: not externally validated"
            );
            continue;
        }
        assert!(
            out.status.success(),
            "spirv-val --target-env vulkan1.3 {}: rejected\n{}",
            path.display(),
            err
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

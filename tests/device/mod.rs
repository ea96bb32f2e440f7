//! Adapter selection: clear errors (never panics) for names and backends that
//! match nothing or make no sense, and software adapters that work without a GPU;
//! `limits` (weaker device limits), `memory` (bytes the pools hold), `settings`
//! (the `WGPU_TP_*` variables parsed, checked and documented) and `trace`
//! (the per-kernel timeline).

mod axes;
mod blocks;
mod limits;
mod memory;
mod settings;
mod trace;
mod tune;

use crate::util::mesh_env;
use wgpu_tp::{Error, MeshBuilder, adapters, parse_backends};

#[test]
fn adapter_name_matching_nothing_is_no_adapter() {
    mesh_env();
    // The builder option, not WGPU_ADAPTER_NAME: tests run in parallel.
    match MeshBuilder::new().adapter_name("no-such-gpu").build() {
        Err(e @ Error::NoAdapter { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("no-such-gpu"), "{msg}");
            assert!(
                msg.contains("mesa-vulkan-drivers"),
                "says how to get one: {msg}"
            );
        }
        other => panic!("expected NoAdapter, got {other:?}"),
    }
}

#[test]
fn unknown_backend_names_are_errors() {
    assert!(matches!(
        parse_backends("nonsense"),
        Err(Error::UnknownBackend(name)) if name == "nonsense"
    ));
    assert!(matches!(
        parse_backends("vulkan,nonsense"),
        Err(Error::UnknownBackend(_))
    ));
    assert!(matches!(parse_backends(""), Err(Error::UnknownBackend(_))));
    let b = parse_backends("vulkan, gl").unwrap();
    assert_eq!(b, wgpu::Backends::VULKAN | wgpu::Backends::GL);
}

#[test]
fn zero_ranks_is_an_error() {
    assert!(matches!(
        MeshBuilder::new().ranks(0).build(),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn software_adapters_are_listed_and_usable() {
    mesh_env();
    let list = adapters(None);
    assert!(!list.is_empty(), "no adapters at all");
    for a in &list {
        eprintln!(
            "[device] adapter {} ({:?}, {:?})",
            a.info.name, a.info.backend, a.info.device_type
        );
    }
    let has_software = list
        .iter()
        .any(|a| a.info.device_type == wgpu::DeviceType::Cpu);
    if !has_software && std::env::var_os("CI").is_none() {
        // A GPU machine without Mesa's software drivers: nothing to check
        // here (CI always installs them, and there this test must run).
        eprintln!("[device] skipped: no software adapter on this machine");
        return;
    }
    let m = MeshBuilder::new()
        .ranks(2)
        .force_software(true)
        .build()
        .unwrap();
    assert_eq!(m.size(), 2);
    for r in m.ranks() {
        assert!(r.device().is_cpu(), "{:?}", r.device().adapter_info());
    }
    eprintln!("[device] force_software picked {}", m.adapter_summary());
    // Unless told otherwise, ranks on a CPU adapter share one device; one
    // rank, or a layout named, keeps a device per rank.
    assert_eq!(m.layout(), wgpu_tp::DeviceLayout::SharedDevice);
    assert_eq!(m.devices().len(), 1);
    let one = MeshBuilder::new().force_software(true).build().unwrap();
    assert_eq!(one.layout(), wgpu_tp::DeviceLayout::Simulated);
    let each = MeshBuilder::new()
        .ranks(2)
        .force_software(true)
        .layout(wgpu_tp::DeviceLayout::Simulated)
        .build()
        .unwrap();
    assert_eq!(each.devices().len(), 2);
    assert_eq!(each.transport(), wgpu_tp::Transport::HostStaged);
    let t = m.ranks()[1].upload(&[3], &[1.0, 2.0, 3.0]).unwrap();
    let y = wgpu_tp::kernels::scale(&t, 2.0).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![2.0, 4.0, 6.0]);
}

#[test]
fn tensors_over_the_binding_limit_are_errors_naming_the_limit() {
    let m = crate::util::mesh(1);
    let r = &m.ranks()[0];
    let limit = r.device().limits().max_storage_buffer_binding_size;
    let n = (limit / 4 + 1) as usize;
    // Past one binding a tensor is stored as row blocks; one row cannot be.
    let err = r.zeros(&[1, n], wgpu_tp::DType::F32).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err:?}");
    assert!(
        err.to_string().contains("max_storage_buffer_binding_size"),
        "{err}"
    );
    // Shapes whose element count overflows are errors too, not panics.
    assert!(r.zeros(&[usize::MAX, 4], wgpu_tp::DType::F32).is_err());
    // The device is still usable.
    let t = r.upload(&[2], &[1.0, 2.0]).unwrap();
    assert_eq!(
        wgpu_tp::kernels::add(&t, &t).unwrap().to_vec().unwrap(),
        vec![2.0, 4.0]
    );
}

#[test]
fn wgpu_validation_errors_come_back_as_results() {
    // A raw wgpu misuse through the escape hatch (`Device::wgpu_device`) must surface
    // as an Err at the next sync point, not as a panic from wgpu's default handler.
    crate::util::mesh_env();
    let m = wgpu_tp::Mesh::simulated(1).unwrap();
    let gpu = m.ranks()[0].device().clone();
    let _bad = gpu.wgpu_device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("invalid on purpose"),
        size: 16,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE,
        mapped_at_creation: false,
    });
    // The next library call on that device reports it.
    let err = m.ranks()[0].upload(&[1], &[1.0]).unwrap_err();
    assert!(matches!(err, Error::Wgpu { .. }), "{err:?}");
    assert!(err.to_string().contains("rank 0"), "{err}");
    // The error was reported once; the mesh works afterwards.
    let t = m.ranks()[0].upload(&[2], &[1.0, 2.0]).unwrap();
    assert_eq!(
        wgpu_tp::kernels::scale(&t, 3.0).unwrap().to_vec().unwrap(),
        vec![3.0, 6.0]
    );
}

//! Adapter selection: clear errors (never panics) for names and backends that
//! match nothing or make no sense, and software adapters that work without a GPU.

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
    let m = MeshBuilder::new()
        .ranks(2)
        .force_software(true)
        .build()
        .unwrap();
    assert_eq!(m.size(), 2);
    for r in m.ranks() {
        assert!(r.gpu().is_cpu(), "{:?}", r.gpu().adapter_info());
    }
    eprintln!("[device] force_software picked {}", m.adapter_summary());
    let t = m.ranks()[1].upload(&[3], &[1.0, 2.0, 3.0]).unwrap();
    let y = wgpu_tp::kernels::scale(&t, 2.0).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![2.0, 4.0, 6.0]);
}

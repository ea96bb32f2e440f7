//! Per-kernel tracing: off records nothing; on, a known sequence (a gemm and
//! an add on each of 2 ranks, one all-reduce, one ring step) gives one kernel
//! slice per dispatch per rank with its name and shapes, one span per
//! collective per rank with its bytes, and Chrome JSON that parses back;
//! with both clocks, on a simulated and on a shared-device mesh, and for a
//! mesh traced from build to drop. Runs on whichever backend `WGPU_BACKEND`
//! picks (the suite runs on Vulkan and on GL).
//!
//! These tests use meshes of their own (tracing a shared test mesh would
//! record other tests' kernels) and take turns on them.

use std::sync::{Mutex, MutexGuard, OnceLock};

use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::{
    DeviceLayout, EventKind, LocalTensor, Mesh, MeshBuilder, Trace, TraceClock, kernels,
};

use crate::util::mesh_env;

const M: usize = 8;
const K: usize = 16;
const N: usize = 12;

/// This module's meshes: 2 simulated ranks, and 2 ranks on one device.
fn meshes() -> MutexGuard<'static, (Mesh, Mesh)> {
    static MESHES: OnceLock<Mutex<(Mesh, Mesh)>> = OnceLock::new();
    MESHES
        .get_or_init(|| {
            mesh_env();
            let simulated = MeshBuilder::new()
                .ranks(2)
                .layout(DeviceLayout::Simulated)
                .build()
                .expect("an adapter");
            let shared = MeshBuilder::new()
                .ranks(2)
                .shared_device()
                .build()
                .expect("an adapter");
            Mutex::new((simulated, shared))
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Per rank: `c = a·b` then `c + c`; then one all-reduce of the sums and one
/// ring step. Returns the all-reduced tensors (read back by the caller).
fn workload(mesh: &Mesh) -> Vec<LocalTensor> {
    let mut sums = Vec::new();
    for (r, rank) in mesh.ranks().iter().enumerate() {
        let a: Vec<f32> = (0..M * K).map(|i| ((i + r) % 5) as f32).collect();
        let b: Vec<f32> = (0..K * N).map(|i| (i % 3) as f32).collect();
        let a = rank.upload(&[M, K], &a).unwrap();
        let b = rank.upload(&[K, N], &b).unwrap();
        let c = kernels::gemm(&a, &b, kernels::GemmOptions::new()).unwrap();
        sums.push(kernels::add(&c, &c).unwrap());
    }
    let reduced = comm::all_reduce(mesh, &sums, ReduceOp::Sum).unwrap();
    comm::ring_shift(mesh, &sums).unwrap();
    reduced
}

/// Everything the known workload must leave in a trace of `mesh`.
fn check_trace(mesh: &Mesh, trace: &Trace, clock: TraceClock) {
    let bytes = (M * N * 4) as u64;
    assert_eq!(trace.tracks().len(), 2);
    for t in trace.tracks() {
        assert_eq!(t.clock, clock, "rank {} clock", t.rank);
        assert_eq!(t.adapter, mesh.ranks()[t.rank].device().adapter_info().name);
    }
    for e in trace.events() {
        assert!(e.start_us >= 0.0 && e.start_us.is_finite(), "{e:?}");
        assert!(e.duration_us >= 0.0 && e.duration_us.is_finite(), "{e:?}");
    }
    for r in 0..2 {
        // The shared-device all-reduce adds its own copy_fold kernels on one rank;
        // the GEMM may pack its operands first.
        let kernels: Vec<_> = trace
            .kernels()
            .filter(|e| {
                e.rank == r
                    && !e.name.starts_with("copy_fold::")
                    && !e.name.starts_with("transpose::")
            })
            .collect();
        let names: Vec<&str> = kernels.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names.len(), 2, "rank {r}: {names:?}");
        // The GEMM, or for these few rows its small-M kernel.
        let gemm = names[0].starts_with("gemm::") || names[0].starts_with("gemv_");
        assert!(gemm, "rank {r}: {names:?}");
        assert_eq!(names[1], "elementwise::axpby", "rank {r}");
        assert_eq!(kernels[0].shapes[0], [M, K]);
        assert_eq!(kernels[0].shapes[1], [K, N]);
        assert_eq!(kernels[0].shapes.last().unwrap(), &[M, N]);
        assert_eq!(kernels[1].shapes, [[M, N], [M, N], [M, N]]);
        assert!(kernels[0].arg("workgroups").unwrap() > 0);
        // The add reads the gemm's output: it cannot start before the gemm did.
        assert!(kernels[1].start_us >= kernels[0].start_us, "{kernels:?}");

        let spans: Vec<_> = trace.host_spans().filter(|e| e.rank == r).collect();
        let names: Vec<&str> = spans.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["AllReduce", "SendRecv"], "rank {r}");
        for s in spans {
            assert_eq!(s.category, "comm");
            assert_eq!(s.arg("bytes"), Some(2 * bytes), "{s:?}");
            assert_eq!(s.arg("rank_bytes"), Some(bytes), "{s:?}");
            assert_eq!(s.arg("participants"), Some(2), "{s:?}");
        }
    }
    let top = trace.top_kernels(100);
    let calls: u64 = top.iter().map(|k| k.calls).sum();
    assert_eq!(calls as usize, trace.kernels().count());
    let share: f64 = top.iter().map(|k| k.share).sum();
    assert!(
        trace.kernel_time().is_zero() || (share - 1.0).abs() < 1e-9,
        "{top:?}"
    );
    assert!(top.windows(2).all(|w| w[0].total >= w[1].total), "{top:?}");
    assert_eq!(trace.top_kernels(1).len(), 1);
    check_json(trace);
}

/// The Chrome JSON parses back, with one "X" event per slice, on the right
/// tracks, and a named track per rank.
fn check_json(trace: &Trace) {
    let json: serde_json::Value =
        serde_json::from_str(&trace.to_chrome_json()).expect("valid JSON");
    let events = json["traceEvents"].as_array().expect("a traceEvents array");
    let slices: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), trace.events().len());
    for (s, e) in slices.iter().zip(trace.events()) {
        assert_eq!(s["name"], e.name.as_str());
        assert!(s["ts"].as_f64().unwrap() >= 0.0);
        assert!(s["dur"].as_f64().unwrap() >= 0.0);
        assert!(s["pid"].is_u64());
        let tid = s["tid"].as_u64().unwrap() as usize;
        match e.kind {
            EventKind::Kernel => {
                assert_eq!(tid, e.rank);
                let shapes = s["args"]["shapes"].as_array().unwrap();
                assert_eq!(shapes.len(), e.shapes.len());
                let first: Vec<usize> = serde_json::from_value(shapes[0].clone()).unwrap();
                assert_eq!(first, e.shapes[0]);
            }
            EventKind::HostSpan => {
                assert_ne!(tid, e.rank);
                assert_eq!(s["args"]["bytes"].as_u64(), e.arg("bytes"));
            }
        }
    }
    for r in 0..2 {
        let named = events.iter().any(|e| {
            e["ph"] == "M"
                && e["name"] == "thread_name"
                && e["tid"] == r
                && e["args"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("rank {r} · "))
        });
        assert!(named, "rank {r} has a named track");
    }
}

#[test]
fn trace_off_records_nothing() {
    let guard = meshes();
    for mesh in [&guard.0, &guard.1] {
        assert!(!mesh.is_tracing());
        workload(mesh)[0].to_vec().unwrap();
        assert!(!mesh.is_tracing());
        let err = mesh.stop_trace().unwrap_err().to_string();
        assert!(err.contains("start_trace"), "{err}");
        // A trace started after the work holds none of it.
        mesh.start_trace().unwrap();
        let trace = mesh.stop_trace().unwrap();
        assert!(!mesh.is_tracing());
        assert_eq!(trace.events().len(), 0, "{:?}", trace.events());
        assert_eq!(trace.tracks().len(), 2);
        assert!(trace.top_kernels(5).is_empty());
        check_json(&trace);
    }
}

#[test]
fn trace_records_kernels_and_collectives_per_rank() {
    let guard = meshes();
    for mesh in [&guard.0, &guard.1] {
        // Warm up so pipeline builds stay out of the slices.
        workload(mesh)[0].to_vec().unwrap();
        let has_queries = mesh.ranks()[0]
            .device()
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY);
        let clock = if has_queries {
            TraceClock::Device
        } else {
            TraceClock::Host
        };
        mesh.start_trace().unwrap();
        assert!(mesh.is_tracing());
        let out = workload(mesh);
        let trace = mesh.stop_trace().unwrap();
        check_trace(mesh, &trace, clock);
        // The traced results are still right: 2·(a·b) summed over 2 ranks.
        let got = out[1].to_vec().unwrap();
        assert!(got.iter().all(|v| v.is_finite()) && got.iter().any(|&v| v > 0.0));
        // Tracing is off again: nothing more is recorded.
        assert!(!mesh.is_tracing());
        assert!(mesh.stop_trace().is_err());
    }
}

#[test]
fn trace_with_host_clock() {
    let guard = meshes();
    for mesh in [&guard.0, &guard.1] {
        workload(mesh)[0].to_vec().unwrap();
        mesh.start_trace_with(TraceClock::Host).unwrap();
        workload(mesh);
        let trace = mesh.stop_trace().unwrap();
        check_trace(mesh, &trace, TraceClock::Host);
        // Host-clock kernels of one rank run one after another.
        for r in 0..2 {
            let k: Vec<_> = trace.kernels().filter(|e| e.rank == r).collect();
            assert!(
                k.windows(2).all(|w| w[1].start_us >= w[0].end_us()),
                "{k:?}"
            );
        }
    }
}

#[test]
fn trace_restart_drops_the_old_trace() {
    let guard = meshes();
    let mesh = &guard.0;
    workload(mesh)[0].to_vec().unwrap();
    mesh.start_trace().unwrap();
    workload(mesh);
    mesh.start_trace().unwrap();
    let trace = mesh.stop_trace().unwrap();
    assert_eq!(trace.events().len(), 0, "{:?}", trace.events());
}

#[test]
fn trace_to_writes_the_file_when_the_mesh_drops() {
    mesh_env();
    let dir = std::env::temp_dir().join(format!("wgpu-tp-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dropped.json");
    let _ = std::fs::remove_file(&path);
    let mesh = MeshBuilder::new().ranks(2).trace_to(&path).build().unwrap();
    assert!(mesh.is_tracing());
    let sums = workload(&mesh);
    drop(sums);
    let clone = mesh.clone();
    drop(mesh);
    assert!(!path.exists(), "written only when the last handle drops");
    drop(clone);
    let text = std::fs::read_to_string(&path).expect("the trace file");
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let names: Vec<&str> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| e["name"].as_str())
        .collect();
    let gemms = names
        .iter()
        .filter(|n| n.starts_with("gemm::") || n.starts_with("gemv_"))
        .count();
    assert_eq!(gemms, 2);
    assert_eq!(names.iter().filter(|n| **n == "AllReduce").count(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_write_to_a_bad_path_is_an_error() {
    let guard = meshes();
    let mesh = &guard.0;
    mesh.start_trace().unwrap();
    let trace = mesh.stop_trace().unwrap();
    let err = trace
        .write_chrome_json("/nonexistent-dir/for/sure/t.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("writable"), "{err}");
}

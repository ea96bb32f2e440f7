//! One mesh per (kind, world size) for the whole test binary: each wgpu device
//! compiles its own pipelines, so sharing meshes across modules saves minutes.

use std::sync::{Mutex, OnceLock};

use wgpu_tp::shard::split_range;
use wgpu_tp::{DeviceLayout, LocalTensor, Mesh, Trace};

use super::reference::{slice, with_dim};

/// World sizes every parallel test covers.
pub const WORLD_SIZES: &[usize] = &[1, 2, 3, 4, 8];

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Simulated,
    SharedDevice,
    CountingSimulated,
    CountingSharedDevice,
}

/// One mesh per (kind, world size) for the whole test binary, poisoned so
/// unwritten kernel outputs show as NaN.
fn cached(kind: Kind, n: usize) -> Mesh {
    let shared = matches!(kind, Kind::SharedDevice | Kind::CountingSharedDevice);
    kept((Some(kind), n, 0, shared), || {
        let b = wgpu_tp::MeshBuilder::new().ranks(n);
        b.layout(layout(shared))
    })
}

/// One device for every rank, or (named, since ranks share one by
/// default) a device each: the host-staged collectives' path.
fn layout(shared: bool) -> DeviceLayout {
    if shared {
        DeviceLayout::SharedDevice
    } else {
        DeviceLayout::Simulated
    }
}

/// The meshes kept for the whole binary: (kind, ranks, 0, shared) of
/// [`cached`], or (None, ranks, binding, shared) of [`limited_mesh`].
type Key = (Option<Kind>, usize, u64, bool);

/// The mesh kept under `key`, built (poisoned) by `builder` the first time.
///
/// A GPU driver opens a limited number of devices per process (NVIDIA's:
/// 63, which the whole suite's meshes pass), so on a hardware adapter only
/// the last-used meshes holding [`GPU_DEVICES_KEPT`] devices are kept; the
/// others are rebuilt when asked for again (a test still using one keeps it
/// alive). CPU adapters keep every mesh, saving their pipeline compiles.
fn kept(key: Key, builder: impl Fn() -> wgpu_tp::MeshBuilder) -> Mesh {
    static MESHES: Mutex<Vec<(Key, Mesh)>> = Mutex::new(Vec::new());
    mesh_env();
    let mut kept = MESHES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = kept.iter().position(|(k, _)| *k == key) {
        let entry = kept.remove(i);
        let m = entry.1.clone();
        kept.push(entry);
        return m;
    }
    let devices = |&(_, n, _, shared): &Key| if shared { 1 } else { n };
    static HARDWARE: OnceLock<bool> = OnceLock::new();
    if HARDWARE.get() == Some(&true) {
        let mut held: usize = kept.iter().map(|(k, _)| devices(k)).sum();
        while held + devices(&key) > GPU_DEVICES_KEPT && !kept.is_empty() {
            held -= devices(&kept.remove(0).0);
        }
    }
    let m = builder()
        .build()
        .expect("a GPU adapter (install mesa-vulkan-drivers)");
    m.set_poison(true);
    HARDWARE.get_or_init(|| !m.ranks()[0].device().is_cpu());
    if let (Some(kind), n, ..) = key {
        eprintln!(
            "[wgpu-tp tests] {kind:?} mesh of {n} ranks on {}",
            m.adapter_summary()
        );
    }
    kept.push((key, m.clone()));
    m
}

/// The devices the kept meshes may hold on a hardware adapter: under
/// NVIDIA's 63 per process with room for the tests' own meshes.
const GPU_DEVICES_KEPT: usize = 24;

/// The shared mesh of `n` simulated ranks on the default adapter (honours
/// `WGPU_BACKEND`), each rank its own wgpu device.
pub fn mesh(n: usize) -> Mesh {
    cached(Kind::Simulated, n)
}

/// The shared mesh of `n` ranks on ONE wgpu device (collectives are on-device
/// copies, `Transport::SharedDevice`).
pub fn shared_mesh(n: usize) -> Mesh {
    cached(Kind::SharedDevice, n)
}

/// [`meshes`] for `n`, when the adapter has `SHADER_F16`; otherwise `None`
/// after printing why `test` is skipped. With `WGPU_TP_REQUIRE_F16=1`
/// (CI's Mesa 25 lavapipe pass) a missing feature fails instead, so the f16
/// tests cannot go quiet where they must run.
pub fn f16_meshes(n: usize, test: &str) -> Option<[(&'static str, Mesh); 2]> {
    let m = mesh(n);
    if m.ranks()[0].device().has_f16() {
        return Some(meshes(n));
    }
    let why = format!(
        "{test}: skipped, adapter {} has no SHADER_F16 (Mesa >= 24 lavapipe has it; wgpu's GL backend never does)",
        m.adapter_summary()
    );
    assert!(
        std::env::var_os("WGPU_TP_REQUIRE_F16").is_none(),
        "WGPU_TP_REQUIRE_F16 is set but {why}"
    );
    eprintln!("[wgpu-tp tests] {why}");
    None
}

/// Both transports for world size `n`, named for messages: [`mesh`]
/// (host-staged) and [`shared_mesh`] (shared-device).
pub fn meshes(n: usize) -> [(&'static str, Mesh); 2] {
    [("host-staged", mesh(n)), ("shared-device", shared_mesh(n))]
}

/// Serialises the tests that read communication counters: hold it while
/// using [`counting_mesh`] / [`counting_shared_mesh`], whose counters no other
/// test touches (tests run in parallel, and the plain meshes are shared).
pub fn count_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Dispatches of kernel `name` (`family::entry`) in `trace`.
pub fn kernel_calls(trace: &Trace, name: &str) -> u64 {
    let all = trace.top_kernels(usize::MAX);
    all.iter().find(|k| k.name == name).map_or(0, |k| k.calls)
}

/// Small-M product dispatches in `trace`: (grouped or paired, one product each).
pub fn gemv_calls(trace: &Trace) -> (u64, u64) {
    let all = trace.top_kernels(usize::MAX);
    let calls = |grouped: bool| {
        let shared = |n: &str| n.ends_with("_group") || n.ends_with("_pair");
        let named = all
            .iter()
            .filter(|k| k.name.starts_with("gemv_") && shared(&k.name) == grouped);
        named.map(|k| k.calls).sum::<u64>()
    };
    (calls(true), calls(false))
}

/// `f()`'s result and its small-M product dispatches on `m` ([`gemv_calls`]
/// of a trace around it; take a private mesh: the trace counts every kernel
/// on the device).
pub fn traced_gemv_calls<T>(m: &Mesh, f: impl FnOnce() -> T) -> ((u64, u64), T) {
    m.synchronize().unwrap();
    m.start_trace().unwrap();
    let out = f();
    m.synchronize().unwrap();
    (gemv_calls(&m.stop_trace().unwrap()), out)
}

/// A simulated mesh reserved for tests that count collectives (take [`count_lock`] first).
pub fn counting_mesh(n: usize) -> Mesh {
    cached(Kind::CountingSimulated, n)
}

/// A shared-device mesh reserved for tests that count collectives (take [`count_lock`] first).
pub fn counting_shared_mesh(n: usize) -> Mesh {
    cached(Kind::CountingSharedDevice, n)
}

/// Both transports' counting meshes for world size `n`, named like [`meshes`]
/// (take [`count_lock`] first).
pub fn counting_meshes(n: usize) -> [(&'static str, Mesh); 2] {
    [
        ("host-staged", counting_mesh(n)),
        ("shared-device", counting_shared_mesh(n)),
    ]
}

/// Sets `XDG_RUNTIME_DIR` once if unset (Vulkan loaders warn without it),
/// and turns kernel tuning off unless `WGPU_TP_TUNE` asks for it (every
/// candidate computes the same bits, and measuring would only add pipeline
/// builds to the suite; tests/device/tune.rs turns it on for itself); call
/// before building a private mesh.
pub fn mesh_env() {
    static ENV: OnceLock<()> = OnceLock::new();
    ENV.get_or_init(|| {
        if std::env::var_os("WGPU_TP_TUNE").is_none() {
            wgpu_tp::set_tuning(wgpu_tp::Tuning {
                enabled: false,
                ..wgpu_tp::tuning()
            });
        }
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            let dir = std::env::temp_dir().join("wgpu-tp-xdg");
            let _ = std::fs::create_dir_all(&dir);
            // SAFETY: set once, before any mesh (and its threads) exists.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", dir) };
        }
    });
}

/// Mesh rank indices `0..n`, the whole group.
pub fn all(n: usize) -> Vec<usize> {
    (0..n).collect()
}

/// Shard a full host tensor along `dim` over the given ranks of `m` (the
/// split rule of `shard::split_range`), one upload per rank.
pub fn shard_f32(
    m: &Mesh,
    x: &[f32],
    shape: &[usize],
    dim: usize,
    ranks: &[usize],
) -> Vec<LocalTensor> {
    let p = ranks.len();
    ranks
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let range = split_range(shape[dim], p, i);
            let part = with_dim(shape, dim, range.len());
            m.ranks()[r]
                .upload(&part, &slice(x, shape, dim, range))
                .unwrap()
        })
        .collect()
}

/// A poisoned mesh of `n` ranks whose devices allow only `binding` bytes per
/// storage binding (WebGPU's other limits), so tensors past it are stored as
/// row blocks; one per (n, binding, shared) for the whole binary. With
/// `shared`, the ranks share one wgpu device (one pipeline cache).
pub fn limited_mesh(n: usize, binding: u64, shared: bool) -> Mesh {
    kept((None, n, binding, shared), || {
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: binding,
            ..wgpu::Limits::default()
        };
        let b = wgpu_tp::MeshBuilder::new().ranks(n).limits(limits);
        b.layout(layout(shared))
    })
}

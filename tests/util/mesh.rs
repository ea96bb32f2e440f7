//! One mesh per (kind, world size) for the whole test binary: each wgpu device
//! compiles its own pipelines, so sharing meshes across modules saves minutes.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use wgpu_tp::shard::split_range;
use wgpu_tp::{LocalTensor, Mesh};

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
    static MESHES: OnceLock<Mutex<HashMap<(Kind, usize), Mesh>>> = OnceLock::new();
    mesh_env();
    let map = MESHES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    map.entry((kind, n))
        .or_insert_with(|| {
            let mut b = wgpu_tp::MeshBuilder::new().ranks(n);
            if matches!(kind, Kind::SharedDevice | Kind::CountingSharedDevice) {
                b = b.shared_device();
            }
            let m = b
                .build()
                .expect("a GPU adapter (install mesa-vulkan-drivers)");
            m.set_poison(true);
            eprintln!(
                "[wgpu-tp tests] {kind:?} mesh of {n} ranks on {}",
                m.adapter_summary()
            );
            m
        })
        .clone()
}

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

/// Sets `XDG_RUNTIME_DIR` once if unset (Vulkan loaders warn without it);
/// call before building a private mesh.
pub fn mesh_env() {
    static ENV: OnceLock<()> = OnceLock::new();
    ENV.get_or_init(|| {
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
    type Meshes = Mutex<HashMap<(usize, u64, bool), Mesh>>;
    static MESHES: OnceLock<Meshes> = OnceLock::new();
    mesh_env();
    let map = MESHES.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    map.entry((n, binding, shared))
        .or_insert_with(|| {
            let limits = wgpu::Limits {
                max_storage_buffer_binding_size: binding,
                ..wgpu::Limits::default()
            };
            let mut b = wgpu_tp::MeshBuilder::new().ranks(n).limits(limits);
            if shared {
                b = b.shared_device();
            }
            let m = b.build().expect("a GPU adapter");
            m.set_poison(true);
            m
        })
        .clone()
}

//! Helpers shared by every test module: one mesh per world size for the whole
//! test binary (each wgpu device compiles its own pipelines, so sharing saves
//! minutes), f64 reference maths, random data and tolerance checks.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use wgpu_tp::Mesh;

pub mod transformer;

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

/// A small deterministic generator (SplitMix64) so tests need no extra crate;
/// seeds come from the test name plus the time, printed on failure.
pub struct Rng(u64);

impl Rng {
    /// Fresh inputs every run; the seed is printed so a failure can be replayed
    /// with `WGPU_TP_SEED`.
    pub fn fresh(label: &str) -> Rng {
        let seed = std::env::var("WGPU_TP_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("[{label}] seed {seed}");
        Rng(seed)
    }

    /// A fixed seed.
    pub fn seeded(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// `n` values uniform in [-1, 1).
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.uniform(-1.0, 1.0)).collect()
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// ‖got − want‖ / ‖want‖ (absolute when ‖want‖ is tiny), in f64.
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let mut num = 0.0;
    let mut den = 0.0;
    for (g, w) in got.iter().zip(want) {
        assert!(
            g.is_finite(),
            "non-finite output {g} (an unwritten, poisoned element?)"
        );
        num += (*g as f64 - w) * (*g as f64 - w);
        den += w * w;
    }
    num.sqrt()
        / den
            .sqrt()
            .max(1e-30)
            .max(if den == 0.0 { 1.0 } else { 0.0 })
}

/// Assert norm-wise relative error ≤ tol, and element-wise |g − w| ≤ tol_abs + 1e-3·|w|.
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    let e = rel_err(got, want);
    assert!(e <= tol, "{what}: relative error {e:.3e} > {tol:.1e}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (*g as f64 - w).abs();
        assert!(
            d <= 1e-4 + 1e-3 * w.abs(),
            "{what}: element {i}: got {g}, want {w} (diff {d:.3e})"
        );
    }
}

/// f64 reference maths on row-major host data.
pub mod reference {
    /// `a [m,k] · b [k,n]` with optional transposes (a is `[k,m]` when `ta`, b is `[n,k]` when `tb`).
    pub fn gemm(
        a: &[f32],
        b: &[f32],
        m: usize,
        n: usize,
        k: usize,
        ta: bool,
        tb: bool,
    ) -> Vec<f64> {
        let mut c = vec![0.0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for l in 0..k {
                    let av = if ta { a[l * m + i] } else { a[i * k + l] } as f64;
                    let bv = if tb { b[j * k + l] } else { b[l * n + j] } as f64;
                    s += av * bv;
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    /// `y = x Wᵀ + b` for `x [t, in]`, `W [out, in]`.
    pub fn linear(
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        t: usize,
        inp: usize,
        out: usize,
    ) -> Vec<f64> {
        let mut y = gemm(x, w, t, out, inp, false, true);
        if let Some(b) = b {
            for i in 0..t {
                for j in 0..out {
                    y[i * out + j] += b[j] as f64;
                }
            }
        }
        y
    }

    /// Column sums of `x [m, n]`.
    pub fn sum_rows(x: &[f32], m: usize, n: usize) -> Vec<f64> {
        let mut s = vec![0.0; n];
        for i in 0..m {
            for j in 0..n {
                s[j] += x[i * n + j] as f64;
            }
        }
        s
    }

    /// f32 → f64.
    pub fn widen(x: &[f32]) -> Vec<f64> {
        x.iter().map(|&v| v as f64).collect()
    }
}

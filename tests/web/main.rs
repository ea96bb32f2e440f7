//! The crate in a browser: wasm32 + WebGPU in headless Chromium, through
//! `wasm-bindgen-test` (`cargo test --target wasm32-unknown-unknown --test
//! web`; `.ci/run` sets `CHROMEDRIVER` and the runner reads
//! `webdriver.json`). Every readback is `async`; all ranks share the page's
//! one device, so collectives never leave the GPU. Each test runs under
//! WebGPU's default limits (what every browser guarantees: 8 storage
//! buffers per stage, 16 KiB workgroup storage, 128 MiB bindings) and again
//! under the adapter's own.
#![cfg(target_arch = "wasm32")]

mod chat;
mod collectives;
mod gpt;
mod kernels;
mod quant;
mod shaders;

use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};
use wgpu_tp::{Mesh, MeshBuilder};

wasm_bindgen_test_configure!(run_in_browser);

/// `console.log`, which the test runner prints.
macro_rules! log {
    ($($t:tt)*) => { web_sys::console::log_1(&format!($($t)*).into()) };
}
pub(crate) use log;

/// Norm-wise tolerance for f32 against f64.
pub const TOL: f64 = 1e-5;

/// The two limit sets every test runs under.
pub fn limit_sets() -> [(&'static str, Option<wgpu::Limits>); 2] {
    [
        ("WebGPU default limits", Some(wgpu::Limits::default())),
        ("adapter limits", None),
    ]
}

/// `p` ranks sharing the page's device, with fresh outputs poisoned (NaN)
/// so a kernel that skips an element cannot pass.
pub async fn mesh(p: usize, limits: Option<wgpu::Limits>) -> Mesh {
    let mut b = MeshBuilder::new().ranks(p);
    if let Some(l) = limits {
        b = b.limits(l);
    }
    let m = b.build_async().await.expect("WebGPU mesh");
    m.set_poison(true);
    m
}

/// ‖got − want‖ / ‖want‖ (absolute where `want` is all zeros).
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w).powi(2))
        .sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    if got.iter().any(|g| !g.is_finite()) {
        return f64::INFINITY;
    }
    (num / den.max(1e-30)).sqrt()
}

/// Fresh random inputs each run (seeded from the clock, printed on failure).
pub struct Rng(u64);

impl Rng {
    /// A stream seeded from the clock; the seed is logged.
    pub fn fresh(label: &str) -> Rng {
        let seed = (js_sys::Date::now() * 1e3) as u64 ^ (label.len() as u64) << 56;
        log!("{label}: seed {seed}");
        Rng(seed)
    }

    /// SplitMix64.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `n` values uniform in [-1, 1).
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }
}

#[wasm_bindgen_test]
async fn webgpu_comes_up_on_the_pages_one_device() {
    let m = mesh(4, None).await;
    let info = m.devices()[0].adapter_info().clone();
    log!("adapter: {info:?}");
    assert_eq!(info.backend, wgpu::Backend::BrowserWebGpu);
    // Four ranks, one device: the shared-device transport.
    assert_eq!(m.devices().len(), 1);
    assert_eq!(m.size(), 4);
    assert_eq!(m.transport(), wgpu_tp::Transport::SharedDevice);
    // A blocking call cannot wait in a browser: it says which to await.
    let x = m.ranks()[0].upload(&[2], &[1.0, 2.0]).unwrap();
    x.to_vec_async().await.unwrap();
    let y = wgpu_tp::kernels::scale(&x, 2.0).unwrap();
    match y.to_vec() {
        Err(wgpu_tp::Error::WouldBlock { op }) => assert_eq!(op, "LocalTensor::to_vec"),
        other => panic!("a blocking read in a browser gave {other:?}"),
    }
    assert_eq!(y.to_vec_async().await.unwrap(), vec![2.0, 4.0]);
    // Waiting for all of it resolves, and a blocking wait says what to await.
    let _z = wgpu_tp::kernels::scale(&y, 3.0).unwrap();
    m.synchronize_async().await.unwrap();
    assert!(matches!(
        m.synchronize(),
        Err(wgpu_tp::Error::WouldBlock {
            op: "Mesh::synchronize"
        })
    ));
}

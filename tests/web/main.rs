//! The crate in a browser: wasm32 + WebGPU in headless Chromium, through
//! `wasm-bindgen-test` (`cargo test --target wasm32-unknown-unknown --test
//! web`; `.ci/run` sets `CHROMEDRIVER` and the runner reads
//! `webdriver.json`). Every readback is `async`; all ranks share the page's
//! one device.
#![cfg(target_arch = "wasm32")]

use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};
use wgpu_tp::{Mesh, MeshBuilder};

wasm_bindgen_test_configure!(run_in_browser);

macro_rules! log {
    ($($t:tt)*) => { web_sys::console::log_1(&format!($($t)*).into()) };
}

async fn mesh(p: usize) -> Mesh {
    MeshBuilder::new()
        .ranks(p)
        .limits(wgpu::Limits::default())
        .build_async()
        .await
        .expect("WebGPU mesh")
}

#[wasm_bindgen_test]
async fn webgpu_comes_up() {
    let m = mesh(1).await;
    let d = &m.devices()[0];
    let info = d.adapter_info();
    log!("adapter: {info:?}");
    assert_eq!(info.backend, wgpu::Backend::BrowserWebGpu);
    let x = m.ranks()[0]
        .upload(&[2, 3], &[1., 2., 3., 4., 5., 6.])
        .unwrap();
    let w = m.ranks()[0].upload(&[3, 1], &[1., 1., 1.]).unwrap();
    let y = wgpu_tp::kernels::matmul(&x, &w).unwrap();
    assert_eq!(y.to_vec_async().await.unwrap(), vec![6., 15.]);
}

//! `Device::memory`: bytes of live tensors, of pooled buffers and of staging
//! buffers, counted as buffers are made, reused, dropped and trimmed.

use crate::util::mesh_env;
use wgpu_tp::{DType, MeshBuilder};

#[test]
fn memory_counts_live_pooled_and_staging_bytes() {
    mesh_env();
    // A private mesh: the shared test meshes see other tests' tensors.
    let m = MeshBuilder::new().ranks(1).build().unwrap();
    let (r, dev) = (&m.ranks()[0], m.ranks()[0].device().clone());
    let start = dev.memory();
    assert_eq!(start.in_use, 0, "{start:?}");
    // 1000 f32 = 4000 bytes, pooled in 256-byte buckets: 4096.
    let a = r.zeros(&[1000], DType::F32).unwrap();
    let after_a = dev.memory();
    assert_eq!(after_a.in_use, 4096, "{after_a:?}");
    // 13 i32 = 52 bytes, rounded to one 256-byte bucket.
    let b = r.zeros(&[13], DType::I32).unwrap();
    assert_eq!(dev.memory().in_use, 4096 + 256);
    drop(a);
    m.synchronize().unwrap();
    let dropped = dev.memory();
    assert_eq!((dropped.in_use, dropped.pooled), (256, 4096), "{dropped:?}");
    // The same size again comes from the pool: nothing new is held.
    let c = r.zeros(&[1000], DType::F32).unwrap();
    assert_eq!((dev.memory().in_use, dev.memory().pooled), (4096 + 256, 0));
    // A download takes a staging buffer and keeps it for the next one.
    assert_eq!(c.to_vec().unwrap(), vec![0.0; 1000]);
    assert!(dev.memory().staging >= 4000, "{:?}", dev.memory());
    drop((b, c));
    m.synchronize().unwrap();
    assert_eq!(dev.memory().in_use, 0);
    dev.trim_pool();
    let trimmed = dev.memory();
    assert_eq!(trimmed.total(), 0, "{trimmed:?}");
}

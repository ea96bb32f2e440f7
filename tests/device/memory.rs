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
    // The peak saw a, b, c's staging at once; a reset starts it at what is held.
    assert!(trimmed.peak >= 4096 + 256 + 4000, "{trimmed:?}");
    dev.reset_peak_memory();
    assert_eq!(dev.memory().peak, 0);
    let d = r.zeros(&[13], DType::I32).unwrap();
    assert_eq!(dev.memory().peak, 256);
    drop(d);
}

/// Buffers of 16 MiB or more are destroyed when dropped, not pooled (a GPT-2
/// step's large temporaries come in many sizes), also when dropped while a
/// recorded command still uses them; smaller ones are pooled and reused.
#[test]
fn large_buffers_are_destroyed_not_pooled() {
    mesh_env();
    let m = MeshBuilder::new().ranks(1).build().unwrap();
    let (r, dev) = (&m.ranks()[0], m.ranks()[0].device().clone());
    let large = 4usize << 20; // f32s: 16 MiB
    for pending in [false, true] {
        let a = r.zeros(&[large], DType::F32).unwrap();
        let small = r.zeros(&[large / 2 - 64], DType::F32).unwrap();
        m.synchronize().unwrap();
        let held = dev.memory();
        assert_eq!(held.in_use, (16 << 20) + (8 << 20) - 256, "{held:?}");
        // `pending`: a copy of `a` is recorded but not submitted when it drops.
        let b = pending.then(|| a.deep_copy().unwrap());
        drop((a, small, b));
        m.synchronize().unwrap();
        let after = dev.memory();
        assert_eq!(
            (after.in_use, after.pooled),
            (0, (8 << 20) - 256),
            "pending {pending}: {after:?}"
        );
        // The small size comes back from the pool, the large one is new.
        let allocated = dev.buffers_allocated();
        let small = r.zeros(&[large / 2 - 64], DType::F32).unwrap();
        assert_eq!(dev.buffers_allocated(), allocated, "pending {pending}");
        let a = r.zeros(&[large], DType::F32).unwrap();
        assert_eq!(dev.buffers_allocated(), allocated + 1, "pending {pending}");
        assert_eq!(a.to_vec().unwrap(), vec![0.0; large]);
        drop((a, small));
        m.synchronize().unwrap();
        dev.trim_pool();
    }
}

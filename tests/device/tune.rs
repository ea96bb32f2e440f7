//! Kernel variants chosen by measurement (`device::tune`): a one-row product
//! large enough to matter is measured once per shape class, its choice is
//! one of the candidates, listed by `tuned_choices`, written to the cache
//! directory as JSON, and the product's result equals f64 whatever was
//! chosen (the candidates measured against each other compute the same
//! bits: tests/kernels/gemv.rs, gemv_split.rs and gemv_texture.rs); on CPU
//! adapters a weight read again measures the texture entries beside the
//! buffer kernel (where the driver guesses none, 32 MiB weights or more:
//! a tied head); saving removes this adapter's files of other kernel code.

use crate::util::{Rng, assert_close_cancelling, mesh, mesh_env, reference};
use std::time::Duration;
use wgpu_tp::kernels::{self, GemmOptions};

#[test]
fn a_large_one_row_product_is_measured_once_and_its_choice_kept_on_disk() {
    mesh_env();
    let before = wgpu_tp::tuning();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tune-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let on = wgpu_tp::Tuning {
        enabled: true,
        dir: Some(dir.clone()),
        budget: Duration::from_secs(120),
    };
    wgpu_tp::set_tuning(on.clone());
    let mut rng = Rng::fresh("tune");
    let m1 = mesh(1);
    let r = &m1.ranks()[0];
    // Files other kernel code wrote for this adapter (pruned when this
    // code saves) and one of another adapter (kept).
    let file = wgpu_tp::tuning_file(r.device(), &on).expect("a cache file name");
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let prefix = &name[..name
        .find("_kernels_")
        .expect("the kernels' hash in the name")];
    std::fs::create_dir_all(&dir).unwrap();
    let stale = [
        dir.join(format!("{prefix}_kernels_0123456789abcdef.json")),
        dir.join(format!("{prefix}.json")),
    ];
    let foreign = dir.join("another_adapter_kernels_0123456789abcdef.json");
    for f in stale.iter().chain([&foreign]) {
        std::fs::write(f, "{}").unwrap();
    }
    // N·K = 2^19 weights: above the size the kernel measures from.
    let (m, n, k) = (1usize, 1031usize, 509usize);
    let (a, b) = (rng.vec(m * k), rng.vec(n * k));
    let a_t = r.upload(&[m, k], &a).unwrap();
    let b_t = r.upload(&[n, k], &b).unwrap();
    let opts = GemmOptions::new().trans_b(true);
    let got = kernels::gemm(&a_t, &b_t, opts).unwrap().to_vec().unwrap();
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    let want = reference::gemm(&a, &b, m, n, k, false, true);
    let scale = reference::gemm(&abs(&a), &abs(&b), m, n, k, false, true);
    assert_close_cancelling("tuned gemv", &got, &want, &scale, 1e-5);
    // A weight's second product on a CPU adapter: its texture class, the
    // texture knobs measured beside the buffer kernel's guess (K 512: whole
    // texels). Where the driver's guess takes no texture (lavapipe), only
    // a weight of 32 MiB or more is measured for one.
    let small = texture_class(r, &mut rng, 3001, "n 4096 k 512 texture");
    let large = texture_class(r, &mut rng, 16411, "n 32768 k 512 texture");
    let by_default = kernels::gemv::texture_by_default(r.device());
    for (what, found, want) in [("small", small, by_default), ("large", large, true)] {
        if !r.device().is_cpu() {
            assert!(found.is_empty(), "{what}: textures on a GPU: {found:?}");
            continue;
        }
        assert_eq!(
            found.len(),
            want as usize,
            "{what}: texture classes {found:?}"
        );
        let mut knobs: Vec<String> = (kernels::gemv::TEXTURE_CANDIDATES.iter())
            .map(|(c, wg)| format!("texture cols {c} wg {wg}"))
            .collect();
        knobs.push("wg 32".into());
        for (_, _, choice) in &found {
            assert!(knobs.contains(choice), "{what}: a candidate: {found:?}");
        }
    }
    let class =
        |c: &str| c.contains("gemv_nk") && c.contains("n 2048 k 512") && !c.contains("texture");
    let ours: Vec<_> = wgpu_tp::tuned_choices()
        .into_iter()
        .filter(|(_, c, _)| class(c))
        .collect();
    wgpu_tp::set_tuning(before);
    assert_eq!(ours.len(), 1, "one choice for the class: {ours:?}");
    // Hardware GPUs measure the split-K kernel's knobs (32 invocations per
    // column), other adapters the serial kernel's workgroups.
    let names: Vec<String> = match !r.device().is_gpu() {
        true => kernels::gemv::CANDIDATES
            .iter()
            .map(|c| format!("wg {}", 16 * c))
            .collect(),
        false => kernels::gemv::SPLIT_CANDIDATES
            .iter()
            .map(|c| format!("split wg {}", 32 * c))
            .collect(),
    };
    assert!(names.contains(&ours[0].2), "a candidate: {ours:?}");
    let text = std::fs::read_to_string(&file).expect("the choice written to disk");
    for f in &stale {
        assert!(!f.exists(), "{} outlived the save", f.display());
    }
    assert!(foreign.exists(), "another adapter's file was removed");
    let saved: std::collections::BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
    assert_eq!(
        saved.get(&ours[0].1),
        Some(&ours[0].2),
        "{}",
        file.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A weight `[n, 512]` read three times (its texture class measured where
/// one is), each product against f64; the tuned choices naming `class`.
fn texture_class(
    r: &wgpu_tp::Rank,
    rng: &mut Rng,
    n: usize,
    class: &str,
) -> Vec<(String, String, String)> {
    let k = 512;
    let opts = GemmOptions::new().trans_b(true);
    let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<_>>();
    let (a, b) = (rng.vec(k), rng.vec(n * k));
    let a_t = r.upload(&[1, k], &a).unwrap();
    let b_t = r.upload(&[n, k], &b).unwrap();
    let want = reference::gemm(&a, &b, 1, n, k, false, true);
    let scale = reference::gemm(&abs(&a), &abs(&b), 1, n, k, false, true);
    for pass in 0..3 {
        let got = kernels::gemm(&a_t, &b_t, opts.weight(true)).unwrap();
        let what = format!("tuned gemv, a weight [{n}, {k}] read again, pass {pass}");
        assert_close_cancelling(&what, &got.to_vec().unwrap(), &want, &scale, 1e-5);
    }
    wgpu_tp::tuned_choices()
        .into_iter()
        .filter(|(_, c, _)| c.contains(class))
        .collect()
}

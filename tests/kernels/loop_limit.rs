//! Kernels whose invocation walks a whole row or column (the norm's
//! parameter gradients over tokens, the embedding's scatter-add over
//! tokens): past 65535 steps, Mesa < 24's llvmpipe ends the loop silently,
//! so there they refuse with an error; every other adapter gives the exact
//! sums (all-ones data: the sums are counts, exact in f32).

use crate::util::mesh;
use wgpu_tp::kernels;
use wgpu_tp::{Error, Rank};

/// Whether `r`'s adapter is a CPU adapter on Mesa < 24 (the loop limit).
pub fn loop_limited(r: &Rank) -> bool {
    let driver = &r.device().adapter_info().driver_info;
    r.device().is_cpu()
        && driver
            .split("Mesa ")
            .nth(1)
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok())
            .is_some_and(|major| major < 24)
}

/// A refusal that names the limit, after which the rank still works.
fn refused(e: Error, r: &Rank) {
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("65535"), "{e}");
    let t = r.upload(&[2], &[1.0, 2.0]).unwrap();
    assert_eq!(t.to_vec().unwrap(), vec![1.0, 2.0]);
}

#[test]
fn walks_past_65535_tokens_are_exact_or_refused() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let limited = loop_limited(r);
    let (tokens, cols) = (70_001, 3);

    // Norm parameter gradients: dγ = Σ dy·(x − mean)·rstd, dβ = Σ dy.
    let ones = r
        .upload(&[tokens, cols], &vec![1.0; tokens * cols])
        .unwrap();
    let stats: Vec<f32> = (0..tokens).flat_map(|_| [0.0, 1.0]).collect();
    let stats = r.upload(&[tokens, 2], &stats).unwrap();
    match kernels::norm_param_grads(&ones, &stats, &ones, true) {
        Err(e) if limited => refused(e, r),
        Ok(g) if !limited => assert_eq!(g.to_vec().unwrap(), vec![tokens as f32; 2 * cols]),
        other => panic!("limited {limited}: {other:?}"),
    }

    // Embedding scatter-add: ids cycle over 4 rows, so row i gets a count.
    let ids: Vec<i32> = (0..tokens).map(|i| (i % 4) as i32).collect();
    let ids = r.upload_i32(&[tokens], &ids).unwrap();
    match kernels::embedding_backward(&ids, &ones, 4, 0, None) {
        Err(e) if limited => refused(e, r),
        Ok(g) if !limited => {
            let want: Vec<f32> = (0..4)
                .flat_map(|i| [(tokens - i).div_ceil(4) as f32; 3])
                .collect();
            assert_eq!(g.to_vec().unwrap(), want);
        }
        other => panic!("limited {limited}: {other:?}"),
    }
}

//! Ranks sharing one CPU adapter record their one-token attention steps
//! together (`kernels/attention/decode_group.rs`): `gqa_decode` and
//! `gqa_decode_rotary` on a shared device give, bit for bit, the output and
//! cache of a device per rank (where each step runs alone), and the f64
//! reference, at P = 2, 3, 4, 8 over several decoded tokens, in one
//! dispatch per group of ranks the device binds (four on lavapipe, two on
//! GL, none under WebGPU's limits; none on a GPU).

use super::fd::wide;
use super::gqa::{host_gqa, spec};
use crate::util::{Rng, assert_close, count_lock, counting_mesh, counting_shared_mesh};
use wgpu_tp::{DTensor, Mesh, Placement, Trace};

/// Dispatches of the grouped steps and of single steps in `trace`.
fn steps(trace: &Trace) -> (u64, u64) {
    let all = trace.top_kernels(usize::MAX);
    let calls = |f: &dyn Fn(&str) -> bool| -> u64 {
        all.iter().filter(|k| f(&k.name)).map(|k| k.calls).sum()
    };
    (
        calls(&|n| n.starts_with("attention_decode_group")),
        calls(&|n| n == "attention_decode::attend_one"),
    )
}

/// Each step's output and the last cache on `m`, with the steps' traces.
#[allow(clippy::too_many_arguments)]
fn decode(
    m: &Mesh,
    (h, kv, d): (usize, usize, usize),
    prompt: usize,
    tokens: usize,
    (q, k, v): (&[f32], &[f32], &[f32]),
    tables: Option<(&[f32], &[f32])>,
) -> (Vec<Vec<f32>>, Vec<f32>, Vec<Trace>) {
    let (hd, kvd) = (h * d, kv * d);
    let mut cache: Option<DTensor> = None;
    let (mut outs, mut traces, mut past) = (Vec::new(), Vec::new(), 0);
    for n in std::iter::once(prompt).chain(std::iter::repeat_n(1, tokens)) {
        let rows = |w: usize| past * w..(past + n) * w;
        let sq = DTensor::from_host_in_units(m, &[n, hd], &q[rows(hd)], Placement::Shard(1), d);
        let rep = |x: &[f32], w: usize| {
            DTensor::from_host(m, &[n, w], &x[rows(w)], Placement::Replicate).unwrap()
        };
        let (sk, sv) = (rep(k, kvd), rep(v, kvd));
        let sp = spec(h, kv, d, 0, n);
        m.start_trace().unwrap();
        let (out, grown) = match tables {
            None => sq.unwrap().gqa_decode(&sk, &sv, cache.as_ref(), &sp),
            Some((cos, sin)) => {
                let (c, s) = (rep(cos, d / 2), rep(sin, d / 2));
                sq.unwrap()
                    .gqa_decode_rotary([&sk, &sv], cache.as_ref(), &sp, (&c, &s))
            }
        }
        .unwrap();
        traces.push(m.stop_trace().unwrap());
        outs.push(out.to_host().unwrap());
        (cache, past) = (Some(grown), past + n);
    }
    (outs, cache.unwrap().to_host().unwrap(), traces)
}

#[test]
fn shared_ranks_decode_together_with_each_ranks_bits_p2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("gqa grouped decode");
    let (prompt, tokens) = (3, 3);
    let total = prompt + tokens;
    // (heads, kv_heads, head_dim, rotated): 8 heads on 8 ranks, and 3 on 4
    // (a rank with no query head decodes alone).
    for (h, kv, d, rotated) in [(8, 2, 8, true), (8, 4, 4, false), (3, 1, 8, true)] {
        let (q, k, v) = (
            rng.vec(total * h * d),
            rng.vec(total * kv * d),
            rng.vec(total * kv * d),
        );
        let (cos, sin) = (rng.vec(total * d / 2), rng.vec(total * d / 2));
        let tables = rotated.then_some((&cos[..], &sin[..]));
        for p in [2, 3, 4, 8] {
            let what = format!("P={p} heads {h} kv {kv} d {d} rotated {rotated}");
            let shape = (h, kv, d);
            let alone = decode(
                &counting_mesh(p),
                shape,
                prompt,
                tokens,
                (&q, &k, &v),
                tables,
            );
            let shared = counting_shared_mesh(p);
            let together = decode(&shared, shape, prompt, tokens, (&q, &k, &v), tables);
            for (t, (a, b)) in alone.0.iter().zip(&together.0).enumerate() {
                assert!(
                    a == b,
                    "{what}: step {t}'s output differs from a device per rank"
                );
            }
            assert!(alone.1 == together.1, "{what}: the caches differ");
            // Against f64 where nothing rotates.
            if !rotated {
                let want = host_gqa(&wide(&q), &wide(&k), &wide(&v), &spec(h, kv, d, 0, total));
                let got: Vec<f32> = together.0.concat();
                assert_close(&what, &got, &want, 1e-5);
            }
            // Every rank with a query head decodes each token in a group,
            // as many ranks a dispatch as the device binds eight buffers for.
            let dev = shared.ranks()[0].device();
            let size = (dev.limits().max_storage_buffers_per_shader_stage as usize / 8).min(4);
            let busy = p.min(h);
            let grouped = size >= 2 && busy == p && !dev.is_gpu();
            for (t, trace) in together.2.iter().enumerate().skip(1) {
                let (groups, singles) = steps(trace);
                let want = match grouped {
                    // A last chunk of one rank decodes alone.
                    true => (
                        busy / size + usize::from(busy % size >= 2),
                        busy % size == 1,
                    ),
                    false => (0, !dev.is_gpu() && d % 4 == 0),
                };
                assert_eq!(
                    (groups, singles > 0),
                    (want.0 as u64, want.1),
                    "{what}: token {t}, {size} ranks a dispatch"
                );
            }
        }
    }
}

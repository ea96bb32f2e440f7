//! transformers' sampling on the device: the repetition penalty changes
//! exactly the seen ids; greedy with a penalty, top-k and top-p keep the
//! tokens (with the probabilities) of an f64 reference of transformers'
//! processors, on ragged vocabularies at P = 1, 2, 3, 4 on both transports,
//! and of transformers itself (`fixtures/sampling/sampling.json`); top-p
//! beyond the device's candidates reads the row back and stays exact;
//! cached generation equals `generate_uncached` with top-p and a penalty on
//! the shipped tiny GPT-2 and Llama; bad options are errors.

use std::path::PathBuf;

use crate::util::{Rng, mesh, meshes, shared_mesh};
use wgpu_tp::models::CausalLm;
use wgpu_tp::nn::{SampleOptions, Sampling};
use wgpu_tp::tensor::{RowPenalty, vocab_penalized_row};
use wgpu_tp::{DTensor, Placement};

const PS: [usize; 4] = [1, 2, 3, 4];

/// transformers' processors in f64, literally: penalty, temperature,
/// top-k, top-p (ascending sort, drop while the cumulative mass ≤ 1 −
/// top_p, keep the best), then the softmax of what is kept, best first.
fn reference(logits: &[f32], seen: &[i32], o: &SampleOptions) -> Vec<(usize, f64)> {
    let n = logits.len();
    let mut z: Vec<f64> = logits.iter().map(|&v| v as f64).collect();
    let mut hit = vec![false; n];
    for &id in seen {
        if id >= 0 && (id as usize) < n {
            hit[id as usize] = true;
        }
    }
    let pen = o.repetition_penalty as f64;
    for (v, h) in z.iter_mut().zip(&hit) {
        if *h {
            *v = if *v < 0.0 { *v * pen } else { *v / pen };
        }
    }
    for v in &mut z {
        *v /= o.temperature as f64;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| z[b].total_cmp(&z[a]).then(a.cmp(&b)));
    let mut keep: Vec<usize> = order.clone();
    if let Some(k) = o.top_k {
        keep.truncate(k);
    }
    if let Some(p) = o.top_p.filter(|&p| p < 1.0) {
        let m = z[keep[0]];
        let sum: f64 = keep.iter().map(|&i| (z[i] - m).exp()).sum();
        let mut cum = 0.0;
        let mut drop = 0;
        // Ascending: worst first.
        for &i in keep.iter().rev().take(keep.len() - 1) {
            cum += (z[i] - m).exp() / sum;
            if cum <= 1.0 - p as f64 {
                drop += 1;
            } else {
                break;
            }
        }
        keep.truncate(keep.len() - drop);
    }
    let m = z[keep[0]];
    let sum: f64 = keep.iter().map(|&i| (z[i] - m).exp()).sum();
    keep.iter().map(|&i| (i, (z[i] - m).exp() / sum)).collect()
}

fn assert_same(what: &str, got: &[(usize, f64)], want: &[(usize, f64)]) {
    let ids = |d: &[(usize, f64)]| d.iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(ids(got), ids(want), "{what}: kept ids");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g.1 - w.1).abs() <= 1e-6,
            "{what}: id {} p {} vs {}",
            g.0,
            g.1,
            w.1
        );
    }
}

fn logits_on(mesh: &wgpu_tp::Mesh, rows: usize, x: &[f32]) -> DTensor {
    let vocab = x.len() / rows;
    DTensor::from_host(mesh, &[rows, vocab], x, Placement::Shard(1)).unwrap()
}

fn options(seed: u64) -> Vec<SampleOptions> {
    let o = |temperature, top_k, top_p, repetition_penalty| SampleOptions {
        temperature,
        top_k,
        top_p,
        repetition_penalty,
        seed,
    };
    vec![
        o(0.7, None, Some(0.8), 1.3),
        o(1.3, Some(10), Some(0.6), 0.8),
        o(1.0, None, Some(0.3), 1.0),
        o(0.9, Some(7), None, 1.7),
        o(1.0, None, Some(1.0), 1.2),
    ]
}

#[test]
fn penalty_changes_exactly_the_seen_ids_p1_2_3_4() {
    let mut rng = Rng::fresh("sampling_penalty");
    for p in PS {
        for (name, mesh) in meshes(p) {
            for vocab in [37, 101] {
                let x: Vec<f32> = (0..2 * vocab).map(|_| rng.uniform(-3.0, 3.0)).collect();
                let logits = logits_on(&mesh, 2, &x);
                let mut seen: Vec<i32> = (0..9).map(|_| rng.below(vocab) as i32).collect();
                // Duplicates count once; ids outside the vocab are skipped.
                seen.extend([seen[0], seen[1], vocab as i32 + 4, -1]);
                for penalty in [1.4f32, 0.6] {
                    let got = vocab_penalized_row(
                        &logits,
                        1,
                        RowPenalty {
                            seen: &seen,
                            penalty,
                        },
                    )
                    .unwrap()
                    .to_host()
                    .unwrap();
                    let row = &x[vocab..];
                    for (i, (&g, &v)) in got.iter().zip(row).enumerate() {
                        if seen.contains(&(i as i32)) {
                            let want = if v < 0.0 {
                                v as f64 * penalty as f64
                            } else {
                                v as f64 / penalty as f64
                            };
                            assert!(
                                (g as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
                                "{name} P={p} vocab {vocab} id {i}: {g} vs {want}"
                            );
                            assert_ne!(g, v, "{name} P={p} id {i} seen but unchanged");
                        } else {
                            assert_eq!(g.to_bits(), v.to_bits(), "{name} P={p} id {i} changed");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn kept_sets_equal_transformers_reference_p1_2_3_4() {
    let mut rng = Rng::fresh("sampling_kept");
    for p in PS {
        for (name, mesh) in meshes(p) {
            for vocab in [37, 101] {
                let x: Vec<f32> = (0..2 * vocab).map(|_| rng.uniform(-4.0, 4.0)).collect();
                let logits = logits_on(&mesh, 2, &x);
                let row = &x[vocab..];
                let mut seen: Vec<i32> = (0..6).map(|_| rng.below(vocab) as i32).collect();
                // The best token is seen: the penalty moves the arg-max.
                let best = (0..vocab).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)));
                seen.push(best.unwrap() as i32);
                for o in options(rng.next_u64()) {
                    let what = format!("{name} P={p} vocab {vocab} {o:?}");
                    let want = reference(row, &seen, &o);
                    let s = Sampling::Sample(o);
                    let got = s.distribution(&logits, 1, &seen).unwrap();
                    assert!(!got.read_row, "{what}: the candidates cover the vocab");
                    assert_same(&what, &got.kept, &want);
                    assert_same(&what, &s.row_distribution(row, &seen).unwrap(), &want);
                }
                // Greedy with the penalty: the reference's arg-max.
                let g = Sampling::GreedyWithPenalty {
                    repetition_penalty: 2.5,
                };
                let o = SampleOptions {
                    repetition_penalty: 2.5,
                    top_k: Some(1),
                    ..SampleOptions::default()
                };
                let want = reference(row, &seen, &o)[0].0;
                let got = g.distribution(&logits, 1, &seen).unwrap().kept;
                assert_eq!(got, vec![(want, 1.0)], "{name} P={p} greedy with penalty");
                // The plain top-k is unchanged: k tokens at the temperature.
                let t = Sampling::TopK {
                    k: 5,
                    temperature: 0.8,
                    seed: 1,
                };
                let o = SampleOptions {
                    temperature: 0.8,
                    top_k: Some(5),
                    ..SampleOptions::default()
                };
                let got = t.distribution(&logits, 1, &[]).unwrap().kept;
                assert_same(
                    &format!("{name} P={p} top-k"),
                    &got,
                    &reference(row, &[], &o),
                );
            }
        }
    }
}

#[test]
fn top_p_beyond_the_candidates_reads_the_row_p1_2_3_4() {
    let mut rng = Rng::fresh("sampling_fallback");
    let vocab = 601;
    for p in PS {
        for (name, mesh) in meshes(p) {
            // Nearly flat: 0.9 of the mass needs far more than 256 tokens.
            let x: Vec<f32> = (0..vocab).map(|_| rng.uniform(-0.2, 0.2)).collect();
            let logits = logits_on(&mesh, 1, &x);
            let seen = [3, 77, 500];
            let o = SampleOptions {
                temperature: 0.9,
                top_p: Some(0.9),
                repetition_penalty: 1.2,
                ..SampleOptions::default()
            };
            let got = Sampling::Sample(o).distribution(&logits, 0, &seen).unwrap();
            assert!(got.read_row, "{name} P={p}: top-p needs the row");
            assert!(got.kept.len() > 256);
            assert_same(
                &format!("{name} P={p} flat"),
                &got.kept,
                &reference(&x, &seen, &o),
            );
            // Peaked: the candidates reach it on the device.
            let y: Vec<f32> = x.iter().map(|v| v * 60.0).collect();
            let logits = logits_on(&mesh, 1, &y);
            let got = Sampling::Sample(o).distribution(&logits, 0, &seen).unwrap();
            assert!(!got.read_row, "{name} P={p}: the candidates suffice");
            assert_same(
                &format!("{name} P={p} peaked"),
                &got.kept,
                &reference(&y, &seen, &o),
            );
        }
    }
}

#[test]
fn kept_sets_equal_transformers_fixture() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sampling/sampling.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    for p in [1, 3] {
        let mesh = mesh(p);
        for (c, case) in cases.iter().enumerate() {
            let x: Vec<f32> = case["logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            let seen: Vec<i32> = case["seen"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap() as i32)
                .collect();
            let o = SampleOptions {
                temperature: case["temperature"].as_f64().unwrap() as f32,
                top_k: case["top_k"].as_u64().map(|k| k as usize),
                top_p: case["top_p"].as_f64().map(|v| v as f32),
                repetition_penalty: case["repetition_penalty"].as_f64().unwrap() as f32,
                seed: 0,
            };
            let want: Vec<(usize, f64)> = case["kept"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| (k[0].as_u64().unwrap() as usize, k[1].as_f64().unwrap()))
                .collect();
            let got = Sampling::Sample(o)
                .distribution(&logits_on(&mesh, 1, &x), 0, &seen)
                .unwrap();
            assert_same(&format!("P={p} case {c}"), &got.kept, &want);
            assert_same(
                &format!("host case {c}"),
                &Sampling::Sample(o).row_distribution(&x, &seen).unwrap(),
                &want,
            );
        }
    }
}

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/data")
        .join(name)
}

fn samplings(seed: u64) -> Vec<Sampling> {
    let o = |temperature, top_k, top_p, repetition_penalty, seed| {
        Sampling::Sample(SampleOptions {
            temperature,
            top_k,
            top_p,
            repetition_penalty,
            seed,
        })
    };
    vec![
        o(0.8, None, Some(0.9), 1.3, seed),
        o(1.0, Some(20), Some(0.7), 1.1, seed ^ 1),
        o(1.2, None, Some(0.98), 1.0, seed ^ 2),
        Sampling::GreedyWithPenalty {
            repetition_penalty: 1.5,
        },
    ]
}

#[test]
fn cached_generation_equals_uncached_with_top_p_and_penalty_tiny_models() {
    let seed = Rng::fresh("sampling_tiny").next_u64();
    for (p, m) in [(1, mesh(1)), (2, mesh(2)), (3, shared_mesh(3))] {
        let gpt = CausalLm::from_pretrained(&m, data("tiny-gpt2")).unwrap();
        let llama = CausalLm::from_pretrained(&m, data("tiny-llama")).unwrap();
        let prompt = [5, 9, 5, 40];
        for s in samplings(seed) {
            let cached = gpt.generate(&prompt, 10, s).unwrap();
            assert_eq!(
                cached,
                gpt.generate_uncached(&prompt, 10, s).unwrap(),
                "gpt P={p} {s:?}"
            );
            let cached = llama.generate(&prompt, 10, s).unwrap();
            assert_eq!(
                cached,
                llama.generate_uncached(&prompt, 10, s).unwrap(),
                "llama P={p} {s:?}"
            );
        }
    }
}

#[test]
fn bad_sampling_options_are_errors() {
    let mesh = mesh(2);
    let gpt = CausalLm::from_pretrained(&mesh, data("tiny-gpt2")).unwrap();
    let logits = logits_on(&mesh, 1, &[0.5; 13]);
    let ok = SampleOptions::default();
    let bad = [
        SampleOptions {
            top_p: Some(0.0),
            ..ok
        },
        SampleOptions {
            top_p: Some(-0.5),
            ..ok
        },
        SampleOptions {
            top_p: Some(1.5),
            ..ok
        },
        SampleOptions {
            top_p: Some(f32::NAN),
            ..ok
        },
        SampleOptions {
            repetition_penalty: 0.0,
            ..ok
        },
        SampleOptions {
            repetition_penalty: -1.0,
            ..ok
        },
        SampleOptions {
            temperature: 0.0,
            ..ok
        },
        SampleOptions {
            temperature: -2.0,
            ..ok
        },
        SampleOptions {
            top_k: Some(0),
            ..ok
        },
    ];
    let mut all: Vec<Sampling> = bad.into_iter().map(Sampling::Sample).collect();
    all.push(Sampling::GreedyWithPenalty {
        repetition_penalty: 0.0,
    });
    for s in all {
        assert!(gpt.generate(&[1, 2], 2, s).is_err(), "{s:?}");
        assert!(gpt.generate_uncached(&[1, 2], 2, s).is_err(), "{s:?}");
        assert!(s.distribution(&logits, 0, &[]).is_err(), "{s:?}");
        assert!(s.row_distribution(&[0.5; 13], &[]).is_err(), "{s:?}");
    }
    assert!(Sampling::Sample(ok).distribution(&logits, 0, &[]).is_ok());
}

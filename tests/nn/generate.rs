//! Generation's on-device choice: `vocab_top_k` over vocab shards equals a
//! host sort of the whole row (ties: the lowest id) at P = 1, 2, 3, 4, 8 on
//! both transports with ragged vocabularies (some ranks hold one column or
//! none); cached generation, which chooses on the device, gives the host
//! sampler's tokens (`generate_uncached`) for greedy and seeded top-k,
//! repeatably; `generate_with` streams the same tokens and stops on an error.

use crate::util::{Rng, WORLD_SIZES, meshes};
use wgpu_tp::models::{CausalLm, Gpt2Config};
use wgpu_tp::nn::Sampling;
use wgpu_tp::tensor::vocab_top_k;
use wgpu_tp::{DTensor, Error, Placement};

#[test]
fn vocab_top_k_equals_the_host_sort_with_ties_p1_2_3_4_8() {
    let mut rng = Rng::fresh("vocab_top_k");
    for &p in WORLD_SIZES {
        for (name, mesh) in meshes(p) {
            for vocab in [5, 13, 37] {
                let rows = 2;
                // Three distinct values: ties everywhere, across shard edges.
                let x: Vec<f32> = (0..rows * vocab).map(|_| rng.below(3) as f32).collect();
                let logits =
                    DTensor::from_host(&mesh, &[rows, vocab], &x, Placement::Shard(1)).unwrap();
                for row in 0..rows {
                    let line = &x[row * vocab..(row + 1) * vocab];
                    let mut order: Vec<usize> = (0..vocab).collect();
                    order.sort_by(|&a, &b| line[b].total_cmp(&line[a]).then(a.cmp(&b)));
                    for k in [1, 2, 4, vocab, vocab + 3] {
                        let got = vocab_top_k(&logits, row, k).unwrap();
                        let want: Vec<(f32, usize)> =
                            order.iter().take(k).map(|&i| (line[i], i)).collect();
                        assert_eq!(got, want, "{name} P={p} vocab {vocab} row {row} k {k}");
                    }
                }
            }
            // Replicated logits are not vocab shards.
            let rep =
                DTensor::from_host(&mesh, &[1, 3], &[1.0, 2.0, 3.0], Placement::Replicate).unwrap();
            assert!(vocab_top_k(&rep, 0, 1).is_err());
        }
    }
}

#[test]
fn device_choice_gives_the_host_samplers_tokens_p2_8() {
    let mut rng = Rng::fresh("device_choice");
    let seed = rng.next_u64();
    let mut cfg = Gpt2Config::new(13, 10, 12, 3, 1);
    cfg.n_inner = Some(20);
    let prompt: Vec<i32> = (0..2).map(|_| rng.below(13) as i32).collect();
    for p in [2, 8] {
        let mesh = crate::util::mesh(p);
        let gpt = CausalLm::new(&mesh, cfg.clone(), seed).unwrap();
        for sampling in [
            Sampling::Greedy,
            Sampling::TopK {
                k: 5,
                temperature: 0.7,
                seed,
            },
            Sampling::TopK {
                k: 1,
                temperature: 1.0,
                seed: seed ^ 1,
            },
            Sampling::TopK {
                k: 40,
                temperature: 2.0,
                seed: seed ^ 2,
            },
        ] {
            let device = gpt.generate(&prompt, 8, sampling).unwrap();
            let host = gpt.generate_uncached(&prompt, 8, sampling).unwrap();
            assert_eq!(device, host, "P={p} {sampling:?}: device vs host choice");
            assert_eq!(
                gpt.generate(&prompt, 8, sampling).unwrap(),
                device,
                "repeatable"
            );
            let mut streamed = Vec::new();
            let with = gpt
                .generate_with(&prompt, 8, sampling, |t| {
                    streamed.push(t);
                    Ok(())
                })
                .unwrap();
            assert_eq!((&with, &streamed), (&device, &device), "streamed");
        }
        // The callback's error stops generation and comes back.
        let mut seen = 0;
        let err = gpt
            .generate_with(&prompt, 8, Sampling::Greedy, |_| {
                seen += 1;
                if seen == 3 {
                    Err(Error::Io(std::io::Error::other("enough")))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(err.to_string().contains("enough"), "{err}");
        assert_eq!(seen, 3);
    }
}

//! Embedding layers: the vocab-split `VocabParallelEmbedding` and the
//! dim-split `ParallelEmbedding` against f64 for every world size, with
//! repeated and padding ids, and their communication as docs/MATH.md
//! ("Embeddings") says; a GPT-2 vocabulary (50257) and a vocabulary smaller
//! than P on 8 ranks; out-of-range ids are errors.

use super::TOL;
use crate::util::reference::{embedding_backward, embedding_lookup};
use crate::util::{Rng, WORLD_SIZES, assert_close, assert_only, count_lock, counting_mesh, mesh};
use wgpu_tp::nn::{EmbeddingConfig, ParallelEmbedding, Params, VocabParallelEmbedding};
use wgpu_tp::{Collective, DTensor, Placement};

#[test]
fn embeddings_match_reference_p1_2_3_4_8() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("embeddings");
    let (vocab, dim, n) = (13, 7, 17);
    let table = rng.vec(vocab * dim);
    // Repeated ids, the padding id, the first and last rows.
    let mut ids: Vec<i32> = (0..n).map(|_| rng.below(vocab) as i32).collect();
    ids[0] = 0;
    ids[1] = vocab as i32 - 1;
    ids[2] = 3;
    ids[3] = 3;
    let dout = rng.vec(n * dim);
    for &p in WORLD_SIZES {
        let m = counting_mesh(p);
        for &padding in &[None, Some(3usize)] {
            let mut cfg = EmbeddingConfig::new(vocab, dim);
            cfg.padding_idx = padding;
            // Vocab split.
            let emb = VocabParallelEmbedding::from_master(&m, cfg.clone(), &table).unwrap();
            m.reset_comm_stats();
            let out = emb.forward(&ids).unwrap();
            if p > 1 {
                let what = format!("vocab emb forward P={p}");
                assert_only(&m.comm_stats(), Collective::AllReduce, 1, &what);
            }
            assert_close(
                &format!("vocab emb P={p}"),
                &out.to_host().unwrap(),
                &embedding_lookup(&table, vocab, dim, &ids, 0),
                TOL,
            );
            let d = DTensor::from_host(&m, &[n, dim], &dout, Placement::Replicate).unwrap();
            m.reset_comm_stats();
            out.backward_with(&d).unwrap();
            assert!(
                m.comm_stats().is_empty(),
                "vocab embedding backward communicates nothing"
            );
            let g = emb.weight().master_grad().unwrap().unwrap();
            assert_close(
                &format!("vocab emb grad P={p}"),
                &g,
                &embedding_backward(&ids, &dout, (vocab, dim), 0, None, padding),
                TOL,
            );
            // Dim split.
            let emb = ParallelEmbedding::from_master(&m, cfg, &table).unwrap();
            m.reset_comm_stats();
            let out = emb.forward(&ids).unwrap();
            if p > 1 {
                let what = format!("dim emb forward P={p}");
                assert_only(&m.comm_stats(), Collective::AllGather, 1, &what);
            }
            assert_close(
                &format!("dim emb P={p}"),
                &out.to_host().unwrap(),
                &embedding_lookup(&table, vocab, dim, &ids, 0),
                TOL,
            );
            m.reset_comm_stats();
            out.backward_with(&d).unwrap();
            assert!(
                m.comm_stats().is_empty(),
                "dim embedding backward communicates nothing"
            );
            let g = emb.weight().master_grad().unwrap().unwrap();
            assert_close(
                &format!("dim emb grad P={p}"),
                &g,
                &embedding_backward(&ids, &dout, (vocab, dim), 0, None, padding),
                TOL,
            );
        }
    }
}

#[test]
fn embedding_rejects_out_of_range_ids() {
    let m = mesh(3);
    let emb =
        VocabParallelEmbedding::from_master(&m, EmbeddingConfig::new(5, 2), &[0.5; 10]).unwrap();
    assert!(matches!(
        emb.forward(&[0, 5]),
        Err(wgpu_tp::Error::OutOfRange { .. })
    ));
    assert!(matches!(
        emb.forward(&[-1]),
        Err(wgpu_tp::Error::OutOfRange { .. })
    ));
    assert_eq!(
        emb.forward(&[4]).unwrap().to_host().unwrap(),
        vec![0.5, 0.5]
    );
}

#[test]
fn vocab_embedding_with_gpt2_vocab_and_with_empty_ranks_p8() {
    let mut rng = Rng::fresh("big_small_vocab");
    for &(vocab, dim) in &[(50257usize, 3usize), (5, 4)] {
        let m = mesh(8);
        let table = rng.vec(vocab * dim);
        let emb = VocabParallelEmbedding::from_master(&m, EmbeddingConfig::new(vocab, dim), &table)
            .unwrap();
        // Some ranks hold no rows when vocab < P.
        let held: Vec<usize> = (0..8).map(|r| emb.vocab_range(r).len()).collect();
        assert_eq!(held.iter().sum::<usize>(), vocab);
        if vocab < 8 {
            assert_eq!(&held[vocab..], &vec![0; 8 - vocab][..]);
        }
        // First and last ids, both sides of every shard boundary, a repeat, random ones.
        let mut ids = vec![0, vocab as i32 - 1];
        for r in 1..8 {
            let s = emb.vocab_range(r).start;
            ids.extend([s.saturating_sub(1) as i32, s.min(vocab - 1) as i32]);
        }
        ids.push(ids[3]);
        ids.extend((0..5).map(|_| rng.below(vocab) as i32));
        let n = ids.len();
        let out = emb.forward(&ids).unwrap();
        assert_close(
            &format!("lookup, vocab {vocab} on 8"),
            &out.to_host().unwrap(),
            &embedding_lookup(&table, vocab, dim, &ids, 0),
            TOL,
        );
        let dout = rng.vec(n * dim);
        let dd = DTensor::from_host(&m, &[n, dim], &dout, Placement::Replicate).unwrap();
        out.backward_with(&dd).unwrap();
        assert_close(
            &format!("table gradient, vocab {vocab} on 8"),
            &emb.named_parameters()[0].1.master_grad().unwrap().unwrap(),
            &embedding_backward(&ids, &dout, (vocab, dim), 0, None, None),
            TOL,
        );
    }
}

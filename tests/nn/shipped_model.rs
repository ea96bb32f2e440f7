//! The tiny GPT-2 shipped in `examples/data/tiny-gpt2/` (the default of
//! `examples/generate.rs`, written by `examples/train_tiny.rs`): its
//! tokenizer fits the model and round-trips the text it was trained on, the
//! weights load and are trained (loss far below a uniform guess), and greedy
//! decoding gives the same text at every world size, on both transports.

use std::path::PathBuf;

use crate::util::{mesh, shared_mesh};
use wgpu_tp::nn::{Gpt, Module, Sampling, Tokenizer, pretrained_config};

const GENESIS: &str = include_str!("../../examples/data/genesis_kjv.txt");

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/tiny-gpt2")
}

#[test]
fn shipped_tiny_gpt2_loads_and_decodes_the_same_at_every_p() {
    let tok = Tokenizer::from_dir(dir()).unwrap();
    let cfg = pretrained_config(dir()).unwrap();
    assert_eq!(tok.vocab_size(), cfg.vocab);
    let ids = tok.encode(GENESIS).unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), GENESIS);

    let prompt = tok.encode("And God said").unwrap();
    let window = &ids[..cfg.n_ctx + 1];
    let mut reference: Option<(Vec<i32>, f32)> = None;
    for (p, m) in [
        (1, mesh(1)),
        (2, mesh(2)),
        (3, mesh(3)),
        (2, shared_mesh(2)),
    ] {
        let mut model = Gpt::from_pretrained(&m, dir()).unwrap();
        // The opening of Genesis was in the training data: a trained model
        // predicts it far better than uniform (ln 512 ≈ 6.2).
        let loss = model
            .forward(&window[..cfg.n_ctx], &window[1..], cfg.n_ctx)
            .unwrap()
            .to_host()
            .unwrap()[0];
        model.zero_grad();
        assert!(loss < 3.0, "P = {p}: loss {loss} on the training text");
        let out = model.generate(&prompt, 32, Sampling::Greedy).unwrap();
        let text = tok.decode(&out).unwrap();
        eprintln!("P = {p}: loss {loss:.4}, greedy: And God said{text}");
        match &reference {
            None => reference = Some((out, loss)),
            Some((want, want_loss)) => {
                assert_eq!(&out, want, "P = {p}: greedy tokens differ from P = 1");
                assert!((loss - want_loss).abs() <= 1e-4 * want_loss, "P = {p}");
            }
        }
    }
}

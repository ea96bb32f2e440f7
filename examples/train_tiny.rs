//! Trains the tiny GPT-2 shipped in `examples/data/tiny-gpt2/` (the default
//! model of `examples/generate.rs`), so anyone can regenerate it.
//!
//! Learns a GPT-2-style byte-level BPE tokenizer on Genesis 1–11 of the King
//! James Version (`examples/data/genesis_kjv.txt`, public domain), trains a
//! small GPT-2 (a [`CausalLm`] of a [`Gpt2Config`]) on the tokens with AdamW
//! on P simulated ranks, and writes a Hugging Face GPT-2 directory:
//! `config.json`, `model.safetensors` (via [`CausalLm::save_pretrained`])
//! and `tokenizer.json`. It then loads the directory back with
//! [`CausalLm::from_pretrained`] and prints a greedy sample.
//!
//! Run: `cargo run --release --example train_tiny` (a few minutes on two
//! CPU cores with lavapipe; `-- --help` lists the flags).

mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use wgpu_tp::models::{CausalLm, Gpt2Config};
use wgpu_tp::nn::{AdamW, Params, Sampling, Tokenizer};
use wgpu_tp::{Mesh, MeshBuilder};

const TEXT: &str = include_str!("data/genesis_kjv.txt");
/// GPT-2's end-of-text token, kept so the vocabulary looks like GPT-2's.
const END_OF_TEXT: &str = "<|endoftext|>";

/// Train the tiny GPT-2 that `generate` uses by default.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Output directory (Hugging Face layout).
    #[arg(long, default_value_os_t = common::shipped_model_dir())]
    out: PathBuf,
    /// Tokenizer vocabulary (256 byte tokens + merges + 1 special).
    #[arg(long, default_value_t = 512)]
    vocab: usize,
    /// Context length (rows of `wpe`).
    #[arg(long, default_value_t = 128)]
    ctx: usize,
    /// Model width.
    #[arg(long, default_value_t = 96)]
    hidden: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Transformer blocks.
    #[arg(long, default_value_t = 3)]
    layers: usize,
    /// Tokens per training sequence.
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// Sequences per step.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Training steps.
    #[arg(long, default_value_t = 400)]
    steps: usize,
    /// Peak AdamW learning rate (cosine decay to a tenth).
    #[arg(long, default_value_t = 3e-3)]
    lr: f32,
    /// Seed of the weights and the batches.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Simulated ranks to train on.
    #[arg(long, default_value_t = 1)]
    ranks: usize,
}

/// Mean loss over consecutive windows of `data` (no gradients kept).
fn eval_loss(model: &mut CausalLm, data: &[i32], seq: usize) -> wgpu_tp::Result<f32> {
    let mut losses = Vec::new();
    for w in data.windows(seq + 1).step_by(seq) {
        losses.push(model.loss(&w[..seq], &w[1..], seq)?.to_host()?[0]);
    }
    model.zero_grad();
    Ok(losses.iter().sum::<f32>() / losses.len().max(1) as f32)
}

fn run(args: &Args) -> wgpu_tp::Result<bool> {
    let started = Instant::now();
    let tok = Tokenizer::train_byte_level_bpe(&[TEXT], args.vocab, &[END_OF_TEXT])?;
    let data = tok.encode(TEXT)?;
    // The last tenth is held out to show the model generalises a little.
    let split = data.len() * 9 / 10;
    let (train, held) = data.split_at(split);
    println!(
        "tokenizer: byte-level BPE, {} tokens; Genesis 1-11 is {} bytes = {} tokens ({} train, {} held out)",
        tok.vocab_size(),
        TEXT.len(),
        data.len(),
        train.len(),
        held.len()
    );
    let cfg = Gpt2Config::new(
        tok.vocab_size(),
        args.ctx,
        args.hidden,
        args.heads,
        args.layers,
    );
    let mesh: Mesh = MeshBuilder::new().ranks(args.ranks).build()?;
    println!("adapter {}; {} ranks", mesh.adapter_summary(), mesh.size());
    let mut model = CausalLm::new(&mesh, cfg.clone(), args.seed)?;
    let params: usize = model
        .named_parameters()
        .iter()
        .map(|(_, p)| p.shape().iter().product::<usize>())
        .sum();
    println!(
        "model: {} layers, hidden {}, {} heads, context {}: {params} parameters",
        cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_positions
    );
    let mut opt = AdamW::new(args.lr).with_weight_decay(0.01);
    let mut windows = common::Windows(args.seed);
    let losses = common::train_cosine(args.steps, args.lr, |lr| {
        opt.lr = lr;
        let (ids, targets) = windows.batch(train, args.batch, args.seq);
        let loss = model.loss(&ids, &targets, args.seq)?;
        loss.backward()?;
        opt.step(&mut model)?;
        model.zero_grad();
        Ok(loss.to_host()?[0])
    })?;
    let fell = common::report_curve(&losses, cfg.vocab_size);
    let held_loss = eval_loss(&mut model, held, args.seq)?;
    println!("held-out loss {held_loss:.3}");

    std::fs::create_dir_all(&args.out)?;
    model.save_pretrained(&args.out)?;
    tok.save(args.out.join("tokenizer.json"))?;
    println!("wrote {}", args.out.display());

    // Read back as `generate` will, and show a greedy sample.
    let loaded = CausalLm::from_pretrained(&mesh, &args.out)?;
    let tok = Tokenizer::from_dir(&args.out)?;
    let prompt = tok.encode("And God said")?;
    let out = loaded.generate(&prompt, 48, Sampling::Greedy)?;
    println!("greedy sample: And God said{}", tok.decode(&out)?);
    println!("done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(fell)
}

fn main() -> ExitCode {
    common::quiet_vulkan_loader();
    let args = Args::parse();
    if [args.ranks, args.layers, args.heads, args.steps, args.batch].contains(&0)
        || args.hidden % args.heads.max(1) != 0
        || args.seq > args.ctx
    {
        eprintln!(
            "need ranks, layers, heads, steps, batch ≥ 1, hidden a multiple of heads, seq ≤ ctx"
        );
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

//! Trains the tiny Llama shipped in `examples/data/tiny-llama/` (the model
//! `generate --model examples/data/tiny-llama` and `generate --chat` use),
//! so anyone can regenerate it.
//!
//! A byte-level BPE tokenizer with ChatML's `<|im_start|>` / `<|im_end|>` is
//! learned on Genesis 1–11 (King James Version, public domain); each verse
//! and the next become one chat exchange (`user`: a verse, `assistant`: the
//! next), and a Llama-architecture model (grouped-query attention with 6
//! query heads over 2 key/value heads, RoPE, SwiGLU, RMSNorm, tied head)
//! learns them with AdamW on P simulated ranks. The directory is written in
//! Hugging Face's layout (`config.json`, `generation_config.json` with
//! `<|im_end|>` as eos, `model.safetensors`, `tokenizer.json`, and
//! `tokenizer_config.json` with a ChatML `chat_template`), read back, and a
//! greedy chat answer is printed.
//!
//! Run: `cargo run --release --example train_tiny_llama` (a few minutes on
//! two CPU cores with lavapipe; `-- --help` lists the flags).

mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use wgpu_tp::models::{CausalLm, LlamaConfig};
use wgpu_tp::nn::{AdamW, Params, Sampling, Tokenizer};
use wgpu_tp::{Mesh, MeshBuilder};

const TEXT: &str = include_str!("data/genesis_kjv.txt");
const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// ChatML, as SmolLM2 and Qwen2.5 use it (without their default system message).
const CHAT_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Train the tiny Llama that `generate --chat` uses.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Output directory (Hugging Face layout).
    #[arg(long, default_value_os_t = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/tiny-llama"))]
    out: PathBuf,
    /// Tokenizer vocabulary (256 byte tokens + merges + 3 special).
    #[arg(long, default_value_t = 512)]
    vocab: usize,
    /// Model width.
    #[arg(long, default_value_t = 96)]
    hidden: usize,
    /// Query heads.
    #[arg(long, default_value_t = 6)]
    heads: usize,
    /// Key/value heads.
    #[arg(long, default_value_t = 2)]
    kv_heads: usize,
    /// Decoder layers.
    #[arg(long, default_value_t = 3)]
    layers: usize,
    /// SwiGLU width.
    #[arg(long, default_value_t = 256)]
    ffn: usize,
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

/// Genesis as chat exchanges: each verse asked, the next one answered.
fn chats() -> String {
    let verses: Vec<&str> = TEXT.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = String::new();
    for pair in verses.windows(2) {
        out += &format!(
            "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n{}<|im_end|>\n",
            pair[0].trim(),
            pair[1].trim()
        );
    }
    out
}

fn run(args: &Args) -> wgpu_tp::Result<bool> {
    let started = Instant::now();
    let text = chats();
    let tok = Tokenizer::train_byte_level_bpe(&[TEXT], args.vocab, &SPECIALS)?;
    let data = tok.encode(&text)?;
    let eos = tok.token_id("<|im_end|>").expect("a special token");
    println!(
        "tokenizer: byte-level BPE, {} tokens; {} chat exchanges = {} tokens",
        tok.vocab_size(),
        TEXT.lines().count().saturating_sub(1),
        data.len()
    );
    let mut cfg = LlamaConfig::new(
        tok.vocab_size(),
        args.hidden,
        args.ffn,
        args.layers,
        args.heads,
        args.kv_heads,
    );
    cfg.max_position_embeddings = 512;
    cfg.rope.max_position_embeddings = 512;
    let mesh: Mesh = MeshBuilder::new().ranks(args.ranks).build()?;
    println!("adapter {}; {} ranks", mesh.adapter_summary(), mesh.size());
    let mut model = CausalLm::new(&mesh, cfg, args.seed)?;
    model.generation_config_mut().eos_token_ids = vec![eos];
    let params: usize = model
        .named_parameters()
        .iter()
        .map(|(_, p)| p.shape().iter().product::<usize>())
        .sum();
    println!(
        "model: {} layers, hidden {}, {} query / {} key-value heads, SwiGLU {}: {params} parameters",
        args.layers, args.hidden, args.heads, args.kv_heads, args.ffn
    );
    let mut opt = AdamW::new(args.lr).with_weight_decay(0.01);
    let mut windows = common::Windows(args.seed);
    let losses = common::train_cosine(args.steps, args.lr, |lr| {
        opt.lr = lr;
        let (ids, targets) = windows.batch(&data, args.batch, args.seq);
        let loss = model.loss(&ids, &targets, args.seq)?;
        loss.backward()?;
        opt.step(&mut model)?;
        model.zero_grad();
        Ok(loss.to_host()?[0])
    })?;
    let fell = common::report_curve(&losses, tok.vocab_size());

    model.save_pretrained(&args.out)?;
    tok.save(args.out.join("tokenizer.json"))?;
    let tokenizer_config = serde_json::json!({
        "bos_token": null,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    });
    let text = serde_json::to_string_pretty(&tokenizer_config).unwrap_or_default() + "\n";
    std::fs::write(args.out.join("tokenizer_config.json"), text)?;
    println!("wrote {}", args.out.display());

    // Read back as `generate --chat` will, and answer one question greedily.
    let loaded = CausalLm::from_pretrained(&mesh, &args.out)?;
    let prompt = tok.encode(
        "<|im_start|>user\nAnd God said, Let there be light: and there was light.<|im_end|>\n<|im_start|>assistant\n",
    )?;
    let out = loaded.generate(&prompt, 48, Sampling::Greedy)?;
    println!("greedy answer: {}", tok.decode(&out)?);
    println!("done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(fell)
}

fn main() -> ExitCode {
    common::quiet_vulkan_loader();
    let args = Args::parse();
    if [
        args.ranks,
        args.layers,
        args.heads,
        args.kv_heads,
        args.steps,
        args.batch,
    ]
    .contains(&0)
        || args.hidden % args.heads.max(1) != 0
        || args.heads % args.kv_heads.max(1) != 0
        || args.seq > 512
    {
        eprintln!("need every count ≥ 1, hidden a multiple of heads, heads of kv_heads, seq ≤ 512");
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

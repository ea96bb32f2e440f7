//! Text in, text out: a Hugging Face GPT-2 directory on P simulated ranks.
//!
//! Loads `config.json` + `model.safetensors` with [`Gpt::from_pretrained`]
//! and the directory's tokenizer ([`Tokenizer::from_dir`]), continues the
//! prompt with the key/value cache, prints the text as each token is chosen,
//! then the prompt time, the time per generated token and what one token
//! communicates. The default model is the tiny GPT-2 shipped in
//! `examples/data/tiny-gpt2/` (trained on Genesis by
//! `examples/train_tiny.rs`), so it runs on a fresh clone with no download;
//! for OpenAI's GPT-2 (124M):
//! `huggingface-cli download openai-community/gpt2 config.json model.safetensors tokenizer.json --local-dir gpt2`
//! then `--model gpt2`.
//!
//! Run: `cargo run --release --example generate -- --prompt "And God said"`
//! (`-- --help` lists the flags). Greedy unless `--temperature` or
//! `--top-k` is given.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use wgpu_tp::nn::{Gpt, Sampling, Tokenizer};
use wgpu_tp::{CommStats, Mesh, MeshBuilder};

/// Generate text with a GPT-2 checkpoint on simulated ranks.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Hugging Face GPT-2 directory: config.json, model.safetensors (or a
    /// sharded index) and tokenizer.json (or vocab.json + merges.txt).
    #[arg(long, default_value_os_t = common::shipped_model_dir())]
    model: PathBuf,
    /// Text to continue.
    #[arg(long, default_value = "And God said")]
    prompt: String,
    /// Simulated ranks (the tensor-parallel world size P).
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Tokens to generate (fewer if the context is shorter).
    #[arg(long, default_value_t = 64)]
    max_new: usize,
    /// Sampling temperature (sampling instead of greedy; 1 if only --top-k;
    /// 0 or less alone means greedy).
    #[arg(long)]
    temperature: Option<f32>,
    /// Sample from the k most likely tokens (all if only --temperature).
    #[arg(long)]
    top_k: Option<usize>,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Put all ranks on one wgpu device (collectives become on-device copies).
    #[arg(long)]
    shared_device: bool,
}

/// Prints what `stats` moved, divided over `tokens` tokens (`per` names
/// the unit).
fn print_comm_per(stats: &CommStats, tokens: usize, per: &str) {
    if stats.is_empty() {
        println!("  none (one rank)");
    }
    let n = tokens.max(1) as f64;
    for (kind, c) in stats {
        println!(
            "  {:<14} {:>6.1} calls  {:>10} {per}",
            format!("{kind:?}"),
            c.calls as f64 / n,
            common::human_bytes((c.bytes as f64 / n).round() as u64)
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn run(args: &Args) -> wgpu_tp::Result<()> {
    let b = MeshBuilder::new().ranks(args.ranks);
    let mesh: Mesh = if args.shared_device {
        b.shared_device()
    } else {
        b
    }
    .build()?;
    let t_load = Instant::now();
    let tok = Tokenizer::from_dir(&args.model)?;
    let mut model = Gpt::from_pretrained(&mesh, &args.model)?;
    let cfg = *model.config();
    eprintln!(
        "{}: {} layers · hidden {} · {} heads · vocab {} · context {}; loaded in {:.0} ms",
        args.model.display(),
        cfg.layers,
        cfg.hidden,
        cfg.heads,
        cfg.vocab,
        cfg.n_ctx,
        ms(t_load.elapsed())
    );
    eprintln!(
        "{} ranks on {} ({:?} transport)",
        mesh.size(),
        mesh.adapter_summary(),
        mesh.transport()
    );
    if tok.vocab_size() > cfg.vocab {
        return Err(wgpu_tp::Error::InvalidArgument {
            op: "generate",
            message: format!(
                "the tokenizer has {} tokens but the model only {}: they do not belong together",
                tok.vocab_size(),
                cfg.vocab
            ),
        });
    }
    let prompt = tok.encode(&args.prompt)?;
    if prompt.is_empty() {
        return Err(wgpu_tp::Error::InvalidArgument {
            op: "generate",
            message: "the prompt encodes to no tokens: give some text with --prompt".into(),
        });
    }
    let max_new = args.max_new.min(cfg.n_ctx.saturating_sub(prompt.len()));
    if max_new < args.max_new {
        eprintln!(
            "(generating {max_new} tokens: the context holds {})",
            cfg.n_ctx
        );
    }
    let sampling = match (args.temperature, args.top_k) {
        (None, None) => Sampling::Greedy,
        (Some(t), None) if t <= 0.0 => Sampling::Greedy,
        (t, k) => Sampling::TopK {
            k: k.unwrap_or(cfg.vocab),
            temperature: t.unwrap_or(1.0),
            seed: args.seed,
        },
    };
    eprintln!("{sampling:?}\n");

    print!("{}", args.prompt);
    std::io::stdout().flush()?;
    let mut stream = tok.stream();
    let mut stamps = Vec::with_capacity(max_new);
    let mut prompt_comm = CommStats::new();
    mesh.reset_comm_stats();
    let t0 = Instant::now();
    model.generate_with(&prompt, max_new, sampling, |id| {
        stamps.push(t0.elapsed());
        if stamps.len() == 1 {
            // The first token's step ran the whole prompt: counted apart.
            prompt_comm = mesh.comm_stats();
            mesh.reset_comm_stats();
        }
        if let Some(text) = stream.push(id)? {
            print!("{text}");
            std::io::stdout().flush()?;
        }
        Ok(())
    })?;
    if let Some(rest) = stream.finish()? {
        print!("{rest}");
    }
    println!("\n");

    let decode_comm = mesh.comm_stats();
    let first = stamps.first().copied().unwrap_or_default();
    let rest = stamps.len().saturating_sub(1);
    println!(
        "prompt: {} tokens in {:.1} ms (to the first new token; includes compiling the kernels)",
        prompt.len(),
        ms(first)
    );
    if let Some(&last) = stamps.last().filter(|_| rest > 0) {
        let per = ms(last - first) / rest as f64;
        println!(
            "decode: {rest} more tokens, {per:.1} ms/token ({:.1} tokens/s), P = {}",
            1e3 / per,
            mesh.size()
        );
        println!("communication per generated token:");
        print_comm_per(&decode_comm, rest, "per token");
    }
    println!("communication of the prompt step:");
    print_comm_per(&prompt_comm, 1, "in all");
    Ok(())
}

fn main() -> ExitCode {
    common::quiet_vulkan_loader();
    let args = Args::parse();
    if args.ranks == 0 {
        eprintln!("--ranks must be at least 1");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nerror: {e}");
            ExitCode::FAILURE
        }
    }
}

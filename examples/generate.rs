//! Text in, text out: a Hugging Face directory of any supported family
//! (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma 2/3, Phi-3) or a llama.cpp
//! `.gguf` model file, on P simulated ranks.
//!
//! A directory loads `config.json` + `model.safetensors` with
//! [`CausalLm::from_pretrained_with`] (the family from `model_type`) and
//! the directory's tokenizer ([`Tokenizer::from_dir`]). A path ending in
//! `.gguf` loads with [`CausalLm::from_gguf_with`] (its quantized tensors
//! stay quantized on the device) and [`Tokenizer::from_gguf`]: the
//! tokenizer, the chat template and the end-of-text token all come from
//! the file. `--weights` keeps the weight matrices in `bf16` or `f16`, or
//! quantizes them as they load to any of llama.cpp's types (`q8_0`,
//! `q4_0`, `q4_k`, …; a GGUF file's quantized tensors keep their own
//! type). The example continues the prompt with the key/value cache,
//! prints the text as each token is chosen, then the prompt time, the
//! time per generated token and what one token communicates. With `--chat`
//! it reads lines from standard input and answers each through the
//! model's chat template (the directory's or the file's), streaming the
//! answer.
//!
//! The default model is the tiny GPT-2 shipped in `examples/data/tiny-gpt2/`
//! (`--chat` defaults to the tiny Llama in `examples/data/tiny-llama/`,
//! trained by `examples/train_tiny_llama.rs`), so both run on a fresh clone
//! with no download. For real models see the README (SmolLM2-135M-Instruct,
//! Qwen2.5-0.5B-Instruct, Llama-3.2-1B-Instruct, as directories or GGUF
//! files).
//!
//! Run: `cargo run --release --example generate -- --prompt "And God said"`,
//! `cargo run --release --example generate -- --chat`,
//! `cargo run --release --example generate -- --model SmolLM2-135M-Instruct-Q8_0.gguf --chat --ranks 2`
//! or `cargo run --release --example generate -- --model DIR --weights q4_k`
//! (`-- --help` lists the flags). Greedy unless `--temperature` or
//! `--top-k` is given.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use wgpu_tp::models::{CausalLm, LoadOptions};
use wgpu_tp::nn::{ChatMessage, Params, Sampling, Tokenizer};
use wgpu_tp::quant::QuantType;
use wgpu_tp::{CommStats, DType, Mesh};

/// Generate text with a Hugging Face checkpoint on simulated ranks.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Hugging Face directory (config.json, model.safetensors or a sharded
    /// index, and tokenizer.json or vocab.json + merges.txt), or a
    /// llama.cpp model file ending in .gguf (tokenizer and chat template
    /// from its metadata). Default: the shipped tiny GPT-2, or with --chat
    /// the shipped tiny Llama.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Chat: read lines from standard input, answer each through the
    /// model's chat template (the directory's or the GGUF file's).
    #[arg(long)]
    chat: bool,
    /// A system message for --chat.
    #[arg(long)]
    system: Option<String>,
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
    /// Put all ranks on one wgpu device (collectives become on-device
    /// copies; the default for several ranks).
    #[arg(long)]
    shared_device: bool,
    /// Give each rank its own wgpu device (collectives through the host, as
    /// between GPUs).
    #[arg(long, conflicts_with = "shared_device")]
    device_per_rank: bool,
    /// Keep the weight matrices in this dtype: f32, bf16 (half the memory
    /// and the bytes a token reads, any adapter), f16 (SHADER_F16), or
    /// quantize them as they load to one of llama.cpp's types: q8_0, q4_0,
    /// q4_1, q5_0, q5_1, q4_k, q5_k, q6_k (about 8.5 to 4.5 bits a weight;
    /// frozen). A GGUF file's quantized tensors keep their own type.
    #[arg(long, default_value = "f32", value_parser = parse_weights)]
    weights: DType,
}

/// `--weights`: a float dtype or a quantized type's name.
fn parse_weights(s: &str) -> Result<DType, String> {
    match s.to_ascii_lowercase().as_str() {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        "f16" => Ok(DType::F16),
        _ => s
            .parse::<QuantType>()
            .map(DType::Quant)
            .map_err(|e| format!("{e}, or f32, bf16, f16")),
    }
}

/// Whether `path` names a GGUF model file rather than a directory.
fn is_gguf(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// The weight matrices' dtypes and bytes (as one rank would hold the whole
/// model): `q8_0 × 30, f32 × 1 · 1.20 MiB`.
fn weights_summary(model: &CausalLm) -> String {
    let mut kinds: Vec<(String, usize)> = Vec::new();
    let mut bytes = 0u64;
    for (_, p) in model.named_parameters() {
        if p.shape().len() < 2 {
            continue;
        }
        let dtype = p.value.dtype();
        bytes += dtype.storage_bytes(p.shape()) as u64;
        match kinds.iter_mut().find(|(k, _)| *k == dtype.to_string()) {
            Some((_, n)) => *n += 1,
            None => kinds.push((dtype.to_string(), 1)),
        }
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} × {n}")).collect();
    format!("{} · {}", kinds.join(", "), common::human_bytes(bytes))
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

/// The sampling the flags ask for.
fn sampling(args: &Args, vocab: usize) -> Sampling {
    match (args.temperature, args.top_k) {
        (None, None) => Sampling::Greedy,
        (Some(t), None) if t <= 0.0 => Sampling::Greedy,
        (t, k) => Sampling::TopK {
            k: k.unwrap_or(vocab),
            temperature: t.unwrap_or(1.0),
            seed: args.seed,
        },
    }
}

/// Generate after `prompt`, streaming the text; returns the new ids.
fn stream_answer(
    model: &CausalLm,
    tok: &Tokenizer,
    prompt: &[i32],
    max_new: usize,
    sampling: Sampling,
    mut each: impl FnMut(),
) -> wgpu_tp::Result<Vec<i32>> {
    let mut stream = tok.stream();
    let eos = model.eos_token_ids().to_vec();
    let out = model.generate_with(prompt, max_new, sampling, |id| {
        each();
        if !eos.contains(&id)
            && let Some(text) = stream.push(id)?
        {
            print!("{text}");
            std::io::stdout().flush()?;
        }
        Ok(())
    })?;
    if let Some(rest) = stream.finish()? {
        print!("{rest}");
    }
    Ok(out)
}

/// `--chat`: each line of standard input is a user message; the answer is
/// streamed, and the conversation grows (oldest turns dropped when it no
/// longer fits the context).
fn chat(args: &Args, model: &CausalLm, tok: &Tokenizer) -> wgpu_tp::Result<()> {
    let sampling = sampling(args, model.vocab_size());
    let mut messages: Vec<ChatMessage> = args.system.iter().map(ChatMessage::system).collect();
    let pinned = messages.len();
    eprintln!("chat: type a message and press Enter (Ctrl-D ends)\n");
    for line in std::io::stdin().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        messages.push(ChatMessage::user(line.trim()));
        let prompt = loop {
            let text = tok.apply_chat_template(&messages, true)?;
            let ids = tok.encode(&text)?;
            if ids.len() + 8 <= model.context() || messages.len() <= pinned + 1 {
                break ids;
            }
            messages.remove(pinned);
        };
        let room = model.context().saturating_sub(prompt.len());
        print!("assistant: ");
        std::io::stdout().flush()?;
        let out = stream_answer(model, tok, &prompt, args.max_new.min(room), sampling, || {})?;
        println!();
        let text_ids: Vec<i32> = out
            .iter()
            .copied()
            .filter(|id| !model.eos_token_ids().contains(id))
            .collect();
        messages.push(ChatMessage::assistant(tok.decode(&text_ids)?));
    }
    Ok(())
}

fn run(args: &Args) -> wgpu_tp::Result<()> {
    let layout = common::layout(args.shared_device, args.device_per_rank);
    let mesh: Mesh = common::build_mesh(args.ranks, layout, false)?;
    let dir = args.model.clone().unwrap_or_else(|| {
        if args.chat {
            common::shipped_model_dir().with_file_name("tiny-llama")
        } else {
            common::shipped_model_dir()
        }
    });
    let t_load = Instant::now();
    let opts = LoadOptions::default().weights(args.weights);
    let (tok, model) = if is_gguf(&dir) {
        (
            Tokenizer::from_gguf(&dir)?,
            CausalLm::from_gguf_with(&mesh, &dir, opts)?,
        )
    } else {
        (
            Tokenizer::from_dir(&dir)?,
            CausalLm::from_pretrained_with(&mesh, &dir, opts)?,
        )
    };
    eprintln!(
        "{}: {}; loaded in {:.0} ms",
        dir.display(),
        model.describe(),
        ms(t_load.elapsed())
    );
    eprintln!("weight matrices: {}", weights_summary(&model));
    eprintln!(
        "{} ranks on {} ({:?} transport)",
        mesh.size(),
        mesh.adapter_summary(),
        mesh.transport()
    );
    let vocab = model.vocab_size();
    if tok.vocab_size() > vocab {
        return Err(wgpu_tp::Error::InvalidArgument {
            op: "generate",
            message: format!(
                "the tokenizer has {} tokens but the model only {vocab}: they do not belong together",
                tok.vocab_size(),
            ),
        });
    }
    if args.chat {
        if is_gguf(&dir) && tok.chat_template().is_none() {
            return Err(wgpu_tp::Error::InvalidArgument {
                op: "generate",
                message: format!(
                    "{} has no tokenizer.chat_template in its metadata: --chat needs an \
                     instruction-tuned model's file (or leave out --chat)",
                    dir.display()
                ),
            });
        }
        return chat(args, &model, &tok);
    }
    let prompt = tok.encode(&args.prompt)?;
    if prompt.is_empty() {
        return Err(wgpu_tp::Error::InvalidArgument {
            op: "generate",
            message: "the prompt encodes to no tokens: give some text with --prompt".into(),
        });
    }
    let n_ctx = model.context();
    let max_new = args.max_new.min(n_ctx.saturating_sub(prompt.len()));
    if max_new < args.max_new {
        eprintln!("(generating {max_new} tokens: the context holds {n_ctx})");
    }
    let sampling = sampling(args, vocab);
    eprintln!("{sampling:?}\n");

    print!("{}", args.prompt);
    std::io::stdout().flush()?;
    let mut stamps = Vec::with_capacity(max_new);
    let mut prompt_comm = CommStats::new();
    mesh.reset_comm_stats();
    let t0 = Instant::now();
    stream_answer(&model, &tok, &prompt, max_new, sampling, || {
        stamps.push(t0.elapsed());
        if stamps.len() == 1 {
            // The first token's step ran the whole prompt: counted apart.
            prompt_comm = mesh.comm_stats();
            mesh.reset_comm_stats();
        }
    })?;
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

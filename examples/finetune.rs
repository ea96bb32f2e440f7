//! Fine-tune a model on your own data: LoRA adapters (or every weight)
//! trained on JSONL records, on any tensor- and data-parallel mesh, and
//! saved as PEFT adapter directories that `peft` loads.
//!
//! Data: one record per line, `{"messages": [{"role": "user", "content":
//! ...}, {"role": "assistant", "content": ...}]}` (rendered with the
//! model's chat template, the loss on the assistant's tokens only) or
//! `{"text": ...}`. Records are shuffled (seeded), a held-out share is set
//! aside, and the rest packed into sequences of `--seq` tokens.
//!
//! Run on the shipped tiny Llama and questions about Genesis (under a
//! minute on two CPU cores): `cargo run --release --example finetune`.
//! On SmolLM2-135M-Instruct: `cargo run --release --example finetune --
//! --model path/to/SmolLM2-135M-Instruct --data my.jsonl --seq 512`.
//! `--axes dp=2,tp=2` trains two data-parallel replicas of two
//! tensor-parallel ranks; with `--features mpi`, `mpirun -np 4
//! target/release/examples/finetune --mpi --axes dp=2,tp=2`.
//! `-- --help` lists every flag.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use wgpu_tp::models::CausalLm;
use wgpu_tp::nn::sft::{self, SftExample, Tokenized};
use wgpu_tp::nn::{
    AdamW, ChatMessage, DataParallel, LoraConfig, Params, PipelineStage, Sampling, Tokenizer,
};
use wgpu_tp::{DTensor, Mesh, Placement};

/// Fine-tune a model with LoRA (or fully) on JSONL chat or text records.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// A Hugging Face model directory.
    #[arg(long, default_value_os_t = data_dir().join("tiny-llama"))]
    model: PathBuf,
    /// JSONL records: {"messages": [...]} or {"text": ...} per line.
    #[arg(long, default_value_os_t = data_dir().join("genesis_chat.jsonl"))]
    data: PathBuf,
    /// Where adapters (or the whole model, with --full) are saved.
    #[arg(long, default_value = "finetune-out")]
    out: PathBuf,
    /// Train every weight instead of LoRA adapters.
    #[arg(long)]
    full: bool,
    /// LoRA rank.
    #[arg(long, default_value_t = 16)]
    r: usize,
    /// LoRA alpha (the adapters' scale is alpha / r).
    #[arg(long, default_value_t = 32.0)]
    alpha: f32,
    /// Dropout on the adapters' input.
    #[arg(long, default_value_t = 0.0)]
    lora_dropout: f32,
    /// Layers to adapt (comma-separated; default: every linear layer but the head).
    #[arg(long, value_delimiter = ',')]
    targets: Vec<String>,
    /// Train on every token of chat records, not the assistant's only.
    #[arg(long)]
    all_tokens: bool,
    /// Tokens per packed sequence.
    #[arg(long, default_value_t = 64)]
    seq: usize,
    /// Sequences per step (over all data-parallel replicas).
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Optimiser steps.
    #[arg(long, default_value_t = 300)]
    steps: usize,
    /// Peak AdamW learning rate (cosine decay to a tenth).
    #[arg(long, default_value_t = 1e-2)]
    lr: f32,
    /// Share of the records held out to measure the loss on.
    #[arg(long, default_value_t = 0.1)]
    holdout: f64,
    /// Seed of the shuffle and the adapters.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Save a checkpoint (adapters, optimiser state) every N steps (0: at the end only).
    #[arg(long, default_value_t = 0)]
    save_every: usize,
    /// Resume from a checkpoint directory this command saved.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Tensor-parallel ranks (without --axes).
    #[arg(long, default_value_t = 1)]
    ranks: usize,
    /// Named axes dp=D,tp=T.
    #[arg(long, value_parser = parse_axes)]
    axes: Option<(usize, usize)>,
    /// Recompute each block's activations in backward (less memory).
    #[arg(long)]
    recompute: bool,
    /// Trained questions to ask at the end (greedy answers printed).
    #[arg(long, default_value_t = 3)]
    ask: usize,
    /// One rank per MPI process (needs `--features mpi`).
    #[arg(long)]
    mpi: bool,
}

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data")
}

/// `dp=D,tp=T` (either may be left out).
fn parse_axes(s: &str) -> Result<(usize, usize), String> {
    let (mut dp, mut tp) = (1, 1);
    for part in s.split(',') {
        let (name, n) = part
            .split_once('=')
            .ok_or(format!("{part:?}: give dp=D,tp=T"))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("{part:?}: not a count"))?;
        match (name.trim(), n) {
            (_, 0) => return Err(format!("{part:?}: an axis needs a rank")),
            ("dp", n) => dp = n,
            ("tp", n) => tp = n,
            ("pp", 1) => {}
            ("pp", _) => {
                return Err(
                    "pipeline stages do not load a model directory yet: use dp and tp".into(),
                );
            }
            (other, _) => return Err(format!("unknown axis {other:?}: use dp and tp")),
        }
    }
    Ok((dp, tp))
}

/// Records tokenized, shuffled, split and packed: (train, held-out) sequences.
type Windows = Vec<(Vec<i32>, Vec<i32>)>;

fn prepare(
    args: &Args,
    tok: &Tokenizer,
    eos: Option<i32>,
) -> wgpu_tp::Result<(Windows, Windows, Vec<SftExample>, usize)> {
    let mut records = sft::read_jsonl(&args.data)?;
    let n = records.len();
    sft::shuffle(&mut records, args.seed);
    let held = ((n as f64 * args.holdout).round() as usize).min(n.saturating_sub(1));
    let (eval, train) = records.split_at(held);
    let tokens = |set: &[SftExample]| -> wgpu_tp::Result<Vec<Tokenized>> {
        set.iter()
            .map(|r| sft::tokenize(tok, r, !args.all_tokens, eos))
            .collect()
    };
    let windows = sft::pack(&tokens(train)?, args.seq)?;
    let eval = if held > 0 {
        sft::pack(&tokens(eval)?, args.seq)?
    } else {
        Vec::new()
    };
    Ok((windows, eval, train.to_vec(), held))
}

/// The mean loss over `windows` (no gradients), averaged on the first replica.
fn eval_loss(model: &CausalLm, windows: &Windows, seq: usize) -> wgpu_tp::Result<f32> {
    if windows.is_empty() {
        return Ok(f32::NAN);
    }
    let ids: Vec<i32> = windows.iter().flat_map(|w| w.0.iter().copied()).collect();
    let targets: Vec<i32> = windows.iter().flat_map(|w| w.1.iter().copied()).collect();
    Ok(wgpu_tp::no_grad(|| model.loss(&ids, &targets, seq))?.to_host()?[0])
}

/// Write a checkpoint: adapters (or the model), optimiser state, the step.
fn save(dir: &Path, model: &CausalLm, opt: &AdamW, step: usize, full: bool) -> wgpu_tp::Result<()> {
    match full {
        true => model.save_pretrained(dir)?,
        false => model.save_adapter(dir)?,
    }
    opt.save_state(model, dir.join("optimizer.safetensors"))?;
    if !common::quiet() {
        std::fs::write(
            dir.join("trainer_state.json"),
            format!("{{\"global_step\": {step}}}\n"),
        )?;
    }
    Ok(())
}

fn run(args: &Args) -> wgpu_tp::Result<bool> {
    let started = Instant::now();
    let (dp, tp) = args.axes.unwrap_or((1, args.ranks));
    let mesh: Mesh =
        common::build_mesh(dp * tp, None, args.mpi)?.with_axes(&[("dp", dp), ("tp", tp)])?;
    common::set_quiet(
        mesh.is_multi_process() && mesh.ranks().first().map(|r| r.index()) != Some(0),
    );
    let tok = Tokenizer::from_dir(&args.model)?;
    let mut replicas: Vec<CausalLm> = mesh
        .axis_groups("tp")?
        .iter()
        .map(|g| CausalLm::from_pretrained(g, &args.model))
        .collect::<wgpu_tp::Result<_>>()?;
    let eos = replicas[0]
        .generation_config()
        .eos_token_ids
        .first()
        .copied();
    let (train, eval, trained, held) = prepare(args, &tok, eos)?;
    say!(
        "model {}: {}",
        args.model.display(),
        replicas[0].decoder_config().describe()
    );
    say!(
        "data {}: {} training sequences of {} tokens, {held} records held out ({} sequences)",
        args.data.display(),
        train.len(),
        args.seq,
        eval.len()
    );
    say!("mesh: dp = {dp} x tp = {tp} on {}", mesh.adapter_summary());
    let mut first_step = 0;
    for model in &mut replicas {
        if args.full {
            // Every weight trains.
        } else if let Some(dir) = &args.resume {
            model.load_adapter(dir)?;
        } else {
            let mut targets = args.targets.clone();
            if targets.is_empty() {
                model.visit_adaptable_mut("", &mut |name, _| {
                    let last = name.rsplit('.').next().unwrap_or(&name).to_string();
                    if last != "lm_head" && !targets.contains(&last) {
                        targets.push(last);
                    }
                });
            }
            let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
            let mut config = LoraConfig::new(args.r, args.alpha, &refs);
            (config.dropout, config.seed) = (args.lora_dropout, args.seed);
            model.add_lora(&config)?;
        }
        model.set_recompute(args.recompute);
        model.set_mode(true, 0);
    }
    let mut opts: Vec<AdamW> = replicas
        .iter()
        .map(|_| AdamW::new(args.lr).with_weight_decay(0.0))
        .collect();
    if let Some(dir) = &args.resume {
        if args.full {
            for m in &mut replicas {
                m.load_pretrained(dir)?;
            }
        }
        for (m, o) in replicas.iter().zip(&mut opts) {
            o.load_state(m, dir.join("optimizer.safetensors"))?;
        }
        let state = std::fs::read_to_string(dir.join("trainer_state.json")).unwrap_or_default();
        first_step = state
            .split(':')
            .nth(1)
            .and_then(|s| s.trim().trim_end_matches('}').trim().parse().ok())
            .unwrap_or(0);
        say!("resumed from {} at step {first_step}", dir.display());
    }
    let trainable: usize = replicas[0]
        .named_parameters()
        .iter()
        .filter(|(_, p)| !p.is_frozen())
        .map(|(_, p)| p.shape().iter().product::<usize>())
        .sum();
    say!(
        "training {trainable} parameters ({})",
        if args.full { "full" } else { "LoRA" }
    );
    let before = eval_loss(&replicas[0], &eval, args.seq)?;
    let ddp = DataParallel::new(&mesh, "dp")?;
    let bar = common::progress(args.steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "  {bar:30} {pos:>4}/{len} steps  {msg}  [{elapsed} < {eta}]",
        )
        .expect("a valid template"),
    );
    bar.set_position(first_step as u64);
    let mut order: Vec<usize> = Vec::new();
    let mut order_epoch = u64::MAX;
    let mut losses = Vec::new();
    let clock = Instant::now();
    let mut tokens = 0usize;
    for step in first_step..args.steps {
        let per = args.batch.div_ceil(dp).max(1);
        // Each pass over the data in its own seeded order, so a resumed
        // run sees what an uninterrupted one would.
        let mut rows: Vec<Vec<&(Vec<i32>, Vec<i32>)>> = Vec::new();
        for r in 0..dp {
            let picks = (0..per).map(|k| {
                let at = step * dp * per + r * per + k;
                let epoch = (at / train.len()) as u64;
                if epoch != order_epoch {
                    order = (0..train.len()).collect();
                    sft::shuffle(&mut order, args.seed ^ (epoch + 1));
                    order_epoch = epoch;
                }
                &train[order[at % train.len()]]
            });
            rows.push(picks.collect::<Vec<_>>());
        }
        let mut step_losses = Vec::new();
        for model in &replicas {
            let d = if dp > 1 { replica_index(model)? } else { 0 };
            let ids: Vec<i32> = rows[d].iter().flat_map(|w| w.0.iter().copied()).collect();
            let targets: Vec<i32> = rows[d].iter().flat_map(|w| w.1.iter().copied()).collect();
            let loss = model.loss(&ids, &targets, args.seq)?;
            step_losses.push(DTensor::from_host(
                model.stage_mesh(),
                &[1],
                &[loss.to_host()?[0]],
                Placement::Replicate,
            )?);
            loss.backward()?;
            tokens += ids.len();
        }
        let loss = ddp.mean(&step_losses)?;
        let mut refs: Vec<&mut dyn Params> =
            replicas.iter_mut().map(|r| r as &mut dyn Params).collect();
        ddp.average_gradients(&mut refs)?;
        // Cosine decay to a tenth of --lr.
        let t = step as f32 / args.steps as f32;
        let lr = args.lr * (0.1 + 0.45 * (1.0 + (std::f32::consts::PI * t).cos()));
        for (m, o) in replicas.iter_mut().zip(&mut opts) {
            o.lr = lr;
            o.step(m)?;
            m.zero_grad();
            m.set_mode(true, step as u64 + 1);
        }
        losses.push(loss);
        let rate = tokens as f64 * dp as f64 / clock.elapsed().as_secs_f64();
        bar.set_message(format!("loss {loss:.3}  {rate:.0} tok/s"));
        bar.inc(1);
        if args.save_every > 0 && (step + 1) % args.save_every == 0 {
            let dir = args.out.join(format!("checkpoint-{}", step + 1));
            save(&dir, &replicas[0], &opts[0], step + 1, args.full)?;
        }
    }
    bar.finish();
    save(&args.out, &replicas[0], &opts[0], args.steps, args.full)?;
    let model = &mut replicas[0];
    model.set_mode(false, 0);
    let after = eval_loss(model, &eval, args.seq)?;
    say!("held-out loss {before:.3} -> {after:.3}");
    if let Some((first, last)) = losses.first().zip(losses.last()) {
        say!(
            "training loss {first:.3} -> {last:.3}: {}",
            common::sparkline(&losses)
        );
    }
    let answered = ask(model, &tok, &trained, args.ask)?;
    say!(
        "saved to {} in {:.0} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok((eval.is_empty() || after < before) && answered)
}

/// This replica's index along `dp`.
fn replica_index(model: &CausalLm) -> wgpu_tp::Result<usize> {
    let g = model.stage_mesh();
    let root = g.root();
    let at = root.axes().iter().position(|a| a.0 == "dp").unwrap_or(0);
    Ok(root.coords_of(g.root_rank(0)?)?[at])
}

/// Ask `n` trained chat questions greedily and print the answers; whether
/// at least one is the trained answer.
fn ask(
    model: &CausalLm,
    tok: &Tokenizer,
    trained: &[SftExample],
    n: usize,
) -> wgpu_tp::Result<bool> {
    let mut right = 0;
    let mut asked = 0;
    for record in trained.iter().take(n) {
        let SftExample::Chat(messages) = record else {
            continue;
        };
        let Some(answer) = messages.iter().position(|m| m.role == "assistant") else {
            continue;
        };
        let prompt: Vec<ChatMessage> = messages[..answer].to_vec();
        let ids = tok.encode(&tok.apply_chat_template(&prompt, true)?)?;
        let out = model.generate(&ids, 48, Sampling::Greedy)?;
        let text = tok.decode(&out)?;
        let text = text
            .split("<|im_end|>")
            .next()
            .unwrap_or(&text)
            .trim()
            .to_string();
        asked += 1;
        let want = messages[answer].text().unwrap_or("").trim();
        right += usize::from(text == want);
        say!(
            "  Q: {}\n  A: {text}",
            prompt.last().and_then(|m| m.text()).unwrap_or("")
        );
    }
    say!("{right} of {asked} answers as trained");
    Ok(asked == 0 || right > 0)
}

fn main() -> ExitCode {
    common::quiet_vulkan_loader();
    let args = Args::parse();
    if args.steps == 0 || args.batch == 0 || args.seq == 0 || !(0.0..1.0).contains(&args.holdout) {
        eprintln!("need --steps, --batch and --seq of at least 1 and --holdout in [0, 1)");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("the held-out loss did not fall, or no answer came out as trained");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

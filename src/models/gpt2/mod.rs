//! [`Gpt`]: GPT-2's structure and naming on P ranks.
//!
//! `wte` (vocab-parallel) + `wpe` (replicated) → `h.{i}` ([`TransformerBlock`])
//! → `ln_f` → an output head **tied** to `wte` (each rank multiplies by its
//! own vocab rows, giving vocab-sharded logits; the head's and the
//! embedding's gradients accumulate into the one `wte.weight` gradient) →
//! [`VocabParallelCrossEntropy`]. Weights are `[out, in]` (PyTorch
//! `nn.Linear`), `c_attn` rows `[q; k; v]` with heads contiguous inside, so a
//! serial safetensors checkpoint in this naming loads at any P.
//!
//! Tokens are batch-major, `[batch·seq]`, positions `0..seq` per sequence.
//! Per step: forward `2·layers + 4` all-reduces (embedding, two per block,
//! three in the loss), backward `2·layers + 1` (two per block, the head).
//! With sequence parallelism the embedding output is split along tokens
//! (no communication; its backward all-gathers), each block's all-reduces
//! become all-gather / reduce-scatter pairs, and the head gathers the tokens
//! (its backward reduce-scatters).
//!
//! Files: `config.rs` ([`GptConfig`]), `block.rs` ([`TransformerBlock`]),
//! `attention.rs` ([`ParallelSelfAttention`], the fused `c_attn`),
//! `generate.rs` (decoding), and for Hugging Face directories
//! `hf_config.rs` (`config.json`), `sanitize.rs` (GPT-2's names and
//! `Conv1D` layout), `load.rs` (checking and loading the files) and
//! `pretrained.rs` (`Gpt::from_pretrained`, `Gpt::save_pretrained`);
//! `stage.rs` ([`GptStage`], one pipeline stage's part of the model).

mod attention;
mod block;
mod config;
mod generate;
#[cfg(not(target_arch = "wasm32"))]
mod hf_config;
#[cfg(not(target_arch = "wasm32"))]
mod load;
#[cfg(not(target_arch = "wasm32"))]
mod pretrained;
#[cfg(not(target_arch = "wasm32"))]
mod sanitize;
mod stage;

pub use attention::{AttentionConfig, ParallelSelfAttention};
pub use block::{BlockConfig, TransformerBlock};
pub use config::GptConfig;
#[cfg(not(target_arch = "wasm32"))]
pub use hf_config::HfGpt2Config;
#[cfg(not(target_arch = "wasm32"))]
pub use pretrained::pretrained_config;
pub use stage::GptStage;
pub(crate) use stage::check_decode;

use crate::device::Mesh;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::{
    CrossEntropyConfig, Dropout, DropoutConfig, Embedding, EmbeddingConfig, Init, InitRng,
    LayerNorm, NormConfig, Params, Reduction, VocabParallelCrossEntropy, VocabParallelEmbedding,
};
use crate::tensor::{DTensor, Mapping};

/// A GPT-2-style language model with tensor-parallel blocks.
#[derive(Debug, Params)]
pub struct Gpt {
    /// Token embedding, vocab-parallel; also the output head.
    pub wte: VocabParallelEmbedding,
    /// Position embedding, replicated.
    pub wpe: Embedding,
    /// The blocks.
    pub h: Vec<TransformerBlock>,
    /// Final norm.
    pub ln_f: LayerNorm,
    /// Dropout of the summed embeddings.
    pub drop: Dropout,
    #[params(skip)]
    loss: VocabParallelCrossEntropy,
    #[params(skip)]
    config: GptConfig,
}

impl Gpt {
    /// A model whose master weights are drawn from `seed` (the same for every
    /// world size): N(0, 0.02²) everywhere, the residual projections
    /// N(0, (0.02/√(2·layers))²), as GPT-2.
    pub fn new(mesh: &Mesh, config: GptConfig, seed: u64) -> Result<Self> {
        Self::build(mesh, config, seed, true)
    }

    /// A model whose weights are all zeros (layer norms ones), for loading
    /// a checkpoint over: no random draws, which take seconds at GPT-2 size.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) fn zeroed(mesh: &Mesh, config: GptConfig) -> Result<Self> {
        Self::build(mesh, config, 0, false)
    }

    /// [`Gpt::new`] (`random`) or [`Gpt::zeroed`].
    fn build(mesh: &Mesh, config: GptConfig, seed: u64, random: bool) -> Result<Self> {
        const OP: &str = "Gpt::new";
        check_config(OP, mesh, &config)?;
        // Every parameter is an f32 master; check before allocating any.
        let (split, whole) = config.parameter_split();
        let bytes = mesh.held_bytes(split, whole, 4);
        let what = format!("{} parameters", config.num_parameters());
        mesh.check_memory(OP, &what, bytes)?;
        let mut rng = InitRng::new(seed);
        let wte =
            VocabParallelEmbedding::new(mesh, table(&config, config.vocab, random), &mut rng)?;
        let wpe = Embedding::new(mesh, table(&config, config.n_ctx, random), &mut rng)?;
        let block = block_template(&config, seed, random);
        let h = (0..config.layers)
            .map(|i| build_block(mesh, block, i, &mut rng))
            .collect::<Result<Vec<_>>>()?;
        Ok(Gpt {
            wte,
            wpe,
            h,
            ln_f: final_norm(mesh, &config)?,
            drop: embedding_dropout(&config, seed)?,
            loss: mean_loss()?,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// Training mode (dropout on, at `step`: masks differ between steps and
    /// repeat for the same step) or evaluation mode (dropout off).
    pub fn set_mode(&mut self, training: bool, step: u64) {
        set_mode(&mut self.drop, &mut self.h, training, step);
    }

    /// Token ids `[batch·seq]` → logits `[batch·seq, vocab]`, `Shard(1)`
    /// (each rank its vocab rows), recorded on the tape unless inside
    /// [`no_grad`](crate::no_grad).
    pub fn logits(&self, ids: &[i32], seq: usize) -> Result<DTensor> {
        let mut x = embed(&self.wte, &self.wpe, &self.drop, &self.config, ids, seq)?;
        for block in &self.h {
            x = block.forward(&x, seq)?;
        }
        let x = self.ln_f.forward(&x)?;
        self.head(&x)
    }

    /// The tied output head ([`tied_head`]).
    fn head(&self, x: &DTensor) -> Result<DTensor> {
        tied_head(&self.wte, &self.config, x)
    }

    /// The mean next-token loss (`[1]`, replicated) of `ids` against
    /// `targets` (both `[batch·seq]`); `loss.backward()` fills every
    /// parameter's gradient.
    pub fn loss(&self, ids: &[i32], targets: &[i32], seq: usize) -> Result<DTensor> {
        if ids.len() != targets.len() {
            return Err(Error::shape("Gpt::loss", [ids.len()], [targets.len()]));
        }
        let logits = self.logits(ids, seq)?;
        self.loss.forward(&logits, targets)
    }
}

/// The tied output head: `x` `[tokens, hidden]` (`Replicate`, or `Shard(0)`
/// with sequence parallelism, then gathered along tokens; backward:
/// reduce-scatter) times each rank's `wte` rows → logits `Shard(1)`; the
/// head's gradient joins the embedding's in `wte.weight`.
fn tied_head(wte: &VocabParallelEmbedding, config: &GptConfig, x: &DTensor) -> Result<DTensor> {
    let input = match config.sequence_parallel {
        true => Mapping::AllGatherToParallel(0),
        false => Mapping::CopyToParallel,
    };
    let h = input.forward(x)?;
    let table = wte.weight().operand_for(h.dtype())?;
    // Per block past one binding, inside DTensor::matmul.
    h.matmul(&table, true)
}

/// What a whole model and a stage ([`GptStage`]) both check first.
fn check_config(op: &'static str, mesh: &Mesh, config: &GptConfig) -> Result<()> {
    if config.layers == 0 || config.n_ctx == 0 || config.vocab == 0 {
        return Err(Error::invalid(
            op,
            "vocab, n_ctx and layers must be at least 1",
        ));
    }
    match config.dtype {
        DType::F32 => Ok(()),
        DType::F16 => {
            // Fails here, naming the feature, rather than at the first step.
            for r in mesh.ranks() {
                r.device().check_dtype(op, DType::F16)?;
            }
            Ok(())
        }
        DType::I32 | DType::BF16 => Err(Error::invalid(
            op,
            "the activation dtype must be F32 or F16 (bf16 is for weights: LoadOptions::weights, Params::store_weights_as)",
        )),
    }
}

/// An embedding table of `rows` rows (zeros unless `random`).
fn table(config: &GptConfig, rows: usize, random: bool) -> EmbeddingConfig {
    let mut c = EmbeddingConfig::new(rows, config.hidden);
    if !random {
        c.init = Init::Zeros;
    }
    c
}

/// The settings every block shares (block `i` sets its dropout layers).
fn block_template(config: &GptConfig, seed: u64, random: bool) -> BlockConfig {
    let pick = |init: Init| if random { init } else { Init::Zeros };
    let mut block = BlockConfig::new(config.hidden, config.heads);
    (block.ffn, block.activation, block.eps) = (config.ffn, config.activation, config.eps);
    (block.sequence_parallel, block.dropout) = (config.sequence_parallel, config.dropout);
    (block.dropout_seed, block.attn_dropout) = (seed, config.attn_dropout);
    let std = 0.02 / (2.0 * config.layers as f32).sqrt();
    block.proj_init = pick(Init::Normal { mean: 0.0, std });
    block.init = pick(block.init);
    block
}

/// Block `i`, drawn from `rng`.
fn build_block(
    mesh: &Mesh,
    template: BlockConfig,
    i: usize,
    rng: &mut InitRng,
) -> Result<TransformerBlock> {
    // Layer 0 is the embeddings' dropout; block i uses 3i + 1 (attention
    // branch), 3i + 2 (MLP branch), 3i + 3 (probabilities).
    let block = BlockConfig {
        dropout_layer: 3 * i as u32 + 1,
        ..template
    };
    TransformerBlock::new(mesh, block, rng)
}

fn final_norm(mesh: &Mesh, config: &GptConfig) -> Result<LayerNorm> {
    let mut norm = NormConfig::new(config.hidden);
    norm.eps = config.eps;
    LayerNorm::new(mesh, norm)
}

fn embedding_dropout(config: &GptConfig, seed: u64) -> Result<Dropout> {
    Dropout::new(DropoutConfig {
        p: config.dropout,
        seed,
        layer: 0,
    })
}

fn mean_loss() -> Result<VocabParallelCrossEntropy> {
    VocabParallelCrossEntropy::new(CrossEntropyConfig {
        reduction: Reduction::Mean,
        ..Default::default()
    })
}

/// Token ids `[batch·seq]` → the blocks' input: token plus position
/// embeddings, dropout, split along tokens with sequence parallelism.
fn embed(
    wte: &VocabParallelEmbedding,
    wpe: &Embedding,
    drop: &Dropout,
    config: &GptConfig,
    ids: &[i32],
    seq: usize,
) -> Result<DTensor> {
    if seq == 0 || seq > config.n_ctx || !ids.len().is_multiple_of(seq) {
        return Err(Error::invalid(
            "Gpt::logits",
            format!(
                "{} ids are not whole sequences of {seq} (1 ≤ seq ≤ n_ctx = {})",
                ids.len(),
                config.n_ctx
            ),
        ));
    }
    let positions: Vec<i32> = (0..ids.len()).map(|i| (i % seq) as i32).collect();
    let x = wte.forward(ids)?.add(&wpe.forward(&positions)?)?;
    let x = drop.forward(&x.cast(config.dtype)?)?;
    match config.sequence_parallel {
        true => Mapping::ScatterToParallel(0).forward(&x),
        false => Ok(x),
    }
}

/// Dropout on (at `step`) or off for the embeddings' dropout and `blocks`.
fn set_mode(drop: &mut Dropout, blocks: &mut [TransformerBlock], training: bool, step: u64) {
    if training {
        drop.train()
    } else {
        drop.eval()
    }
    drop.set_step(step);
    for b in blocks {
        b.set_mode(training, step);
    }
}

//! [`CausalLm::save_gguf`]: any model the crate runs written as a GGUF
//! file llama.cpp loads — the inverse of
//! [`CausalLm::from_gguf`](super::CausalLm::from_gguf). The family's
//! `config.json` becomes the architecture's metadata (the keys
//! `convert_hf_to_gguf.py` writes and llama.cpp reads), each parameter
//! the tensor [`gguf_name`] maps to it, with what the converter does
//! redone: Llama's q/k rows interleaved per head, Gemma's norms stored
//! `1 + w`, GPT-2's weights kept as `nn.Linear` lays them out, Phi-3's
//! projections fused again. Weight matrices are written in the asked
//! type; a quantized parameter of that type keeps its blocks byte for
//! byte. The tokenizer and chat template become the `tokenizer.*` keys.
//! One tensor at a time is gathered to the host, when the file is written.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::rc::Rc;

use serde_json::{Map, Value as Json};

use super::CausalLm;
use super::gguf::{GGUF_ARCHITECTURES, gguf_name};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::nn::checkpoint::writes_files;
use crate::nn::gguf::{Array, GgufWriter, Value};
use crate::nn::{DecoderConfig, GgufName, GgufVocab, Parameter, Params, Tokenizer};
use crate::quant::{QuantType, quantize_rows};

/// The operation errors name.
const OP: &str = "CausalLm::save_gguf";

/// How [`CausalLm::save_gguf_with`] writes a model: the type of its weight
/// matrices, the tokenizer, whether quantized weights keep their own
/// types, the model's name.
///
/// ```
/// use wgpu_tp::DType;
/// use wgpu_tp::models::GgufSaveOptions;
/// use wgpu_tp::quant::QuantType;
/// let opts = GgufSaveOptions::new(DType::Quant(QuantType::Q4K))
///     .keep_quantized(true)
///     .name("my-model");
/// assert_eq!(opts.dtype, DType::Quant(QuantType::Q4K));
/// ```
#[derive(Clone, Copy)]
pub struct GgufSaveOptions<'a> {
    /// The type of the 2-D weight matrices (embedding and head included):
    /// `F32`, `F16`, `BF16` or a [`DType::Quant`]. A matrix whose rows are
    /// not whole blocks of the quantized type takes llama.cpp's fallback
    /// ([`QuantType::for_row`]), else F16. Norms, biases, GPT-2's
    /// position table and other 1-D tensors are F32, as llama.cpp's
    /// converter writes them.
    pub dtype: DType,
    /// Written as the `tokenizer.ggml.*` keys and `tokenizer.chat_template`
    /// ([`Tokenizer::to_gguf_vocab`]), padded with `[PAD{id}]` tokens to
    /// the embedding's rows. llama.cpp loads no file without one; without
    /// it only the model's special ids are written (the crate's reader
    /// needs no tokenizer).
    pub tokenizer: Option<&'a Tokenizer>,
    /// Quantized parameters keep their blocks whatever `dtype` is (a Q4_K_M
    /// file's Q6_K tensors stay Q6_K); `dtype` then applies to the other
    /// weight matrices. Default `false`: every matrix is `dtype`, requantized
    /// from the dequantized value where its type differs.
    pub keep_quantized: bool,
    /// `general.name`; none by default.
    pub name: Option<&'a str>,
    /// Write a model with a sliding window shorter than its context where
    /// llama.cpp's architecture has none (Mistral v0.1's `llama`, Phi-3
    /// mini 4k's `phi3`): llama.cpp then attends to the whole context, the
    /// same model up to the window's length only. A `llama`-family file
    /// holds no window (the crate's reader neither); a `phi3` one holds it
    /// as llama.cpp's converter writes it (the crate's reader keeps it).
    /// Default `false`: such a model is an error.
    pub allow_unsupported_window: bool,
}

impl std::fmt::Debug for GgufSaveOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufSaveOptions")
            .field("dtype", &self.dtype)
            .field("tokenizer", &self.tokenizer.is_some())
            .field("keep_quantized", &self.keep_quantized)
            .field("name", &self.name)
            .field("allow_unsupported_window", &self.allow_unsupported_window)
            .finish()
    }
}

impl<'a> GgufSaveOptions<'a> {
    /// Weight matrices in `dtype`, no tokenizer, quantized parameters of
    /// another type requantized, no name.
    pub fn new(dtype: DType) -> Self {
        GgufSaveOptions {
            dtype,
            tokenizer: None,
            keep_quantized: false,
            name: None,
            allow_unsupported_window: false,
        }
    }

    /// Write `tokenizer` (and its chat template) into the metadata.
    pub fn tokenizer(mut self, tokenizer: &'a Tokenizer) -> Self {
        self.tokenizer = Some(tokenizer);
        self
    }

    /// Keep (`true`) every quantized parameter's own blocks and type.
    pub fn keep_quantized(mut self, keep: bool) -> Self {
        self.keep_quantized = keep;
        self
    }

    /// `general.name`.
    pub fn name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }

    /// Write (`true`) a sliding window llama.cpp's architecture has not
    /// (see [`GgufSaveOptions::allow_unsupported_window`]).
    pub fn allow_unsupported_window(mut self, allow: bool) -> Self {
        self.allow_unsupported_window = allow;
        self
    }
}

impl CausalLm {
    /// Write this model to `path` as a GGUF file (llama.cpp's format,
    /// version 3) that llama.cpp and [`CausalLm::from_gguf`] load, of the
    /// `general.architecture` its family is in GGUF: `llama` (Llama,
    /// SmolLM2, Mistral without a window), `qwen2`, `qwen3`, `gpt2`,
    /// `gemma2`, `gemma3`, `phi3`. Weight matrices are `dtype` (`F32`,
    /// `F16`, `BF16`, or a quantized type: llama.cpp's reference
    /// quantizer, bit for bit); quantized parameters already of that type
    /// are written as their blocks, unchanged. `tokenizer` (the model does
    /// not own one) goes into the metadata with its chat template; llama.cpp
    /// needs it. Shorthand for [`CausalLm::save_gguf_with`].
    ///
    /// ```no_run
    /// # fn main() -> wgpu_tp::Result<()> {
    /// use wgpu_tp::{DType, Mesh};
    /// use wgpu_tp::models::CausalLm;
    /// use wgpu_tp::nn::Tokenizer;
    /// use wgpu_tp::quant::QuantType;
    /// let mesh = Mesh::simulated(2)?;
    /// let model = CausalLm::from_pretrained(&mesh, "SmolLM2-135M-Instruct")?;
    /// let tokenizer = Tokenizer::from_dir("SmolLM2-135M-Instruct")?;
    /// model.save_gguf("smollm2-q8_0.gguf", DType::Quant(QuantType::Q8_0), Some(&tokenizer))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn save_gguf(
        &self,
        path: impl AsRef<Path>,
        dtype: DType,
        tokenizer: Option<&Tokenizer>,
    ) -> Result<()> {
        let opts = GgufSaveOptions {
            tokenizer,
            ..GgufSaveOptions::new(dtype)
        };
        self.save_gguf_with(path, &opts)
    }

    /// Write this model to `path` as a GGUF file, as `opts` say (see
    /// [`CausalLm::save_gguf`]). Everything is checked before anything is
    /// written: a model llama.cpp cannot run as it is (a sliding window in
    /// the Llama family or Phi-3 unless
    /// [`allowed`](GgufSaveOptions::allow_unsupported_window), Gemma's
    /// `query_pre_attn_scalar` other than llama.cpp's, a RoPE scaling its
    /// architecture has not, a bias it does not load, a pipeline stage, …)
    /// is an [`Error::InvalidArgument`](crate::Error) naming what. The file appears under `path` only once complete. One tensor
    /// at a time is gathered to the host. In a multi-process mesh every
    /// process calls it and only process 0 writes.
    pub fn save_gguf_with(&self, path: impl AsRef<Path>, opts: &GgufSaveOptions<'_>) -> Result<()> {
        let writer = self.gguf_writer(opts)?;
        if writes_files(self) {
            writer.write(path)
        } else {
            // The same gathers, in the same order, with nothing written.
            writer.write_to(std::io::sink())
        }
    }

    /// The GGUF file [`CausalLm::save_gguf_with`] writes, not written yet:
    /// add metadata of your own (`general.license`, …) before
    /// [`GgufWriter::write`], or keep it in memory with
    /// [`GgufWriter::to_bytes`]. Each tensor is gathered from the ranks
    /// when the writer reaches it, so in a multi-process mesh every process
    /// must run the writer to its end (those not writing into
    /// `std::io::sink()`).
    pub fn gguf_writer(&self, opts: &GgufSaveOptions<'_>) -> Result<GgufWriter<'_>> {
        if self.stage.1 != 1 {
            return Err(Error::invalid(
                OP,
                "save a whole model: a pipeline stage is no GGUF file",
            ));
        }
        if matches!(opts.dtype, DType::I32) {
            return Err(Error::invalid(
                OP,
                "weights are F32, F16, BF16 or a quantized type, not I32",
            ));
        }
        let text = self.config.to_json(&self.generation.eos_token_ids)?;
        let json: Json = serde_json::from_str(&text)
            .map_err(|e| Error::invalid(OP, format!("internal: the config's JSON: {e}")))?;
        let Json::Object(c) = json else {
            return Err(Error::invalid(
                OP,
                "internal: the config's JSON is no object",
            ));
        };
        let model_type = str_of(&c, "model_type").unwrap_or_default().to_string();
        let arch = architecture(&model_type)?;
        let heads = match arch {
            "gpt2" => req(&c, "n_head")?,
            _ => req(&c, "num_attention_heads")?,
        };
        let kv = opt(&c, "num_key_value_heads")?.unwrap_or(heads);
        let (hparams, extras) = hparams(arch, &c, self.spec.vocab, opts.allow_unsupported_window)?;
        let params: Rc<Vec<&Parameter>> = Rc::new(
            self.named_parameters()
                .into_iter()
                .map(|(_, p)| p)
                .collect(),
        );
        let plans = self.plan(arch, heads, kv, opts)?;
        check_tensors(arch, &plans)?;

        let mut w = GgufWriter::new();
        w.metadata("general.architecture", arch)?
            .metadata("general.type", "model")?;
        if let Some(name) = opts.name {
            w.metadata("general.name", name)?;
        }
        for (k, v) in hparams {
            w.metadata(k, v)?;
        }
        w.metadata("general.file_type", file_type(mostly(&plans, opts.dtype)))?
            .metadata("general.quantization_version", 2u32)?;
        for (k, v) in tokenizer_metadata(&c, &self.generation.eos_token_ids, self.spec.vocab, opts)?
        {
            w.metadata(k, v)?;
        }
        for (name, values) in extras {
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            w.tensor(name, &[values.len()], DType::F32, move || Ok(bytes))?;
        }
        for plan in plans {
            let params = Rc::clone(&params);
            let shape = plan.shape();
            w.tensor(plan.name.clone(), &shape, plan.dtype, move || {
                plan.bytes(&params)
            })?;
        }
        Ok(w)
    }

    /// Every parameter placed in its GGUF tensor, and each tensor's type.
    fn plan(
        &self,
        arch: &str,
        heads: usize,
        kv: usize,
        opts: &GgufSaveOptions<'_>,
    ) -> Result<Vec<TensorPlan>> {
        let names = tensor_names(arch, self.spec.layers, heads, kv, self.config.as_ref());
        let params = self.named_parameters();
        let mut plans: Vec<TensorPlan> = Vec::new();
        let mut filled: Vec<usize> = Vec::new();
        for (i, (name, p)) in params.iter().enumerate() {
            let s = self.config.stored(name, p.shape());
            let Some((gguf, g)) = names.get(&s.key) else {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "parameter {name} (checkpoint tensor {:?}) has no tensor in llama.cpp's \
                         {arch:?} architecture",
                        s.key
                    ),
                ));
            };
            let at = match plans.iter().position(|t| t.name == *gguf) {
                Some(t) => t,
                None => {
                    plans.push(TensorPlan {
                        name: gguf.clone(),
                        hf_shape: s.shape.clone(),
                        g: g.clone(),
                        parts: Vec::new(),
                        dtype: DType::F32,
                        copy: false,
                    });
                    filled.push(0);
                    plans.len() - 1
                }
            };
            if plans[at].hf_shape != s.shape || s.rows.start != filled[at] {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "internal: {name} is stored as rows {:?} of {:?} {:?} after {} rows",
                        s.rows, s.key, s.shape, filled[at]
                    ),
                ));
            }
            filled[at] = s.rows.end;
            plans[at].parts.push(Part {
                param: i,
                rows: s.rows,
                order: s.order,
                transposed: s.transposed,
            });
        }
        for (t, &f) in plans.iter_mut().zip(&filled) {
            if f != t.hf_shape.first().copied().unwrap_or(1) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "internal: the parameters fill {f} rows of {:?} {:?}",
                        t.name, t.hf_shape
                    ),
                ));
            }
            let quants: Vec<Option<QuantType>> = (t.parts.iter())
                .map(|s| params[s.param].1.value.quant_type())
                .collect();
            (t.dtype, t.copy) = t.choose(opts, &quants);
        }
        Ok(plans)
    }
}

/// The GGUF architecture of `model_type`.
fn architecture(model_type: &str) -> Result<&'static str> {
    let arch = match model_type {
        "mistral" => Some("llama"),
        "gemma3" => Some("gemma3"),
        t => GGUF_ARCHITECTURES
            .iter()
            .find(|(_, m)| *m == t)
            .map(|(a, _)| *a),
    };
    arch.ok_or_else(|| {
        Error::invalid(
            OP,
            format!("model_type {model_type:?} has no GGUF architecture the crate writes"),
        )
    })
}

/// Candidate GGUF names of every tensor llama.cpp's architectures have.
const GLOBAL: [&str; 4] = ["token_embd", "position_embd", "output_norm", "output"];
/// Per block.
const BLOCK: [&str; 14] = [
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_qkv",
    "attn_output",
    "attn_q_norm",
    "attn_k_norm",
    "post_attention_norm",
    "ffn_norm",
    "post_ffw_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// The GGUF name and transforms of each checkpoint tensor `arch` has (by
/// the family's key): [`gguf_name`] of every candidate name, inverted.
fn tensor_names(
    arch: &str,
    layers: usize,
    heads: usize,
    kv: usize,
    config: &dyn DecoderConfig,
) -> HashMap<String, (String, GgufName)> {
    let mut out = HashMap::new();
    let mut add = |name: String| {
        // A name `gguf_name` does not know comes back as it is.
        if let Some(g) = gguf_name(arch, &name, heads, kv).filter(|g| g.key != name)
            && let Some(key) = config.sanitize(&g.key)
        {
            out.insert(key, (name, g));
        }
    };
    for suffix in ["weight", "bias"] {
        for base in GLOBAL {
            add(format!("{base}.{suffix}"));
        }
        for layer in 0..layers {
            for part in BLOCK {
                add(format!("blk.{layer}.{part}.{suffix}"));
            }
        }
    }
    out
}

/// What llama.cpp requires of the tensors beyond their names: no head for
/// Gemma 2, the biases each architecture loads (and the crate's reader
/// expects).
fn check_tensors(arch: &str, plans: &[TensorPlan]) -> Result<()> {
    let names: Vec<&str> = plans.iter().map(|t| t.name.as_str()).collect();
    if arch == "gemma2" && names.contains(&"output.weight") {
        return Err(Error::invalid(
            OP,
            "an untied gemma2 head: llama.cpp's gemma2 always multiplies by token_embd \
             (and refuses a file with an output.weight)",
        ));
    }
    let biases: Vec<&str> = (names.iter().copied())
        .filter(|n| n.ends_with(".bias"))
        .collect();
    let allowed: &[&str] = match arch {
        "llama" | "gpt2" => return Ok(()),
        "qwen2" => &[".attn_q.bias", ".attn_k.bias", ".attn_v.bias"],
        _ => &[],
    };
    if let Some(b) = biases
        .iter()
        .find(|b| !allowed.iter().any(|a| b.ends_with(a)))
    {
        return Err(Error::invalid(
            OP,
            format!(
                "tensor {b:?}: llama.cpp's {arch:?} architecture has no such bias{}",
                if arch == "qwen2" {
                    " (only q, k and v ones)"
                } else {
                    ""
                }
            ),
        ));
    }
    if arch == "qwen2" && !names.contains(&"blk.0.attn_q.bias") {
        return Err(Error::invalid(
            OP,
            "a qwen2 model without q/k/v biases: GGUF readers give every qwen2 model them",
        ));
    }
    Ok(())
}

/// A parameter's place in a GGUF tensor: the rows of the checkpoint
/// tensor it fills ([`Stored`](crate::nn::Stored)), in which order, and
/// whether it is their transpose.
struct Part {
    param: usize,
    rows: Range<usize>,
    order: Option<Vec<usize>>,
    transposed: bool,
}

/// One GGUF tensor: its name, the checkpoint tensor it stands for (shape,
/// the converter's transforms), the parameters filling it, its type, and
/// whether its bytes are the parameters' own blocks.
struct TensorPlan {
    name: String,
    hf_shape: Vec<usize>,
    g: GgufName,
    parts: Vec<Part>,
    dtype: DType,
    copy: bool,
}

impl TensorPlan {
    /// Row-major shape in the file.
    fn shape(&self) -> Vec<usize> {
        let mut s = self.hf_shape.clone();
        if self.g.transposed {
            s.reverse();
        }
        s
    }

    /// Whether each row of the file is a row of a parameter (no transpose
    /// between them): quantized blocks can be copied.
    fn by_rows(&self) -> bool {
        match self.g.transposed {
            true => self.parts.len() == 1 && self.parts[0].transposed,
            false => self.parts.iter().all(|s| !s.transposed),
        }
    }

    /// The type written and whether the parameters' blocks are copied,
    /// for parameters quantized as `quants` say.
    fn choose(&self, opts: &GgufSaveOptions<'_>, quants: &[Option<QuantType>]) -> (DType, bool) {
        let shape = self.shape();
        let matrix = shape.len() == 2
            && !self.name.ends_with("_norm.weight")
            && !self.name.starts_with("position_embd.");
        if !matrix {
            return (DType::F32, false);
        }
        let k = shape[1];
        let want = match opts.dtype {
            DType::Quant(q) => q.for_row(k).map_or(DType::F16, DType::Quant),
            d => d,
        };
        let same = match quants.first() {
            Some(&Some(q)) if quants.iter().all(|&x| x == Some(q)) => Some(q),
            _ => None,
        };
        match same.filter(|_| self.by_rows()) {
            Some(q) if opts.keep_quantized || DType::Quant(q) == want => (DType::Quant(q), true),
            _ => (want, false),
        }
    }

    /// For each row of the file, its part and the row of that part's
    /// parameter.
    fn sources(&self) -> Vec<(usize, usize)> {
        let rows = self.shape()[0];
        if self.g.transposed {
            return (0..rows).map(|r| (0, r)).collect();
        }
        let inverse: Vec<Option<Vec<usize>>> = (self.parts.iter())
            .map(|s| {
                s.order.as_ref().map(|o| {
                    let mut inv = vec![0; o.len()];
                    for (i, &j) in o.iter().enumerate() {
                        inv[j] = i;
                    }
                    inv
                })
            })
            .collect();
        (0..rows)
            .map(|r| {
                let hf = interleaved_source(r, rows, self.g.permuted_heads);
                let at = (self.parts.iter())
                    .position(|s| s.rows.contains(&hf))
                    .unwrap_or(0);
                let local = hf - self.parts[at].rows.start;
                let row = inverse[at].as_ref().map_or(local, |inv| inv[local]);
                (at, row)
            })
            .collect()
    }

    /// The tensor's bytes: the parameters gathered (one tensor's worth),
    /// transformed as the converter does, in its type.
    fn bytes(&self, params: &[&Parameter]) -> Result<Vec<u8>> {
        let shape = self.shape();
        let (rows, cols) = (shape[0], shape[1..].iter().product::<usize>());
        if let (true, DType::Quant(q)) = (self.copy, self.dtype) {
            let mut blocks = Vec::with_capacity(self.parts.len());
            for s in &self.parts {
                match params[s.param].master_quant()? {
                    Some((got, b)) if got == q => blocks.push(b),
                    _ => {
                        return Err(Error::invalid(
                            OP,
                            format!("internal: a part of {:?} is no longer {q}", self.name),
                        ));
                    }
                }
            }
            let rb = q.bytes_for(1, cols);
            let mut out = Vec::with_capacity(rows * rb);
            for (at, r) in self.sources() {
                out.extend_from_slice(&blocks[at][r * rb..(r + 1) * rb]);
            }
            return Ok(out);
        }
        let values = self.values(params)?;
        encode(&values, self.dtype, rows, cols).map_err(|e| match e {
            Error::InvalidArgument { message, .. } => {
                Error::invalid(OP, format!("tensor {:?}: {message}", self.name))
            }
            e => e,
        })
    }

    /// The tensor's f32 values as the file holds them.
    fn values(&self, params: &[&Parameter]) -> Result<Vec<f32>> {
        let hf_rows = self.hf_shape[0];
        let hf_cols: usize = self.hf_shape[1..].iter().product();
        let file = if self.g.transposed && self.by_rows() {
            // The file holds the parameter's own layout (GPT-2's weights).
            params[self.parts[0].param].master()?
        } else {
            let mut hf = vec![0f32; hf_rows * hf_cols];
            for s in &self.parts {
                let p = params[s.param];
                let data = p.master()?;
                let p_rows = p.shape().first().copied().unwrap_or(1);
                let p_cols = data.len() / p_rows.max(1);
                let data = match &s.order {
                    _ if s.transposed => transpose(&data, p_rows, p_cols),
                    Some(order) => {
                        // Row i of the parameter is row order[i] of the file's part.
                        let mut out = vec![0f32; data.len()];
                        for (i, &j) in order.iter().enumerate() {
                            out[j * p_cols..(j + 1) * p_cols]
                                .copy_from_slice(&data[i * p_cols..(i + 1) * p_cols]);
                        }
                        out
                    }
                    None => data,
                };
                hf[s.rows.start * hf_cols..s.rows.end * hf_cols].copy_from_slice(&data);
            }
            match self.g.transposed {
                true => transpose(&hf, hf_rows, hf_cols),
                false => hf,
            }
        };
        let rows = self.shape()[0];
        let cols = file.len() / rows.max(1);
        let mut out = match self.g.permuted_heads {
            Some(_) => (0..rows)
                .flat_map(|r| {
                    let src = interleaved_source(r, rows, self.g.permuted_heads);
                    file[src * cols..(src + 1) * cols].iter().copied()
                })
                .collect(),
            None => file,
        };
        if self.g.minus != 0.0 {
            out.iter_mut().for_each(|v| *v += self.g.minus);
        }
        Ok(out)
    }
}

/// The checkpoint row that file row `r` (of `rows`) holds when llama.cpp's
/// converter interleaved the rows per head of `heads`:
/// `file[h·d + 2i + j] = hf[h·d + j·d/2 + i]`.
fn interleaved_source(r: usize, rows: usize, heads: Option<usize>) -> usize {
    let Some(heads) = heads.filter(|&h| h > 0 && rows.is_multiple_of(h)) else {
        return r;
    };
    let d = rows / heads;
    let half = d / 2;
    if half == 0 {
        return r;
    }
    let (h, k) = (r / d, r % d);
    let (i, j) = (k / 2, k % 2);
    h * d + j * half + i
}

/// `[rows, cols]` row-major → `[cols, rows]` row-major.
fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for (r, row) in data.chunks_exact(cols.max(1)).enumerate().take(rows) {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    out
}

/// `values` (`rows` × `cols`) as GGUF stores a tensor of `dtype`.
fn encode(values: &[f32], dtype: DType, rows: usize, cols: usize) -> Result<Vec<u8>> {
    Ok(match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => (values.iter())
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        DType::BF16 => (values.iter())
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        DType::Quant(q) => quantize_rows(q, values, rows, cols)?,
        DType::I32 => return Err(Error::invalid(OP, "I32 weights are not written")),
    })
}

/// The type most weight matrices of `plans` have (`dtype` where none is
/// one): what `general.file_type` names.
fn mostly(plans: &[TensorPlan], dtype: DType) -> DType {
    let mut counts: Vec<(DType, usize)> = Vec::new();
    let matrices = plans
        .iter()
        .filter(|t| t.hf_shape.len() == 2 && !t.name.starts_with("position_embd."));
    for t in matrices {
        match counts.iter_mut().find(|(d, _)| *d == t.dtype) {
            Some((_, n)) => *n += 1,
            None => counts.push((t.dtype, 1)),
        }
    }
    // The first of the most frequent, in the order the tensors come.
    let most = counts.iter().map(|&(_, n)| n).max().unwrap_or(0);
    counts
        .into_iter()
        .find(|&(_, n)| n == most)
        .map_or(dtype, |(d, _)| d)
}

/// `general.file_type` (llama.cpp's `llama_ftype`) of files mostly `dtype`.
fn file_type(dtype: DType) -> u32 {
    match dtype {
        DType::F32 | DType::I32 => 0,
        DType::F16 => 1,
        DType::BF16 => 32,
        DType::Quant(q) => match q {
            QuantType::Q4_0 => 2,
            QuantType::Q4_1 => 3,
            QuantType::Q8_0 => 7,
            QuantType::Q5_0 => 8,
            QuantType::Q5_1 => 9,
            QuantType::Q4K => 14,
            QuantType::Q5K => 16,
            QuantType::Q6K => 18,
        },
    }
}

/// `c[k]` as a string.
fn str_of<'c>(c: &'c Map<String, Json>, k: &str) -> Option<&'c str> {
    c.get(k).and_then(Json::as_str)
}

/// `c[k]` as a count; absent or `null` is `None`.
fn opt(c: &Map<String, Json>, k: &str) -> Result<Option<usize>> {
    match c.get(k) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("internal: the config's {k} is {v}, not a count"),
            )
        }),
    }
}

/// `c[k]` as a count, required.
fn req(c: &Map<String, Json>, k: &str) -> Result<usize> {
    opt(c, k)?.ok_or_else(|| Error::invalid(OP, format!("internal: the config has no {k}")))
}

/// `c[k]` as a number; absent or `null` is `None`.
fn num(c: &Map<String, Json>, k: &str) -> Result<Option<f64>> {
    match c.get(k) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| {
            Error::invalid(
                OP,
                format!("internal: the config's {k} is {v}, not a number"),
            )
        }),
    }
}

/// A count as GGUF's `UINT32`.
fn u32_of(n: usize, what: &str) -> Result<Value> {
    u32::try_from(n)
        .map(Value::U32)
        .map_err(|_| Error::invalid(OP, format!("{what} {n} does not fit GGUF's u32")))
}

/// The architecture's metadata (its `{arch}.*` keys) for the config `c`
/// (the family's `config.json`) of a model of `vocab` tokens (with a
/// window llama.cpp lacks only if `any_window`), and the
/// tensors the config stands for (Llama 3's `rope_freqs`, Phi-3's
/// LongRoPE factors): the inverse of [`gguf_config`](super::gguf_config).
#[allow(clippy::type_complexity)]
fn hparams(
    arch: &str,
    c: &Map<String, Json>,
    vocab: usize,
    any_window: bool,
) -> Result<(Vec<(String, Value)>, Vec<(String, Vec<f32>)>)> {
    let mut kv: Vec<(String, Value)> = Vec::new();
    let mut extras: Vec<(String, Vec<f32>)> = Vec::new();
    let mut put = |k: &str, v: Value| kv.push((format!("{arch}.{k}"), v));
    if arch == "gpt2" {
        let act = str_of(c, "activation_function").unwrap_or("gelu_new");
        if !matches!(act, "gelu_new" | "gelu_pytorch_tanh") {
            return Err(Error::invalid(
                OP,
                format!(
                    "activation_function {act:?}: llama.cpp's gpt2 computes the tanh GELU \
                     (gelu_new) alone"
                ),
            ));
        }
        let hidden = req(c, "n_embd")?;
        let ffn = opt(c, "n_inner")?.unwrap_or(4 * hidden);
        put("block_count", u32_of(req(c, "n_layer")?, "n_layer")?);
        put(
            "context_length",
            u32_of(req(c, "n_positions")?, "n_positions")?,
        );
        put("embedding_length", u32_of(hidden, "n_embd")?);
        put("feed_forward_length", u32_of(ffn, "n_inner")?);
        put("attention.head_count", u32_of(req(c, "n_head")?, "n_head")?);
        let eps = num(c, "layer_norm_epsilon")?.unwrap_or(1e-5);
        put("attention.layer_norm_epsilon", Value::F32(eps as f32));
        return Ok((kv, extras));
    }
    let model_type = str_of(c, "model_type").unwrap_or_default();
    let (hidden, layers) = (req(c, "hidden_size")?, req(c, "num_hidden_layers")?);
    let heads = req(c, "num_attention_heads")?;
    let kv_heads = opt(c, "num_key_value_heads")?.unwrap_or(heads);
    let head_dim = opt(c, "head_dim")?.unwrap_or(hidden / heads.max(1));
    let context = req(c, "max_position_embeddings")?;
    let theta = num(c, "rope_theta")?.unwrap_or(1e4);
    put("block_count", u32_of(layers, "num_hidden_layers")?);
    put(
        "context_length",
        u32_of(context, "max_position_embeddings")?,
    );
    put("embedding_length", u32_of(hidden, "hidden_size")?);
    put(
        "feed_forward_length",
        u32_of(req(c, "intermediate_size")?, "intermediate_size")?,
    );
    put(
        "attention.head_count",
        u32_of(heads, "num_attention_heads")?,
    );
    put(
        "attention.head_count_kv",
        u32_of(kv_heads, "num_key_value_heads")?,
    );
    put("rope.freq_base", Value::F32(theta as f32));
    let eps = num(c, "rms_norm_eps")?.unwrap_or(1e-6);
    put("attention.layer_norm_rms_epsilon", Value::F32(eps as f32));
    if matches!(arch, "qwen2" | "phi3") && heads * head_dim != hidden {
        return Err(Error::invalid(
            OP,
            format!(
                "{heads} heads of {head_dim}: llama.cpp's {arch:?} takes queries as wide as \
                 the model ({hidden})"
            ),
        ));
    }
    put("attention.key_length", u32_of(head_dim, "head_dim")?);
    put("attention.value_length", u32_of(head_dim, "head_dim")?);
    let mut rotary = head_dim;
    match arch {
        "llama" | "qwen2" | "qwen3" => {
            let window = opt(c, "sliding_window")?.unwrap_or(0);
            let slides = match model_type {
                "mistral" => window > 0,
                _ => {
                    c.get("use_sliding_window").and_then(Json::as_bool) == Some(true)
                        && (c.get("layer_types").and_then(Json::as_array))
                            .is_some_and(|t| t.iter().any(|t| t == "sliding_attention"))
                }
            };
            if slides && window < context && !any_window {
                return Err(unsupported_window(arch, window, context));
            }
            if arch == "llama" {
                put("vocab_size", u32_of(vocab, "vocab_size")?);
                put("rope.dimension_count", u32_of(head_dim, "head_dim")?);
            }
        }
        "gemma2" | "gemma3" => {
            let gemma2 = arch == "gemma2";
            let big = (gemma2 && layers == 46) || (!gemma2 && layers == 62);
            let scalar = if big { hidden / heads.max(1) } else { head_dim };
            let q = num(c, "query_pre_attn_scalar")?.unwrap_or(scalar as f64);
            if q != scalar as f64 {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "query_pre_attn_scalar {q}: llama.cpp's {arch:?} scales attention by \
                         {scalar}^-1/2 ({}) for {layers} layers",
                        if big { "hidden / heads" } else { "head_dim" }
                    ),
                ));
            }
            if c.get("attention_bias").and_then(Json::as_bool) == Some(true) {
                return Err(Error::invalid(
                    OP,
                    format!("attention_bias: llama.cpp's {arch:?} has no attention biases"),
                ));
            }
            let sliding: Vec<bool> = (c.get("layer_types").and_then(Json::as_array))
                .map(|t| t.iter().map(|t| t == "sliding_attention").collect())
                .unwrap_or_default();
            let window = opt(c, "sliding_window")?.unwrap_or(0);
            let slides = window > 0 && sliding.iter().any(|&s| s);
            if gemma2 || slides {
                let w = if slides { window } else { 0 };
                put("attention.sliding_window", u32_of(w, "sliding_window")?);
            }
            if slides {
                let period = if gemma2 { 2 } else { 6 };
                let by = |p: usize| -> Vec<bool> { (0..layers).map(|l| l % p < p - 1).collect() };
                if sliding != by(period) {
                    match (2..=layers + 1).find(|&p| sliding == by(p)) {
                        Some(p) => put("attention.sliding_window_pattern", u32_of(p, "period")?),
                        None => put(
                            "attention.sliding_window_pattern",
                            Value::Array(Array::Bool(sliding.clone())),
                        ),
                    }
                }
            }
            let attn = num(c, "attn_logit_softcapping")?;
            let last = num(c, "final_logit_softcapping")?;
            if gemma2 {
                let (Some(attn), Some(last)) = (attn, last) else {
                    return Err(Error::invalid(
                        OP,
                        "a gemma2 model without soft-capping: llama.cpp's gemma2 caps attention \
                         scores and logits (at 50 and 30 where the file says nothing)",
                    ));
                };
                put("attn_logit_softcapping", Value::F32(attn as f32));
                put("final_logit_softcapping", Value::F32(last as f32));
            } else {
                if let Some(a) = attn {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "attn_logit_softcapping {a}: llama.cpp's gemma3 does not cap \
                             attention scores"
                        ),
                    ));
                }
                if let Some(last) = last {
                    put("final_logit_softcapping", Value::F32(last as f32));
                }
                let local = num(c, "rope_local_base_freq")?.unwrap_or(1e4);
                put("rope.freq_base_swa", Value::F32(local as f32));
            }
        }
        "phi3" => {
            let factor = num(c, "partial_rotary_factor")?.unwrap_or(1.0);
            rotary = (factor * head_dim as f64).round() as usize;
            put("rope.dimension_count", u32_of(rotary, "rotary width")?);
            let original = opt(c, "original_max_position_embeddings")?.unwrap_or(context);
            put(
                "rope.scaling.original_context_length",
                u32_of(original, "original_max_position_embeddings")?,
            );
            let window = opt(c, "sliding_window")?.unwrap_or(0);
            if window > 0 && window < context && !any_window {
                return Err(unsupported_window(arch, window, context));
            }
            put(
                "attention.sliding_window",
                u32_of(window, "sliding_window")?,
            );
        }
        _ => {}
    }
    let empty = Map::new();
    let scaling = match c.get("rope_scaling") {
        Some(Json::Object(o)) => o,
        _ => &empty,
    };
    let kind = str_of(scaling, "rope_type")
        .or(str_of(scaling, "type"))
        .unwrap_or("default");
    let unsupported = |why: &str| Err(Error::invalid(OP, format!("rope_scaling {kind:?}: {why}")));
    match (kind, arch) {
        ("default", _) => {}
        ("linear", _) => {
            put("rope.scaling.type", "linear".into());
            let factor = num(scaling, "factor")?.unwrap_or(1.0);
            put("rope.scaling.factor", Value::F32(factor as f32));
        }
        ("yarn", _) => {
            for k in ["mscale", "mscale_all_dim"] {
                if num(scaling, k)?.is_some() {
                    return unsupported(&format!("llama.cpp's {arch:?} has no yarn {k}"));
                }
            }
            if scaling.get("truncate").and_then(Json::as_bool) == Some(false) {
                return unsupported("llama.cpp's yarn truncates its correction range");
            }
            put("rope.scaling.type", "yarn".into());
            if let Some(f) = num(scaling, "factor")? {
                put("rope.scaling.factor", Value::F32(f as f32));
            }
            let original = opt(scaling, "original_max_position_embeddings")?.unwrap_or(context);
            put(
                "rope.scaling.original_context_length",
                u32_of(original, "original_max_position_embeddings")?,
            );
            for (h, g) in [
                ("beta_fast", "rope.scaling.yarn_beta_fast"),
                ("beta_slow", "rope.scaling.yarn_beta_slow"),
                ("attention_factor", "rope.scaling.yarn_attn_factor"),
            ] {
                if let Some(v) = num(scaling, h)? {
                    put(g, Value::F32(v as f32));
                }
            }
        }
        ("llama3", "llama") => {
            let factor = num(scaling, "factor")?.unwrap_or(1.0);
            let low = num(scaling, "low_freq_factor")?.unwrap_or(1.0);
            let high = num(scaling, "high_freq_factor")?.unwrap_or(4.0);
            let old = num(scaling, "original_max_position_embeddings")?.unwrap_or(8192.0);
            extras.push((
                "rope_freqs.weight".into(),
                llama3_factors(theta, head_dim, factor, low, high, old),
            ));
        }
        ("longrope" | "su", "phi3") => {
            let factors = |k: &str| -> Result<Vec<f32>> {
                let list = (scaling.get(k).and_then(Json::as_array))
                    .map(|a| {
                        a.iter()
                            .filter_map(Json::as_f64)
                            .map(|v| v as f32)
                            .collect()
                    })
                    .unwrap_or_else(Vec::new);
                if list.len() != rotary / 2 {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "rope_scaling {k}: {} factors for a rotary width of {rotary}",
                            list.len()
                        ),
                    ));
                }
                Ok(list)
            };
            extras.push(("rope_factors_long.weight".into(), factors("long_factor")?));
            extras.push(("rope_factors_short.weight".into(), factors("short_factor")?));
            let original = opt(scaling, "original_max_position_embeddings")?
                .or(opt(c, "original_max_position_embeddings")?)
                .unwrap_or(context);
            let scale = num(scaling, "factor")?.unwrap_or(context as f64 / original.max(1) as f64);
            let attn = num(scaling, "attention_factor")?.unwrap_or(if scale <= 1.0 {
                1.0
            } else {
                (1.0 + scale.ln() / (original as f64).ln()).sqrt()
            });
            put("rope.scaling.attn_factor", Value::F32(attn as f32));
        }
        _ => {
            return unsupported(&format!(
                "llama.cpp's {arch:?} architecture has no such RoPE"
            ));
        }
    }
    Ok((kv, extras))
}

/// A sliding window where llama.cpp's `arch` has none.
fn unsupported_window(arch: &str, window: usize, context: usize) -> Error {
    Error::invalid(
        OP,
        format!(
            "sliding_window {window} (of a context of {context}): llama.cpp's {arch:?} \
             architecture attends to the whole context; GgufSaveOptions::\
             allow_unsupported_window writes the model anyway"
        ),
    )
}

/// Llama 3's RoPE divisors (`rope_freqs.weight`), one per frequency, as
/// llama.cpp's converter computes them.
fn llama3_factors(theta: f64, dim: usize, factor: f64, low: f64, high: f64, old: f64) -> Vec<f32> {
    let (low_wl, high_wl) = (old / low, old / high);
    (0..dim / 2)
        .map(|i| {
            let freq = 1.0 / theta.powf(2.0 * i as f64 / dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let v = if wavelen < high_wl {
                1.0
            } else if wavelen > low_wl {
                factor
            } else {
                let s = (old / wavelen - low) / (high - low);
                1.0 / ((1.0 - s) / factor + s)
            };
            v as f32
        })
        .collect()
}

/// The `tokenizer.*` keys: `opts.tokenizer`'s vocabulary (special ids it
/// leaves open taken from the config `c` and the generation `eos` ids,
/// padded to `vocab` tokens), or the config's special ids alone.
fn tokenizer_metadata(
    c: &Map<String, Json>,
    eos: &[i32],
    vocab: usize,
    opts: &GgufSaveOptions<'_>,
) -> Result<Vec<(String, Value)>> {
    let id =
        |k: &str| -> Result<Option<u32>> { Ok(opt(c, k)?.and_then(|i| u32::try_from(i).ok())) };
    let first_eos = match eos.first() {
        Some(&e) => u32::try_from(e).ok(),
        None => match c.get("eos_token_id") {
            Some(Json::Array(a)) => a.first().and_then(Json::as_u64).map(|i| i as u32),
            Some(v) => v.as_u64().map(|i| i as u32),
            None => None,
        },
    };
    let mut v = match opts.tokenizer {
        Some(t) => t.to_gguf_vocab()?,
        None => GgufVocab::default(),
    };
    v.bos_token_id = v.bos_token_id.or(id("bos_token_id")?);
    v.eos_token_id = v.eos_token_id.or(first_eos);
    v.padding_token_id = v.padding_token_id.or(id("pad_token_id")?);
    let mut out: Vec<(String, Value)> = Vec::new();
    let key = |k: &str| format!("tokenizer.ggml.{k}");
    if opts.tokenizer.is_some() {
        if v.tokens.len() > vocab {
            return Err(Error::invalid(
                OP,
                format!(
                    "the tokenizer has {} tokens, the model's embedding {vocab} rows: llama.cpp \
                     needs a token for each row",
                    v.tokens.len()
                ),
            ));
        }
        v.pad_to(vocab)?;
        out.push((key("model"), v.model.clone().into()));
        if let Some(pre) = &v.pre {
            out.push((key("pre"), pre.clone().into()));
        }
        out.push((key("tokens"), std::mem::take(&mut v.tokens).into()));
        if let Some(scores) = v.scores.take() {
            out.push((key("scores"), scores.into()));
        }
        if let Some(types) = v.token_types.take() {
            out.push((key("token_type"), types.into()));
        }
        if let Some(merges) = v.merges.take() {
            out.push((key("merges"), merges.into()));
        }
    }
    for (k, id) in [
        ("bos_token_id", v.bos_token_id),
        ("eos_token_id", v.eos_token_id),
        ("unknown_token_id", v.unknown_token_id),
        ("padding_token_id", v.padding_token_id),
    ] {
        if let Some(id) = id.filter(|&i| (i as usize) < vocab) {
            out.push((key(k), Value::U32(id)));
        }
    }
    for (k, flag) in [
        ("add_bos_token", v.add_bos_token),
        ("add_eos_token", v.add_eos_token),
        ("add_space_prefix", v.add_space_prefix),
    ] {
        if let Some(flag) = flag {
            out.push((key(k), Value::Bool(flag)));
        }
    }
    if let Some(template) = v.chat_template.take() {
        out.push(("tokenizer.chat_template".into(), template.into()));
    }
    Ok(out)
}

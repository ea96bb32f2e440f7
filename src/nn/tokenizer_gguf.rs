//! [`GgufVocab`]: the tokenizer of a GGUF file, as llama.cpp stores it in
//! metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`), and the
//! [`Tokenizer`] it stands for, both ways. From GGUF the tokenizer encodes
//! and decodes as the model's own `tokenizer.json` does, which is also how
//! llama.cpp tokenizes (but for Qwen's NFC, which llama.cpp skips); to GGUF
//! it gives what llama.cpp's `convert_hf_to_gguf.py` writes for that
//! `tokenizer.json`.
//!
//! Supported: `gpt2` vocabularies (byte-level BPE) with the pre-tokenizers
//! of GPT-2, Llama 3, Qwen2 and SmolLM / StarCoder (see `pre.rs` for the
//! names), and `llama` vocabularies (SentencePiece BPE with byte fallback:
//! Llama 2, Mistral, TinyLlama), which merge by piece score.

mod build;
mod describe;
mod pre;
mod read;
mod spm;
mod vocab;

pub use vocab::GgufVocab;
use vocab::err;

use tokenizers::AddedToken;
use tokenizers::models::bpe::Vocab;

use super::chat::ChatTemplate;
use super::file_limits::{FileLimits, raise};
use super::tokenizer::{SpecialIds, Tokenizer};
use crate::error::Result;

impl Tokenizer {
    /// The tokenizer GGUF metadata describes (`source` names the file in
    /// messages): it encodes and decodes as the model's `tokenizer.json` and
    /// llama.cpp do. Control and unknown tokens become special tokens,
    /// user-defined ones added tokens (llama.cpp matches both whole before
    /// splitting text); encoding with special tokens adds BOS / EOS as
    /// `add_bos_token` / `add_eos_token` (or llama.cpp's defaults) say; the
    /// chat template comes with its special tokens. An unsupported `model`
    /// or `pre`, arrays of the wrong length, duplicate tokens or ids out of
    /// range are an [`Error::Tokenizer`](crate::Error::Tokenizer) naming the key.
    pub fn from_gguf_vocab(vocab: &GgufVocab, source: &str) -> Result<Tokenizer> {
        let Checked {
            tokens,
            ids,
            types,
            mut special,
        } = check(vocab, source)?;
        let (mut inner, adds_bos) = match vocab.model.as_str() {
            "gpt2" => build::byte_level(vocab, ids, source)?,
            "llama" => {
                // llama.cpp's ids for a SentencePiece vocabulary without the keys.
                let default = |id: u32| ((id as usize) < tokens.len()).then_some(id);
                special.bos = special.bos.or(default(1));
                special.eos = special.eos.or(default(2));
                special.unk = special.unk.or(default(0));
                let spm = build::sentencepiece(vocab, &tokens, ids, special.unk, source)?;
                (spm, true)
            }
            other => {
                return Err(err(
                    source,
                    format!(
                        "tokenizer.ggml.model {other:?} is not supported: only \"gpt2\" (byte-level BPE) and \"llama\" (SentencePiece BPE)"
                    ),
                ));
            }
        };
        let added = |kinds: &[i32], special: bool| -> Vec<AddedToken> {
            (types.iter().zip(&tokens))
                .filter(|(t, _)| kinds.contains(t))
                .map(|(_, text)| AddedToken::from(text.clone(), special).normalized(false))
                .collect()
        };
        let fail = |e: tokenizers::Error| err(source, e);
        inner
            .add_special_tokens(added(&[GgufVocab::CONTROL, GgufVocab::UNKNOWN], true))
            .map_err(fail)?;
        inner
            .add_tokens(added(&[GgufVocab::USER_DEFINED], false))
            .map_err(fail)?;
        let adds = (
            vocab.add_bos_token.unwrap_or(adds_bos),
            vocab.add_eos_token.unwrap_or(false),
        );
        let byte_level = vocab.model == "gpt2";
        inner.with_post_processor(build::post_processor(
            byte_level, &tokens, &special, adds, source,
        )?);
        let tokenizer = Tokenizer::checked(inner, source.to_string())?.with_special_ids(special);
        Ok(match &vocab.chat_template {
            Some(text) => {
                tokenizer.with_chat_result(chat_template(text, &tokens, &special, source))
            }
            None => tokenizer,
        })
    }
}

/// A vocabulary's tokens, ids and types, checked as llama.cpp reads them.
struct Checked {
    tokens: Vec<String>,
    ids: Vocab,
    types: Vec<i32>,
    special: SpecialIds,
}

/// `vocab` checked: unique tokens (an empty one named `[EMPTY_i]`, as
/// llama.cpp names it), one type and score per token, ids in range.
fn check(vocab: &GgufVocab, source: &str) -> Result<Checked> {
    let fail = |message: String| err(source, message);
    let n = vocab.tokens.len();
    if n == 0 {
        return Err(fail("tokenizer.ggml.tokens is empty".into()));
    }
    // What `tokenizers` would build from them, bounded as a tokenizer.json's.
    let limits = FileLimits::current();
    if n > limits.max_vocab {
        return Err(fail(format!(
            "tokenizer.ggml.tokens has {n} tokens ({})",
            raise("max_vocab", limits.max_vocab)
        )));
    }
    if let Some(i) = vocab
        .tokens
        .iter()
        .position(|t| t.len() > limits.max_token_bytes)
    {
        return Err(fail(format!(
            "tokenizer.ggml.tokens[{i}] is {} bytes ({})",
            vocab.tokens[i].len(),
            raise("max_token_bytes", limits.max_token_bytes)
        )));
    }
    let merges = vocab.merges.as_ref().map_or(0, Vec::len);
    if merges > limits.max_merges {
        return Err(fail(format!(
            "tokenizer.ggml.merges has {merges} merges ({})",
            raise("max_merges", limits.max_merges)
        )));
    }
    let tokens: Vec<String> = (vocab.tokens.iter().enumerate())
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            }
        })
        .collect();
    let mut ids = Vocab::with_capacity(n);
    for (i, token) in tokens.iter().enumerate() {
        if let Some(j) = ids.insert(token.clone(), i as u32) {
            return Err(fail(format!(
                "tokenizer.ggml.tokens has {token:?} twice (ids {j} and {i}); llama.cpp needs every token once"
            )));
        }
    }
    let types = vocab
        .token_types
        .clone()
        .unwrap_or_else(|| vec![GgufVocab::NORMAL; n]);
    if types.len() != n {
        return Err(fail(format!(
            "tokenizer.ggml.token_type has {} entries for {n} tokens",
            types.len()
        )));
    }
    if let Some(i) = types.iter().position(|t| !(0..=6).contains(t)) {
        return Err(fail(format!(
            "tokenizer.ggml.token_type[{i}] = {} is not a llama.cpp token type (0 to 6)",
            types[i]
        )));
    }
    if let Some(scores) = vocab.scores.as_ref().filter(|s| s.len() != n) {
        return Err(fail(format!(
            "tokenizer.ggml.scores has {} entries for {n} tokens",
            scores.len()
        )));
    }
    let id = |key: &str, id: Option<u32>| match id {
        Some(id) if id as usize >= n => Err(fail(format!(
            "tokenizer.ggml.{key} = {id} is out of range: the vocabulary has {n} tokens"
        ))),
        _ => Ok(id),
    };
    let special = SpecialIds {
        bos: id("bos_token_id", vocab.bos_token_id)?,
        eos: id("eos_token_id", vocab.eos_token_id)?,
        unk: id("unknown_token_id", vocab.unknown_token_id)?,
        pad: id("padding_token_id", vocab.padding_token_id)?,
    };
    Ok(Checked {
        tokens,
        ids,
        types,
        special,
    })
}

/// `text` compiled, with the special tokens transformers gives a template
/// from GGUF: the text of each id.
fn chat_template(
    text: &str,
    tokens: &[String],
    special: &SpecialIds,
    source: &str,
) -> Result<ChatTemplate> {
    let mut template = ChatTemplate::compile(
        text.to_string(),
        format!("{source} (tokenizer.chat_template)"),
    )?;
    let named = [
        ("bos_token", special.bos),
        ("eos_token", special.eos),
        ("unk_token", special.unk),
        ("pad_token", special.pad),
    ];
    for (name, id) in named {
        if let Some(id) = id {
            template = template.with_special_token(name, tokens[id as usize].clone());
        }
    }
    Ok(template)
}

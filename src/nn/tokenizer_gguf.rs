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

use tokenizers::AddedToken;
use tokenizers::models::bpe::Vocab;

use super::chat::ChatTemplate;
use super::tokenizer::{SpecialIds, Tokenizer};
use crate::error::{Error, Result};

/// A tokenizer as GGUF metadata holds it: each field is one key (named in
/// its doc), `None` where the key is absent. Filled by a GGUF reader and
/// turned into a [`Tokenizer`] with [`Tokenizer::from_gguf_vocab`], or made
/// by [`Tokenizer::to_gguf_vocab`] for a GGUF writer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"`
    /// (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer of a `gpt2` vocabulary
    /// (`"llama-bpe"`, `"qwen2"`, ...); `"default"` for `llama`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: token text, index = id (byte-level spelling
    /// for normal `gpt2` tokens, `▁` for spaces in `llama` ones).
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.scores`: `llama` piece scores, one per token.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`: one of the type constants
    /// ([`GgufVocab::NORMAL`], ...) per token.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`: `gpt2` merges, `"left right"`, best first.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_token_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unknown_token_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub padding_token_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`: whether encoding starts with BOS
    /// (llama.cpp's default when absent: true for `llama` and `llama-bpe`).
    pub add_bos_token: Option<bool>,
    /// `tokenizer.ggml.add_eos_token` (default false).
    pub add_eos_token: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`: whether a `llama` vocabulary puts
    /// a space before text (default true; `gpt2` ignores it).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`: the Jinja chat template.
    pub chat_template: Option<String>,
}

impl GgufVocab {
    /// Token type: undefined (llama.cpp treats it as normal).
    pub const UNDEFINED: i32 = 0;
    /// Token type: a regular vocabulary token.
    pub const NORMAL: i32 = 1;
    /// Token type: the unknown token.
    pub const UNKNOWN: i32 = 2;
    /// Token type: a special token (BOS, `<|im_start|>`), matched whole.
    pub const CONTROL: i32 = 3;
    /// Token type: an added, non-special token, matched whole.
    pub const USER_DEFINED: i32 = 4;
    /// Token type: a placeholder (`[PAD123]`).
    pub const UNUSED: i32 = 5;
    /// Token type: a SentencePiece byte-fallback piece (`<0x0A>`).
    pub const BYTE: i32 = 6;

    /// Appends `[PAD{i}]` placeholders (UNUSED, score -1000) up to
    /// `vocab_size` tokens, as the converter does when the model's
    /// embedding has more rows than the tokenizer has tokens: llama.cpp
    /// wants one token per row.
    pub fn pad_to(&mut self, vocab_size: usize) -> Result<()> {
        if vocab_size < self.tokens.len() {
            return Err(Error::invalid(
                "GgufVocab::pad_to",
                format!(
                    "the vocabulary already has {} tokens, more than {vocab_size}",
                    self.tokens.len()
                ),
            ));
        }
        for i in self.tokens.len()..vocab_size {
            self.tokens.push(format!("[PAD{i}]"));
            if let Some(types) = &mut self.token_types {
                types.push(GgufVocab::UNUSED);
            }
            if let Some(scores) = &mut self.scores {
                scores.push(-1000.0);
            }
        }
        Ok(())
    }
}

/// [`Error::Tokenizer`] for `source`.
fn err(source: &str, message: impl std::fmt::Display) -> Error {
    Error::Tokenizer {
        file: source.to_string(),
        message: message.to_string(),
    }
}

/// `"left right"` split at the first space after the first byte, as
/// llama.cpp reads a merge.
fn split_merge(merge: &str) -> Option<(String, String)> {
    // Bytes: the first character may be longer than one.
    let at = merge.as_bytes().get(1..)?.iter().position(|&b| b == b' ')? + 1;
    Some((merge[..at].to_string(), merge[at + 1..].to_string()))
}

impl Tokenizer {
    /// The tokenizer GGUF metadata describes (`source` names the file in
    /// messages): it encodes and decodes as the model's `tokenizer.json` and
    /// llama.cpp do. Control and unknown tokens become special tokens,
    /// user-defined ones added tokens (llama.cpp matches both whole before
    /// splitting text); encoding with special tokens adds BOS / EOS as
    /// `add_bos_token` / `add_eos_token` (or llama.cpp's defaults) say; the
    /// chat template comes with its special tokens. An unsupported `model`
    /// or `pre`, arrays of the wrong length, duplicate tokens or ids out of
    /// range are an [`Error::Tokenizer`] naming the key.
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

//! [`GgufVocab`]: a tokenizer as GGUF metadata holds it, and the helpers
//! every reading of it shares (errors, llama.cpp's reading of a merge).

use crate::error::{Error, Result};

/// A tokenizer as GGUF metadata holds it: each field is one key (named in
/// its doc), `None` where the key is absent. Filled by a GGUF reader and
/// turned into a [`Tokenizer`](crate::nn::Tokenizer) with
/// [`Tokenizer::from_gguf_vocab`](crate::nn::Tokenizer::from_gguf_vocab), or
/// made by [`Tokenizer::to_gguf_vocab`](crate::nn::Tokenizer::to_gguf_vocab)
/// for a GGUF writer.
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

/// [`Error::Tokenizer`](crate::Error::Tokenizer) for `source`.
pub(super) fn err(source: &str, message: impl std::fmt::Display) -> Error {
    Error::Tokenizer {
        file: source.to_string(),
        message: message.to_string(),
    }
}

/// `"left right"` split at the first space after the first byte, as
/// llama.cpp reads a merge.
pub(super) fn split_merge(merge: &str) -> Option<(String, String)> {
    // Bytes: the first character may be longer than one.
    let at = merge.as_bytes().get(1..)?.iter().position(|&b| b == b' ')? + 1;
    Some((merge[..at].to_string(), merge[at + 1..].to_string()))
}

//! A GGUF file's tokenizer metadata read into a [`GgufVocab`], and
//! [`Tokenizer::from_gguf`]: the tokenizer of a `.gguf` model file.

#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;

use super::vocab::GgufVocab;
use crate::error::Result;
#[cfg(not(target_arch = "wasm32"))]
use crate::nn::Tokenizer;
use crate::nn::gguf::GgufFile;

impl GgufVocab {
    /// The `tokenizer.*` metadata of `file`. A key of the wrong kind is an
    /// error naming the file and the key; absent keys are `None` (a
    /// missing `tokenizer.ggml.model` or `tokens` is an error, as in
    /// llama.cpp).
    pub fn from_gguf(file: &GgufFile) -> Result<GgufVocab> {
        let key = |k: &str| format!("tokenizer.ggml.{k}");
        let strings = |k: &str| -> Result<Option<Vec<String>>> {
            Ok(file
                .strings(&key(k))?
                .map(|v| v.into_iter().map(str::to_string).collect()))
        };
        Ok(GgufVocab {
            model: file.require::<&str>(&key("model"))?.to_string(),
            pre: file.string(&key("pre"))?.map(str::to_string),
            tokens: file
                .require::<Vec<&str>>(&key("tokens"))?
                .into_iter()
                .map(str::to_string)
                .collect(),
            scores: file.f32s(&key("scores"))?,
            token_types: file.i32s(&key("token_type"))?,
            merges: strings("merges")?,
            bos_token_id: file.u32(&key("bos_token_id"))?,
            eos_token_id: file.u32(&key("eos_token_id"))?,
            unknown_token_id: file.u32(&key("unknown_token_id"))?,
            padding_token_id: file.u32(&key("padding_token_id"))?,
            add_bos_token: file.bool(&key("add_bos_token"))?,
            add_eos_token: file.bool(&key("add_eos_token"))?,
            add_space_prefix: file.bool(&key("add_space_prefix"))?,
            chat_template: file.string("tokenizer.chat_template")?.map(str::to_string),
        })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Tokenizer {
    /// The tokenizer of the GGUF model file at `path`, from its metadata,
    /// with its chat template (see [`Tokenizer::from_gguf_vocab`]); the
    /// file is memory-mapped and only its header read.
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let file = GgufFile::open(path)?;
        Tokenizer::from_gguf_vocab(&GgufVocab::from_gguf(&file)?, file.name())
    }
}

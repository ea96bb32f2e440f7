//! [`Tokenizer`]: text ↔ token ids for a [`CausalLm`](crate::models::CausalLm), read from a
//! Hugging Face model directory (`tokenizer.json`, or GPT-2's `vocab.json` +
//! `merges.txt`) with Hugging Face's `tokenizers` crate, so ids match the
//! ones the checkpoint was trained with. [`TokenStream`] turns ids into text
//! one token at a time: byte-level BPE splits a multi-byte character over
//! several tokens, so text is released only once it is complete UTF-8.
//! [`Tokenizer::apply_chat_template`] renders a conversation with the
//! directory's chat template ([`ChatTemplate`]), as transformers does.

use std::path::Path;

use tokenizers::AddedToken;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use super::chat::{ChatMessage, ChatTemplate};
use super::file_limits::{FileLimits, raise, read_limited};
use super::tokenizer_scan;
use crate::error::{Error, Result};

/// The bytes of a tokenizer file, refused past `max_tokenizer_bytes`
/// before they are read.
fn read_capped(path: &Path, limits: &FileLimits) -> Result<Vec<u8>> {
    read_limited(path, limits.max_tokenizer_bytes, "max_tokenizer_bytes").map_err(|m| err(path, m))
}

/// GPT-2's end-of-text token, made special when a `vocab.json` holds it.
const END_OF_TEXT: &str = "<|endoftext|>";

/// A tokenizer: text to `i32` token ids (what [`CausalLm`](crate::models::CausalLm) takes) and
/// back.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Where it was read from, for error messages.
    source: String,
    chat: Chat,
    /// Special token ids given with the vocabulary (GGUF metadata names
    /// them; a `tokenizer.json` does not).
    special: SpecialIds,
}

/// The ids of a tokenizer's special tokens, where known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SpecialIds {
    pub(crate) bos: Option<u32>,
    pub(crate) eos: Option<u32>,
    pub(crate) unk: Option<u32>,
    pub(crate) pad: Option<u32>,
}

/// The chat template of a tokenizer, if it has one.
#[derive(Clone, Debug)]
enum Chat {
    /// None; the directory looked in, if any.
    Missing(Option<String>),
    Ready(ChatTemplate),
    /// The directory's template did not load: the error, given back by
    /// [`Tokenizer::apply_chat_template`].
    Broken {
        file: String,
        message: String,
    },
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("vocab_size", &self.vocab_size())
            .field(
                "chat_template",
                &self.chat_template().map(ChatTemplate::source),
            )
            .finish()
    }
}

/// GPT-2's pipeline around `bpe`: bytes mapped to printable characters, no
/// prefix space, GPT-2's split regex, no normaliser.
fn byte_level(bpe: BPE) -> tokenizers::Tokenizer {
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner
        .with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)))
        .with_decoder(Some(ByteLevelDecoder::default()))
        .with_post_processor(Some(ByteLevel::default().trim_offsets(false)));
    inner
}

/// [`Error::Tokenizer`] for `file`.
fn err(file: impl AsRef<Path>, message: impl std::fmt::Display) -> Error {
    Error::Tokenizer {
        file: file.as_ref().display().to_string(),
        message: message.to_string(),
    }
}

impl Tokenizer {
    /// The tokenizer of a model directory: its `tokenizer.json`, or else
    /// GPT-2's `vocab.json` + `merges.txt` (byte-level BPE); with the
    /// directory's chat template, if it has one (see [`ChatTemplate::from_dir`]).
    /// A template that does not load leaves the tokenizer usable: its error
    /// comes back from [`Tokenizer::apply_chat_template`].
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Tokenizer> {
        let dir = dir.as_ref();
        let mut tokenizer = Tokenizer::from_dir_only(dir)?;
        tokenizer.chat = match ChatTemplate::find_in_dir(dir, None) {
            Ok(Some(template)) => Chat::Ready(template),
            Ok(None) => Chat::Missing(Some(dir.display().to_string())),
            Err(Error::Tokenizer { file, message }) => Chat::Broken { file, message },
            Err(e) => Chat::Broken {
                file: dir.display().to_string(),
                message: e.to_string(),
            },
        };
        Ok(tokenizer)
    }

    fn from_dir_only(dir: &Path) -> Result<Tokenizer> {
        let json = dir.join("tokenizer.json");
        if json.is_file() {
            return Tokenizer::from_file(json);
        }
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        if vocab.is_file() && merges.is_file() {
            return Tokenizer::from_vocab_merges(vocab, merges);
        }
        Err(err(
            dir,
            "holds neither tokenizer.json nor vocab.json + merges.txt; download the tokenizer with the model, e.g. `huggingface-cli download openai-community/gpt2 config.json model.safetensors tokenizer.json --local-dir gpt2`",
        ))
    }

    /// A tokenizer from a Hugging Face `tokenizer.json`, its size, and the
    /// sizes of its vocabulary, merges and added tokens, checked against
    /// [`FileLimits`](super::FileLimits) first.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let limits = FileLimits::current();
        let bytes = read_capped(path, &limits)?;
        // Sizes and syntax first (no values kept): tokenizers' own
        // deserializers panic on some malformed files (found by tests/nn/fuzz.rs).
        tokenizer_scan::check(&bytes, &limits).map_err(|e| err(path, e))?;
        // And a panic left in them is an error, not the end of the process.
        let parsed = std::panic::catch_unwind(|| tokenizers::Tokenizer::from_bytes(&bytes))
            .map_err(|_| {
                err(
                    path,
                    "not a valid tokenizer.json (the tokenizers crate panicked on it)",
                )
            })?;
        let inner = parsed.map_err(|e| err(path, format!("not a valid tokenizer.json: {e}")))?;
        Tokenizer::checked(inner, path.display().to_string())
    }

    /// GPT-2's byte-level BPE from `vocab.json` (token → id) and `merges.txt`
    /// (one merge per line, most frequent first), as `GPT2TokenizerFast`
    /// builds it: no prefix space, `<|endoftext|>` special if the vocabulary
    /// has it.
    pub fn from_vocab_merges(
        vocab: impl AsRef<Path>,
        merges: impl AsRef<Path>,
    ) -> Result<Tokenizer> {
        let (vocab, merges) = (vocab.as_ref(), merges.as_ref());
        for file in [vocab, merges] {
            if !file.is_file() {
                return Err(err(file, "not found"));
            }
        }
        let limits = FileLimits::current();
        let texts = [read_capped(vocab, &limits)?, read_capped(merges, &limits)?];
        tokenizer_scan::check_vocab_merges(&texts[0], &texts[1], &limits)
            .map_err(|e| err(vocab.parent().unwrap_or(vocab), e))?;
        drop(texts);
        let (v, m) = (vocab.to_string_lossy(), merges.to_string_lossy());
        let (vocab_map, merge_list) = BPE::read_file(&v, &m).map_err(|e| {
            err(
                format!("{} + {}", vocab.display(), merges.display()),
                format!("not a GPT-2 vocab.json + merges.txt pair: {e}"),
            )
        })?;
        let has_eot = vocab_map.contains_key(END_OF_TEXT);
        let bpe = BPE::builder()
            .vocab_and_merges(vocab_map, merge_list)
            .build()
            .map_err(|e| err(merges, format!("does not fit {}: {e}", vocab.display())))?;
        let mut inner = byte_level(bpe);
        if has_eot {
            inner
                .add_special_tokens([AddedToken::from(END_OF_TEXT, true)])
                .map_err(|e| err(vocab, e))?;
        }
        Tokenizer::checked(inner, vocab.display().to_string())
    }

    /// Learns a GPT-2-style byte-level BPE of `vocab_size` tokens from
    /// `texts` (any byte sequence stays encodable: the 256 byte tokens are
    /// always in the vocabulary). `special` tokens come first, e.g.
    /// `["<|endoftext|>"]`.
    pub fn train_byte_level_bpe(
        texts: &[&str],
        vocab_size: usize,
        special: &[&str],
    ) -> Result<Tokenizer> {
        const SOURCE: &str = "<training>";
        let alphabet = ByteLevel::alphabet();
        if vocab_size < alphabet.len() + special.len() {
            return Err(Error::invalid(
                "Tokenizer::train_byte_level_bpe",
                format!(
                    "vocab_size {vocab_size} is below the {} byte tokens + {} special tokens a byte-level BPE needs",
                    alphabet.len(),
                    special.len()
                ),
            ));
        }
        let trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(alphabet.into_iter().collect())
            .special_tokens(special.iter().map(|s| AddedToken::from(*s, true)).collect())
            .build();
        let mut inner = byte_level(BPE::default());
        inner
            .train(&mut TrainerWrapper::BpeTrainer(trainer), texts.iter())
            .map_err(|e| err(SOURCE, e))?;
        Tokenizer::checked(inner, SOURCE.to_string())
    }

    /// Refuses tokenizers whose ids would not fit an `i32`.
    pub(crate) fn checked(inner: tokenizers::Tokenizer, source: String) -> Result<Tokenizer> {
        // Padding allocates its length for every encoding.
        let limits = FileLimits::current();
        if let Some(p) = inner.get_padding() {
            let fixed = match p.strategy {
                tokenizers::PaddingStrategy::Fixed(n) => n,
                tokenizers::PaddingStrategy::BatchLongest => 0,
            };
            let length = fixed.max(p.pad_to_multiple_of.unwrap_or(0));
            if p.pad_token.len() > limits.max_token_bytes {
                return Err(err(
                    &source,
                    format!(
                        "padding.pad_token is {} bytes ({})",
                        p.pad_token.len(),
                        raise("max_token_bytes", limits.max_token_bytes)
                    ),
                ));
            }
            if length > limits.max_padding {
                return Err(err(
                    &source,
                    format!(
                        "pads every encoding to {length} tokens ({})",
                        raise("max_padding", limits.max_padding)
                    ),
                ));
            }
        }
        let max_id = inner.get_vocab(true).into_values().max();
        if max_id.is_some_and(|id| i32::try_from(id).is_err()) {
            return Err(err(&source, "has token ids beyond i32::MAX"));
        }
        if max_id.is_none() {
            return Err(err(&source, "has an empty vocabulary"));
        }
        Ok(Tokenizer {
            inner,
            source,
            chat: Chat::Missing(None),
            special: SpecialIds::default(),
        })
    }

    /// The `tokenizers` tokenizer inside.
    pub(crate) fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// This tokenizer with known special token ids.
    pub(crate) fn with_special_ids(mut self, special: SpecialIds) -> Tokenizer {
        self.special = special;
        self
    }

    /// The special token ids given with the vocabulary.
    pub(crate) fn special_ids(&self) -> SpecialIds {
        self.special
    }

    /// This tokenizer with `template`, or, if it did not load, its error
    /// kept for [`Tokenizer::apply_chat_template`] (as [`Tokenizer::from_dir`] does).
    pub(crate) fn with_chat_result(mut self, template: Result<ChatTemplate>) -> Tokenizer {
        self.chat = match template {
            Ok(template) => Chat::Ready(template),
            Err(Error::Tokenizer { file, message }) => Chat::Broken { file, message },
            Err(e) => Chat::Broken {
                file: self.source.clone(),
                message: e.to_string(),
            },
        };
        self
    }

    /// The chat template if there is one; its load error if it did not load.
    pub(crate) fn chat_state(&self) -> Result<Option<&ChatTemplate>> {
        match &self.chat {
            Chat::Ready(template) => Ok(Some(template)),
            Chat::Broken { file, message } => Err(err(file, message)),
            Chat::Missing(_) => Ok(None),
        }
    }

    /// This tokenizer with `template` as its chat template (replacing any).
    pub fn with_chat_template(mut self, template: ChatTemplate) -> Tokenizer {
        self.chat = Chat::Ready(template);
        self
    }

    /// The chat template, if the tokenizer has one that loaded.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        match &self.chat {
            Chat::Ready(template) => Some(template),
            _ => None,
        }
    }

    /// `messages` rendered with the chat template, as transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)`
    /// renders them (see [`ChatTemplate::render`]); encode the result with
    /// [`Tokenizer::encode`]. A tokenizer with no template is an
    /// [`Error::Tokenizer`] saying how to add one.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String> {
        self.apply_chat_template_with(messages, add_generation_prompt, &())
    }

    /// [`Tokenizer::apply_chat_template`] with extra template variables (see
    /// [`ChatTemplate::render_with`]), e.g. `{"date_string": "26 Jul 2024"}`.
    pub fn apply_chat_template_with<E: serde::Serialize + ?Sized>(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &E,
    ) -> Result<String> {
        match &self.chat {
            Chat::Ready(template) => template.render_with(messages, add_generation_prompt, extra),
            Chat::Broken { file, message } => Err(err(file, message)),
            Chat::Missing(dir) => Err(err(
                dir.as_deref().unwrap_or(&self.source),
                super::chat::NO_TEMPLATE,
            )),
        }
    }

    /// Writes `tokenizer.json` (Hugging Face's format) to `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        self.inner
            .save(path, true)
            .map_err(|e| err(path, format!("could not write: {e}")))
    }

    /// Where the tokenizer was read from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Number of tokens, added (special) tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of one token given as its vocabulary string (e.g.
    /// `"<|endoftext|>"`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<i32> {
        self.inner
            .token_to_id(token)
            .and_then(|id| i32::try_from(id).ok())
    }

    /// The ids of `text`, special tokens in it (e.g. `<|endoftext|>`)
    /// included; no template tokens (BOS / EOS) are added.
    pub fn encode(&self, text: &str) -> Result<Vec<i32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| err(&self.source, format!("could not encode: {e}")))?;
        encoding
            .get_ids()
            .iter()
            .map(|&id| i32::try_from(id).map_err(|_| err(&self.source, "id beyond i32::MAX")))
            .collect()
    }

    /// The text of `ids` (special tokens kept). An id the vocabulary does not
    /// have is an [`Error::OutOfRange`].
    pub fn decode(&self, ids: &[i32]) -> Result<String> {
        let ids = self.known("Tokenizer::decode", ids)?;
        self.decode_known(&ids)
    }

    fn decode_known(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, false)
            .map_err(|e| err(&self.source, format!("could not decode: {e}")))
    }

    /// `ids` as `u32`, each checked against the vocabulary (the `tokenizers`
    /// crate would silently drop unknown ones).
    fn known(&self, op: &'static str, ids: &[i32]) -> Result<Vec<u32>> {
        ids.iter()
            .map(|&id| {
                u32::try_from(id)
                    .ok()
                    .filter(|&u| self.inner.id_to_token(u).is_some())
                    .ok_or_else(|| Error::OutOfRange {
                        op,
                        what: "token id",
                        value: id as i64,
                        bound: self.vocab_size(),
                    })
            })
            .collect()
    }

    /// A decoder that takes one id at a time and gives the text each one
    /// completes.
    pub fn stream(&self) -> TokenStream<'_> {
        TokenStream {
            tokenizer: self,
            ids: Vec::new(),
            context: 0,
            prefix: String::new(),
        }
    }
}

/// Turns ids into text incrementally (from [`Tokenizer::stream`]). Text is
/// released only when it is complete: a token holding the first bytes of a
/// multi-byte character gives `None`, the token that completes it gives the
/// character. The concatenated pieces (and [`TokenStream::finish`]) equal
/// [`Tokenizer::decode`] of all ids — except where the decoder would
/// rewrite text already released (a run of byte tokens that is not UTF-8
/// decodes as U+FFFD throughout, its first bytes released as characters
/// included): there the pending ids are decoded alone, as llama.cpp
/// streams them.
#[derive(Debug)]
pub struct TokenStream<'a> {
    tokenizer: &'a Tokenizer,
    /// The ids of the last released piece (context for decoders that look
    /// at neighbours), then those not yet released.
    ids: Vec<u32>,
    /// How many of `ids` are context.
    context: usize,
    /// The text of the context ids, already released.
    prefix: String,
}

impl TokenStream<'_> {
    /// Adds one id; returns the new text if it is complete UTF-8. An error
    /// (an unknown id) leaves the stream as it was.
    pub fn push(&mut self, id: i32) -> Result<Option<String>> {
        let known = self.tokenizer.known("TokenStream::push", &[id])?[0];
        let mut ids = self.ids.clone();
        ids.push(known);
        let text = self.tokenizer.decode_known(&ids)?;
        // The text is complete when it does not end in an unfinished
        // character (decoded as U+FFFD).
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            self.ids = ids;
            return Ok(None);
        }
        let Some(new) = text.strip_prefix(self.prefix.as_str()) else {
            // The decoder rewrote text already released (byte fallback
            // turns a whole run of bytes that is not UTF-8 into U+FFFD,
            // bytes released as characters included): what is pending is
            // decoded alone, as llama.cpp streams it.
            let alone = self.tokenizer.decode_known(&ids[self.context..])?;
            if alone.is_empty() || alone.ends_with('\u{FFFD}') {
                self.ids = ids;
                return Ok(None);
            }
            self.ids = ids.split_off(self.context);
            self.context = self.ids.len();
            self.prefix = alone.clone();
            return Ok(Some(alone));
        };
        let new = new.to_string();
        // The tokens of the piece just released become the context of the
        // next (decoders may strip or join at token boundaries).
        let prefix = self.tokenizer.decode_known(&ids[self.context..])?;
        self.ids = ids.split_off(self.context);
        self.context = self.ids.len();
        self.prefix = prefix;
        Ok(Some(new))
    }

    /// The text still held back (an unfinished character at the end, as
    /// U+FFFD), if any; call it once after the last id.
    pub fn finish(self) -> Result<Option<String>> {
        let text = self.tokenizer.decode_known(&self.ids)?;
        let rest = match text.strip_prefix(self.prefix.as_str()) {
            Some(rest) => rest.to_string(),
            // As in `push`: the decoder rewrote released text.
            None => self.tokenizer.decode_known(&self.ids[self.context..])?,
        };
        Ok(Some(rest).filter(|rest| !rest.is_empty()))
    }
}

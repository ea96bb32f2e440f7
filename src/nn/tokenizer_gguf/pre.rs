//! llama.cpp's byte-level pre-tokenizers (`tokenizer.ggml.pre`) as the
//! `tokenizers` pipelines of the models' own `tokenizer.json`, both ways:
//! the pipeline a name stands for, and the name of a pipeline.
//!
//! Each regex list of `llm_tokenizer_bpe` (llama.cpp `src/llama-vocab.cpp`)
//! splits text as the listed `tokenizer.json` pre-tokenizer does; only these
//! are supported, since anything else would tokenize differently somewhere.

use serde_json::Value;
use tokenizers::normalizers::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

/// Llama 3's split regex as its `tokenizer.json` writes it (llama.cpp spells
/// out the `(?i:...)` by hand, to the same effect).
pub(super) const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's: Llama 3's with single digits.
pub(super) const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A supported `tokenizer.ggml.pre`, by what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pre {
    /// GPT-2's regex (`ByteLevel` with its built-in regex).
    Gpt2,
    /// Llama 3's regex, whole words in the vocabulary taken as they are.
    Llama3,
    /// Llama 3's regex with merges always applied (DBRX, Smaug).
    Smaug,
    /// Qwen2's regex after NFC.
    Qwen2,
    /// Digits split one by one, then GPT-2's regex (StarCoder, SmolLM).
    SmolLm,
}

/// The names llama.cpp accepts for each, the one the converter writes first.
const NAMES: [(Pre, &[&str]); 5] = [
    (Pre::Gpt2, &["gpt-2", "phi-2"]),
    (Pre::Llama3, &["llama-bpe", "llama3", "llama-v3"]),
    (Pre::Smaug, &["smaug-bpe", "dbrx"]),
    (Pre::Qwen2, &["qwen2"]),
    (Pre::SmolLm, &["smollm", "starcoder"]),
];

impl Pre {
    /// The pre-tokenizer llama.cpp calls `name`, if supported.
    pub(super) fn from_name(name: &str) -> Option<Pre> {
        NAMES
            .iter()
            .find(|(_, names)| names.contains(&name))
            .map(|(pre, _)| *pre)
    }

    /// The name written for it.
    pub(super) fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("", |(_, n)| n[0])
    }

    /// Every supported name, for messages.
    pub(super) fn all_names() -> String {
        NAMES
            .iter()
            .flat_map(|(_, names)| names.iter())
            .copied()
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// llama.cpp's `ignore_merges` for it.
    pub(super) fn ignore_merges(self) -> bool {
        self == Pre::Llama3
    }

    /// llama.cpp's `add_bos` when `tokenizer.ggml.add_bos_token` is absent.
    pub(super) fn adds_bos(self) -> bool {
        self == Pre::Llama3
    }

    /// The normaliser of the model's `tokenizer.json` (Qwen's NFC, which
    /// llama.cpp leaves out).
    pub(super) fn normalizer(self) -> Option<NormalizerWrapper> {
        (self == Pre::Qwen2).then(|| NFC.into())
    }

    /// The pre-tokenizer of the model's `tokenizer.json`.
    pub(super) fn pre_tokenizer(self) -> tokenizers::Result<PreTokenizerWrapper> {
        let split = |regex: &str| -> tokenizers::Result<PreTokenizerWrapper> {
            Ok(Split::new(
                SplitPattern::Regex(regex.to_string()),
                SplitDelimiterBehavior::Isolated,
                false,
            )?
            .into())
        };
        Ok(match self {
            Pre::Gpt2 => ByteLevel::new(false, true, true).into(),
            Pre::Llama3 | Pre::Smaug => Sequence::new(vec![
                split(LLAMA3_REGEX)?,
                ByteLevel::new(false, true, false).into(),
            ])
            .into(),
            Pre::Qwen2 => Sequence::new(vec![
                split(QWEN2_REGEX)?,
                ByteLevel::new(false, false, false).into(),
            ])
            .into(),
            Pre::SmolLm => Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
        })
    }

    /// Which one a `tokenizer.json` (as JSON) splits text like, or why none.
    pub(super) fn recognize(tokenizer: &Value) -> Result<Pre, String> {
        let pre = &tokenizer["pre_tokenizer"];
        let parts: Vec<&Value> = match pre["type"].as_str() {
            Some("Sequence") => pre["pretokenizers"]
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default(),
            _ => vec![pre],
        };
        let ignore_merges = tokenizer["model"]["ignore_merges"].as_bool() == Some(true);
        let found = match parts.as_slice() {
            [b] if byte_level(b, true) => Some(Pre::Gpt2),
            [s, b] if byte_level(b, false) => match split_regex(s) {
                Some(LLAMA3_REGEX) if ignore_merges => Some(Pre::Llama3),
                Some(LLAMA3_REGEX) => Some(Pre::Smaug),
                Some(QWEN2_REGEX) => Some(Pre::Qwen2),
                _ => None,
            },
            [d, b] if byte_level(b, true) && d["type"] == "Digits" => {
                (d["individual_digits"] == true).then_some(Pre::SmolLm)
            }
            _ => None,
        };
        let Some(found) = found else {
            return Err(format!(
                "its pre-tokenizer {pre} is none of the ones llama.cpp has ({}: GPT-2's ByteLevel, Llama 3's or Qwen2's Split + ByteLevel, Digits + ByteLevel)",
                Pre::all_names()
            ));
        };
        if ignore_merges != found.ignore_merges() {
            return Err(format!(
                "its BPE has ignore_merges {ignore_merges}, which llama.cpp's {:?} does not",
                found.name()
            ));
        }
        let normalizer = &tokenizer["normalizer"];
        let nfc = normalizer["type"] == "NFC"
            || (normalizer["type"] == "Sequence"
                && normalizer["normalizers"]
                    .as_array()
                    .is_some_and(|n| n.len() == 1 && n[0]["type"] == "NFC"));
        if !(normalizer.is_null() || (nfc && found == Pre::Qwen2)) {
            return Err(format!(
                "its normaliser {normalizer} has no llama.cpp equivalent for pre-tokenizer {:?}",
                found.name()
            ));
        }
        Ok(found)
    }
}

/// Whether `v` is a `ByteLevel` without prefix space and with (or without)
/// GPT-2's regex.
fn byte_level(v: &Value, use_regex: bool) -> bool {
    v["type"] == "ByteLevel" && v["add_prefix_space"] == false && v["use_regex"] == use_regex
}

/// The regex of an isolating, non-inverted `Split`.
fn split_regex(v: &Value) -> Option<&str> {
    (v["type"] == "Split" && v["behavior"] == "Isolated" && v["invert"] == false)
        .then(|| v["pattern"]["Regex"].as_str())
        .flatten()
}

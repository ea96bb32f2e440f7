//! Supervised fine-tuning data, as TRL's `SFTTrainer` takes it: JSONL
//! records of `{"messages": [...]}` (rendered with the model's chat
//! template; the loss on the assistant's tokens only, TRL's
//! `assistant_only_loss`) or `{"text": ...}` (every token trained), packed
//! into fixed-length sequences after a seeded shuffle, with a held-out
//! split. Targets not trained are `-100`, which
//! [`Decoder::loss`](crate::nn::Decoder::loss) ignores.

use std::path::Path;

use serde_json::Value;

use super::chat::ChatMessage;
use super::tokenizer::Tokenizer;
use crate::error::{Error, Result};

/// The target of a position the loss ignores (transformers' `-100`).
pub const IGNORE: i32 = -100;

/// One training record.
#[derive(Clone, Debug, PartialEq)]
pub enum SftExample {
    /// A conversation, rendered with the chat template.
    Chat(Vec<ChatMessage>),
    /// Plain text.
    Text(String),
}

fn bad(source: &str, line: usize, message: impl std::fmt::Display) -> Error {
    Error::invalid("sft", format!("{source}: line {line}: {message}"))
}

/// Parse JSONL `text` (named `source` in errors): one record per non-empty
/// line, `{"messages": [{"role": ..., "content": ...}, ...]}` or
/// `{"text": "..."}`. A malformed line is an error naming its number; no
/// record is returned then.
pub fn parse_jsonl(text: &str, source: &str) -> Result<Vec<SftExample>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(line).map_err(|e| bad(source, n, format!("not JSON ({e})")))?;
        let Value::Object(obj) = v else {
            return Err(bad(source, n, "a record is a JSON object"));
        };
        match (obj.get("messages"), obj.get("text")) {
            (Some(Value::Array(list)), None) => {
                if list.is_empty() {
                    return Err(bad(source, n, "\"messages\" is empty"));
                }
                let messages = list
                    .iter()
                    .enumerate()
                    .map(|(j, m)| {
                        serde_json::from_value::<ChatMessage>(m.clone())
                            .map_err(|e| bad(source, n, format!("messages[{j}]: {e}")))
                    })
                    .collect::<Result<Vec<_>>>()?;
                out.push(SftExample::Chat(messages));
            }
            (None, Some(Value::String(t))) => out.push(SftExample::Text(t.clone())),
            (Some(_), None) => return Err(bad(source, n, "\"messages\" must be a list")),
            (None, Some(_)) => return Err(bad(source, n, "\"text\" must be a string")),
            (Some(_), Some(_)) => {
                return Err(bad(source, n, "give \"messages\" or \"text\", not both"));
            }
            (None, None) => return Err(bad(source, n, "a record needs \"messages\" or \"text\"")),
        }
    }
    if out.is_empty() {
        return Err(Error::invalid("sft", format!("{source}: no records")));
    }
    Ok(out)
}

/// [`parse_jsonl`] of the file at `path` (at most
/// [`FileLimits::max_jsonl_bytes`](crate::nn::FileLimits::max_jsonl_bytes)).
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<SftExample>> {
    let path = path.as_ref();
    let source = path.display().to_string();
    let max = crate::nn::FileLimits::current().max_jsonl_bytes;
    let text = crate::nn::file_limits::read_text_limited(path, max, "max_jsonl_bytes")
        .map_err(|m| Error::invalid("sft", format!("{source}: {m}; split the file")))?;
    parse_jsonl(&text, &source)
}

/// A record's tokens and which of them the loss trains on.
#[derive(Clone, Debug, PartialEq)]
pub struct Tokenized {
    /// Token ids.
    pub ids: Vec<i32>,
    /// Whether each token is a target the loss counts.
    pub trained: Vec<bool>,
}

impl Tokenized {
    fn push(&mut self, ids: Vec<i32>, trained: bool) {
        self.trained.extend(std::iter::repeat_n(trained, ids.len()));
        self.ids.extend(ids);
    }
}

/// `example`'s tokens: a conversation rendered with `tok`'s chat template,
/// the assistant messages' tokens (their content and what the template
/// closes them with) trained and the rest not when `assistant_only`; text
/// with `eos` appended, every token trained. A template that does not
/// render a conversation as the concatenation of its turns (one that
/// rewrites earlier turns) is an error with `assistant_only`.
pub fn tokenize(
    tok: &Tokenizer,
    example: &SftExample,
    assistant_only: bool,
    eos: Option<i32>,
) -> Result<Tokenized> {
    let mut out = Tokenized {
        ids: Vec::new(),
        trained: Vec::new(),
    };
    match example {
        SftExample::Text(t) => {
            out.push(tok.encode(t)?, true);
            if let Some(e) = eos {
                out.push(vec![e], true);
            }
        }
        SftExample::Chat(messages) if !assistant_only => {
            out.push(
                tok.encode(&tok.apply_chat_template(messages, false)?)?,
                true,
            );
        }
        SftExample::Chat(messages) => {
            let mut done = String::new();
            for (i, m) in messages.iter().enumerate() {
                let assistant = m.role == "assistant";
                if assistant {
                    let before = tok.apply_chat_template(&messages[..i], true)?;
                    out.push(tok.encode(suffix(&before, &done)?)?, false);
                    done = before;
                }
                let after = tok.apply_chat_template(&messages[..=i], false)?;
                out.push(tok.encode(suffix(&after, &done)?)?, assistant);
                done = after;
            }
        }
    }
    Ok(out)
}

/// What `text` adds to `prefix`, which it must start with.
fn suffix<'a>(text: &'a str, prefix: &str) -> Result<&'a str> {
    text.strip_prefix(prefix).ok_or_else(|| {
        Error::invalid(
            "sft::tokenize",
            "the chat template renders earlier turns differently once later ones follow, so the \
             assistant's tokens cannot be told apart: train on every token (assistant_only = false)",
        )
    })
}

/// Sequences of `seq` inputs and their next-token targets ([`IGNORE`]
/// where not trained), cut from the records concatenated in order (TRL's
/// packing); the tail shorter than a sequence is dropped. An error when
/// the records hold less than one sequence.
pub fn pack(records: &[Tokenized], seq: usize) -> Result<Vec<(Vec<i32>, Vec<i32>)>> {
    if seq == 0 {
        return Err(Error::invalid("sft::pack", "seq must be at least 1"));
    }
    let ids: Vec<i32> = records.iter().flat_map(|r| r.ids.iter().copied()).collect();
    let trained: Vec<bool> = records
        .iter()
        .flat_map(|r| r.trained.iter().copied())
        .collect();
    if ids.len() < seq + 1 {
        return Err(Error::invalid(
            "sft::pack",
            format!(
                "the data holds {} tokens, less than one sequence of {seq} and its next token: \
                 add records or shorten --seq",
                ids.len()
            ),
        ));
    }
    let mut out = Vec::new();
    let mut start = 0;
    while start + seq < ids.len() {
        let inputs = ids[start..start + seq].to_vec();
        let targets = (start + 1..start + seq + 1)
            .map(|j| if trained[j] { ids[j] } else { IGNORE })
            .collect();
        out.push((inputs, targets));
        start += seq;
    }
    Ok(out)
}

/// `items` in an order drawn from `seed` (Fisher–Yates over SplitMix64):
/// the same on every machine.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..items.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

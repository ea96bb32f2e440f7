//! The sizes in a `tokenizer.json`, read before `tokenizers` builds
//! anything from it. `tokenizers` keeps every entry in several hash maps
//! and an added token in automata many times its size (a 100 MB added token
//! took 7 GB and 7 s to load, twelve million tiny vocabulary entries 3.3 GB),
//! so the vocabulary, merges and added tokens are counted and measured here
//! first, in one pass that keeps no values, against [`FileLimits`]. The same
//! pass checks the JSON (syntax, escapes, nesting past serde_json's 128
//! levels), which `tokenizers` deserializers may panic on.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::file_limits::{FileLimits, raise};

/// Checks `bytes`, a `tokenizer.json`, against `limits`: `Err` says which
/// field is past which limit, or where the JSON is broken.
pub(crate) fn check(bytes: &[u8], limits: &FileLimits) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let values = Cell::new(0);
    Scan {
        limits,
        what: What::Top,
        field: "tokenizer.json",
        values: &values,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end())
    .map_err(|e| {
        if e.is_data() {
            e.to_string()
        } else {
            format!("not valid JSON: {e}")
        }
    })
}

/// Checks GPT-2's `vocab.json` (`{token: id}`) and `merges.txt` (a merge
/// a line) against `limits`.
pub(crate) fn check_vocab_merges(
    vocab: &[u8],
    merges: &[u8],
    limits: &FileLimits,
) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_slice(vocab);
    let values = Cell::new(0);
    Scan {
        limits,
        what: What::Vocab,
        field: "vocab.json",
        values: &values,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end())
    .map_err(|e| format!("vocab.json: {e}"))?;
    let lines = merges.split(|&b| b == b'\n');
    let longest = 2 * limits.max_token_bytes.saturating_add(1);
    for (i, line) in lines.enumerate() {
        // Beside the merges: a `#version` line and a last empty one.
        if i > limits.max_merges.saturating_add(1) {
            return Err(format!(
                "merges.txt: more than {} merges ({})",
                limits.max_merges,
                raise("max_merges", limits.max_merges)
            ));
        }
        if line.len() > longest {
            return Err(format!(
                "merges.txt: line {} is {} bytes ({})",
                i + 1,
                line.len(),
                raise("max_token_bytes", limits.max_token_bytes)
            ));
        }
    }
    Ok(())
}

/// Which part of the file a [`Scan`] reads.
#[derive(Clone, Copy, PartialEq)]
enum What {
    /// The whole object: `model` and `added_tokens` are scanned.
    Top,
    /// `model`: `vocab` and `merges` are scanned.
    Model,
    /// `model.vocab`: `{token: id}` or Unigram's `[[token, score]]`.
    Vocab,
    /// One `[token, score]` of a Unigram vocabulary.
    Piece,
    /// `model.merges`: `["a b"]` or `[["a", "b"]]`.
    Merges,
    /// One merge as a pair.
    Pair,
    /// `added_tokens`: `[{"id": .., "content": ..}]`.
    Added,
    /// One added token.
    AddedToken,
    /// A token's text.
    Token,
    /// A token id.
    Id,
    /// Anything else (kept by no one, checked by `tokenizers`).
    Other,
}

/// Reads one part of the file (a [`DeserializeSeed`], so that every part
/// sees the limits). A part of an unexpected type is passed over:
/// `tokenizers` reports it.
#[derive(Clone, Copy)]
struct Scan<'l> {
    limits: &'l FileLimits,
    what: What,
    /// The field read, for errors.
    field: &'static str,
    /// Values read so far, in the whole file.
    values: &'l Cell<u64>,
}

impl<'l> Scan<'l> {
    fn of(self, what: What) -> Scan<'l> {
        let field = match what {
            What::Vocab => "model.vocab",
            What::Merges => "model.merges",
            What::Added => "added_tokens",
            _ => self.field,
        };
        Scan {
            what,
            field,
            ..self
        }
    }

    /// `what` in this field is past `limit` (a [`FileLimits`] field).
    fn over<E: de::Error>(&self, what: &str, limit: &str, value: impl fmt::Display) -> E {
        E::custom(format!("{}: {what} ({})", self.field, raise(limit, value)))
    }
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let n = self.values.get() + 1;
        self.values.set(n);
        if n > self.limits.max_json_values {
            let max = self.limits.max_json_values;
            return Err(self.over(
                &format!("more than {max} JSON values in the file"),
                "max_json_values",
                max,
            ));
        }
        // Every value is read, not skipped: skipping leaves escapes
        // undecoded, and `tokenizers` panicked on a lone surrogate (`\ud800`)
        // in its decoder (found by tests/nn/fuzz.rs).
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tokenizer.json")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut entries = 0usize;
        while let Some(key) = map.next_key_seed(Key(self))? {
            let next = match (self.what, key.as_deref()) {
                (What::Top, Some("model")) => What::Model,
                (What::Top, Some("added_tokens")) => What::Added,
                (What::Model, Some("vocab")) => What::Vocab,
                (What::Model, Some("merges")) => What::Merges,
                (What::AddedToken, Some("content")) => What::Token,
                (What::AddedToken, Some("id")) => What::Id,
                (What::Vocab, _) => What::Id,
                _ => What::Other,
            };
            if self.what == What::Vocab {
                entries += 1;
                if entries > self.limits.max_vocab {
                    return Err(self.over(
                        &format!("more than {} entries", self.limits.max_vocab),
                        "max_vocab",
                        self.limits.max_vocab,
                    ));
                }
            }
            map.next_value_seed(self.of(next))?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (item, max, field) = match self.what {
            What::Vocab => (What::Piece, self.limits.max_vocab, "max_vocab"),
            What::Merges => (What::Pair, self.limits.max_merges, "max_merges"),
            What::Added => (
                What::AddedToken,
                self.limits.max_added_tokens,
                "max_added_tokens",
            ),
            What::Piece | What::Pair => (What::Token, usize::MAX, ""),
            _ => (What::Other, usize::MAX, ""),
        };
        let mut n = 0usize;
        loop {
            // A Unigram piece is `[token, score]`: only the token is one.
            let part = if self.what == What::Piece && n > 0 {
                What::Other
            } else {
                item
            };
            if seq.next_element_seed(self.of(part))?.is_none() {
                return Ok(());
            }
            n += 1;
            if n > max {
                return Err(self.over(&format!("more than {max} entries"), field, max));
            }
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let max = self.limits.max_token_bytes;
        // A merge `"a b"` holds two tokens.
        let max = if self.what == What::Merges || self.what == What::Pair {
            max.saturating_mul(2).saturating_add(1)
        } else {
            max
        };
        if matches!(self.what, What::Token | What::Merges | What::Pair) && v.len() > max {
            return Err(self.over(
                &format!("a token of {} bytes", v.len()),
                "max_token_bytes",
                self.limits.max_token_bytes,
            ));
        }
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        if self.what == What::Id && v > self.limits.max_token_id {
            return Err(self.over(
                &format!("token id {v}"),
                "max_token_id",
                self.limits.max_token_id,
            ));
        }
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// A map's key: its text if short (the names looked for), else `None`;
/// inside a vocabulary, a token, measured.
struct Key<'l>(Scan<'l>);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<String>, E> {
        if self.0.what == What::Vocab {
            self.0.of(What::Token).visit_str::<E>(v)?;
            return Ok(None);
        }
        Ok((v.len() <= 16).then(|| v.to_string()))
    }
}

//! [`Tokenizer::to_gguf_vocab`]: what llama.cpp's `convert_hf_to_gguf.py`
//! writes for a `tokenizer.json`, read from the tokenizer's own JSON.

use std::collections::HashMap;

use serde_json::Value;
use tokenizers::AddedToken;

use super::pre::Pre;
use super::spm;
use super::vocab::{GgufVocab, err, split_merge};
use crate::error::Result;
use crate::nn::Tokenizer;

/// Whether the converter takes an added token for a control token although
/// it is not marked special (`ModelBase.does_token_look_special`).
fn looks_special(text: &str) -> bool {
    matches!(text, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (text.starts_with("<|") && text.ends_with("|>"))
        || (text.starts_with("<｜") && text.ends_with("｜>"))
        || (text.starts_with("<unused") && text.ends_with('>'))
}

/// Whether `text` is a SentencePiece byte piece, `<0x0A>`.
fn is_byte_piece(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 6
        && text.starts_with("<0x")
        && b[5] == b'>'
        && b[3..5].iter().all(u8::is_ascii_hexdigit)
}

/// The merges of a BPE model's JSON, either `[left, right]` pairs or
/// `"left right"` strings.
fn merges(model: &Value) -> Option<Vec<(String, String)>> {
    let pair = |m: &Value| match m {
        Value::Array(p) if p.len() == 2 => {
            Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string()))
        }
        Value::String(s) => split_merge(s),
        _ => None,
    };
    model["merges"].as_array()?.iter().map(pair).collect()
}

/// The special tokens a `TemplateProcessing` (possibly inside a
/// `Sequence`) puts before and after a single sequence (none without one),
/// and an error for anything else around `$A`.
fn template_ends(json: &Value) -> Result<(Option<u32>, Option<u32>), String> {
    let post = &json["post_processor"];
    let all: Vec<&Value> = match post["type"].as_str() {
        Some("Sequence") => post["processors"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
        _ => vec![post],
    };
    let Some(template) = all.iter().find(|p| p["type"] == "TemplateProcessing") else {
        return Ok((None, None));
    };
    let single = template["single"].as_array().cloned().unwrap_or_default();
    let id = |piece: Option<&Value>| -> Option<u32> {
        let name = piece?["SpecialToken"]["id"].as_str()?;
        let ids = template["special_tokens"][name]["ids"].as_array()?;
        (ids.len() == 1)
            .then(|| ids[0].as_u64().and_then(|i| u32::try_from(i).ok()))
            .flatten()
    };
    let is_a = |p: &Value| p["Sequence"]["id"] == "A";
    match single.iter().position(is_a) {
        Some(a) if a <= 1 && single.len() - a <= 2 => {
            let bos = (a == 1).then(|| id(single.first())).flatten();
            let eos = (a + 2 == single.len()).then(|| id(single.last())).flatten();
            if (a == 1 && bos.is_none()) || (a + 2 == single.len() && eos.is_none()) {
                return Err("its post-processor adds a special token of several ids".into());
            }
            Ok((bos, eos))
        }
        _ => Err(format!(
            "its post-processor template {single:?} is not [BOS] $A [EOS], all llama.cpp can add"
        )),
    }
}

impl Tokenizer {
    /// The GGUF tokenizer metadata of this tokenizer, as llama.cpp's
    /// `convert_hf_to_gguf.py` writes it for the model's `tokenizer.json`,
    /// so llama.cpp tokenizes as this tokenizer does: tokens (ids without
    /// a token as `[PAD{id}]`, unused), their types, the merges (byte-level
    /// BPE) or scores ranking the merges (SentencePiece BPE, where they come
    /// out as the SentencePiece model's own), the `pre` name, special ids,
    /// `add_bos_token` / `add_eos_token` and the chat template. Scores of
    /// another vocabulary keep their order, not their values.
    ///
    /// Special ids come from the GGUF metadata the tokenizer was built from,
    /// else from the chat template's special tokens (`tokenizer_config.json`),
    /// else from the post-processor; the converter also reads `config.json`'s
    /// `bos_token_id` / `eos_token_id`, so a writer with the model's config
    /// should fill in any left `None` (and [`GgufVocab::pad_to`] its vocabulary
    /// size). A tokenizer llama.cpp cannot reproduce (another model type or
    /// pre-tokenizer, a normaliser, stripping added tokens, Metaspace) is an
    /// [`Error::Tokenizer`](crate::error::Error::Tokenizer) saying why.
    pub fn to_gguf_vocab(&self) -> Result<GgufVocab> {
        let fail = |why: String| {
            err(
                self.source(),
                format!("cannot be written as GGUF tokenizer metadata: {why}"),
            )
        };
        let inner = self.inner();
        let text = inner.to_string(false).map_err(|e| fail(e.to_string()))?;
        let json: Value = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        let model = &json["model"];
        if model["type"] != "BPE" {
            return Err(fail(format!(
                "its model is {}, not the BPE of llama.cpp's gpt2 and llama vocabularies",
                model["type"]
            )));
        }
        let affix = |key: &str| model[key].as_str().is_some_and(|s| !s.is_empty());
        if !model["dropout"].is_null()
            || affix("continuing_subword_prefix")
            || affix("end_of_word_suffix")
        {
            return Err(fail(
                "its BPE has dropout or subword affixes, which llama.cpp does not".into(),
            ));
        }
        let merges =
            merges(model).ok_or_else(|| fail("its BPE merges are not pairs of tokens".into()))?;
        let added: HashMap<u32, AddedToken> =
            inner.get_added_tokens_decoder().into_iter().collect();
        if let Some(a) = added
            .values()
            .find(|a| a.single_word || a.lstrip || a.rstrip)
        {
            return Err(fail(format!(
                "added token {:?} strips spaces or matches whole words only, which llama.cpp does not",
                a.content
            )));
        }
        let sentencepiece = model["byte_fallback"] == true;
        let vocab = inner.get_vocab(true);
        let n = vocab.values().max().map_or(0, |&m| m as usize + 1);
        let mut texts: Vec<Option<String>> = vec![None; n];
        for (text, id) in vocab {
            texts[id as usize] = Some(text);
        }
        let unk_id = model["unk_token"]
            .as_str()
            .and_then(|u| inner.token_to_id(u));
        let (mut tokens, mut types) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (id, text) in texts.into_iter().enumerate() {
            let pad = format!("[PAD{id}]");
            let (text, kind) = match (added.get(&(id as u32)), text) {
                (Some(a), _) => {
                    // Byte-level: the converter stores what the token decodes to.
                    let text = if sentencepiece || a.normalized {
                        a.content.clone()
                    } else {
                        self.decode(&[id as i32])?
                    };
                    if sentencepiece && Some(id as u32) == unk_id {
                        (text, GgufVocab::UNKNOWN)
                    } else if a.special || looks_special(&text) {
                        (text, GgufVocab::CONTROL)
                    } else {
                        (text.replace('▁', " "), GgufVocab::USER_DEFINED)
                    }
                }
                (None, None) => (pad, GgufVocab::UNUSED),
                (None, Some(t)) if t == pad => (t, GgufVocab::UNUSED),
                (None, Some(t)) if sentencepiece && Some(id as u32) == unk_id => {
                    (t, GgufVocab::UNKNOWN)
                }
                (None, Some(t)) if sentencepiece && is_byte_piece(&t) => (t, GgufVocab::BYTE),
                (None, Some(t)) => (t, GgufVocab::NORMAL),
            };
            tokens.push(text);
            types.push(kind);
        }
        let mut out = GgufVocab {
            tokens,
            chat_template: (self.chat_state())
                .map_err(|e| fail(format!("its chat template did not load ({e}); set one with Tokenizer::with_chat_template")))?
                .map(|t| t.text().to_string()),
            ..GgufVocab::default()
        };
        if sentencepiece {
            out.model = "llama".into();
            out.pre = Some("default".into());
            out.add_space_prefix = spm_prefix(&json).map_err(fail)?;
            out.scores = Some(spm::scores_from_merges(&out.tokens, &types, &merges));
        } else {
            if json["decoder"]["type"] != "ByteLevel" {
                return Err(fail(format!(
                    "its decoder {} is not the ByteLevel of a byte-level BPE",
                    json["decoder"]
                )));
            }
            out.model = "gpt2".into();
            out.pre = Some(Pre::recognize(&json).map_err(fail)?.name().into());
            // A space inside a part is spelt as the byte-level alphabet does.
            let part = |s: &str| s.replace(' ', "\u{120}");
            out.merges = Some(
                merges
                    .iter()
                    .map(|(l, r)| format!("{} {}", part(l), part(r)))
                    .collect(),
            );
        }
        out.token_types = Some(types);
        self.describe_special(&mut out, &json, unk_id)
            .map_err(fail)?;
        Ok(out)
    }

    /// Fills in the special ids and `add_bos_token` / `add_eos_token`.
    fn describe_special(
        &self,
        out: &mut GgufVocab,
        json: &Value,
        unk: Option<u32>,
    ) -> Result<(), String> {
        let known = self.special_ids();
        let named = |name: &str| -> Option<u32> {
            let template = self.chat_template()?;
            self.inner()
                .token_to_id(template.special_tokens().get(name)?)
        };
        let (first, last) = template_ends(json)?;
        out.bos_token_id = known.bos.or(named("bos_token")).or(first);
        out.eos_token_id = known.eos.or(named("eos_token")).or(last);
        out.unknown_token_id = known.unk.or(named("unk_token")).or(unk);
        out.padding_token_id = known.pad.or(named("pad_token"));
        for (end, id, key) in [
            (first, out.bos_token_id, "BOS"),
            (last, out.eos_token_id, "EOS"),
        ] {
            if end.is_some() && end != id {
                return Err(format!(
                    "its post-processor adds token {end:?} where llama.cpp would add the {key} token {id:?}"
                ));
            }
        }
        out.add_bos_token = Some(first.is_some());
        out.add_eos_token = Some(last.is_some());
        Ok(())
    }
}

/// `add_space_prefix` of a SentencePiece-style `tokenizer.json`: Llama 2's
/// normaliser `Prepend("▁")` + `Replace(" ", "▁")` is llama.cpp's default
/// (`None`), `Replace` alone is `false`; anything else llama.cpp would
/// tokenize differently.
fn spm_prefix(json: &Value) -> Result<Option<bool>, String> {
    if json["pre_tokenizer"]["type"] == "Metaspace" {
        return Err("its Metaspace pre-tokenizer puts \"▁\" only before text that does not start with a space (and with prepend_scheme \"first\" only at the very start), while llama.cpp puts one before every piece of text between special tokens: rebuild it with the normaliser Prepend(\"▁\") + Replace(\" \", \"▁\") and no pre-tokenizer, as Llama 2's tokenizer.json has".into());
    }
    if !json["pre_tokenizer"].is_null() {
        return Err(format!(
            "its pre-tokenizer {} has no llama.cpp equivalent for a SentencePiece vocabulary",
            json["pre_tokenizer"]
        ));
    }
    let normalizer = &json["normalizer"];
    let steps: Vec<&Value> = match normalizer["type"].as_str() {
        Some("Sequence") => normalizer["normalizers"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
        _ => vec![normalizer],
    };
    let prepend = |v: &Value| v["type"] == "Prepend" && v["prepend"] == "▁";
    let replace =
        |v: &Value| v["type"] == "Replace" && v["pattern"]["String"] == " " && v["content"] == "▁";
    match steps.as_slice() {
        [p, r] if prepend(p) && replace(r) => Ok(None),
        [r] if replace(r) => Ok(Some(false)),
        _ => Err(format!(
            "its normaliser {normalizer} is not llama.cpp's space handling (Prepend(\"▁\") + Replace(\" \", \"▁\"), or Replace alone)"
        )),
    }
}

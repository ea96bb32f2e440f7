//! The `tokenizers` pipeline a checked [`GgufVocab`] stands for: the model's
//! `tokenizer.json` pieces, byte-level (`gpt2`) or SentencePiece (`llama`),
//! and the post-processor that adds BOS / EOS.

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::processors::sequence::Sequence as ProcessorSequence;
use tokenizers::processors::template::{SpecialToken, TemplateProcessing};
use tokenizers::{DecoderWrapper, NormalizerWrapper, PostProcessorWrapper};

use super::pre::Pre;
use super::spm;
use super::vocab::{GgufVocab, err, split_merge};
use crate::error::Result;
use crate::nn::tokenizer::SpecialIds;

/// The byte-level BPE of a `gpt2` vocabulary, and whether its `pre` adds
/// BOS when `add_bos_token` is absent.
pub(super) fn byte_level(
    vocab: &GgufVocab,
    ids: Vocab,
    source: &str,
) -> Result<(tokenizers::Tokenizer, bool)> {
    let fail = |message: String| err(source, message);
    let names = Pre::all_names();
    let Some(name) = vocab.pre.as_deref() else {
        return Err(fail(format!(
            "tokenizer.ggml.pre is missing: name the pre-tokenizer (one of {names}); llama.cpp's fallback splits text unlike any model's tokenizer"
        )));
    };
    let pre = Pre::from_name(name).ok_or_else(|| {
        fail(format!(
            "tokenizer.ggml.pre {name:?} is not supported: use one of {names}"
        ))
    })?;
    let listed = vocab.merges.as_ref().ok_or_else(|| {
        fail("tokenizer.ggml.merges is missing: a gpt2 vocabulary needs its BPE merges".into())
    })?;
    let mut merges = Vec::with_capacity(listed.len());
    for (i, merge) in listed.iter().enumerate() {
        merges.push(split_merge(merge).ok_or_else(|| {
            fail(format!(
                "tokenizer.ggml.merges[{i}] = {merge:?} is not two tokens separated by a space"
            ))
        })?);
    }
    let bpe = BPE::builder()
        .vocab_and_merges(ids, merges)
        .ignore_merges(pre.ignore_merges())
        .build()
        .map_err(|e| {
            fail(format!(
                "tokenizer.ggml.merges do not fit tokenizer.ggml.tokens: {e}"
            ))
        })?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner
        .with_normalizer(pre.normalizer())
        .map_err(|e| fail(e.to_string()))?;
    let split = pre.pre_tokenizer().map_err(|e| fail(e.to_string()))?;
    inner.with_pre_tokenizer(Some(split));
    inner.with_decoder(Some(ByteLevel::default()));
    Ok((inner, pre.adds_bos()))
}

/// The SentencePiece BPE of a `llama` vocabulary, as Llama 2's
/// `tokenizer.json` has it: merges ranked by score, byte fallback, `▁` for
/// spaces and (unless `add_space_prefix` is false) one before every piece
/// of text between special tokens, as llama.cpp puts it.
pub(super) fn sentencepiece(
    vocab: &GgufVocab,
    tokens: &[String],
    ids: Vocab,
    unk: Option<u32>,
    source: &str,
) -> Result<tokenizers::Tokenizer> {
    let fail = |message: String| err(source, message);
    let pre = vocab.pre.as_deref().unwrap_or("default");
    if !(pre.is_empty() || pre == "default") {
        return Err(fail(format!(
            "tokenizer.ggml.pre {pre:?} does not go with a llama (SentencePiece) vocabulary, whose pre is \"default\""
        )));
    }
    let scores = vocab.scores.as_ref().ok_or_else(|| {
        fail(
            "tokenizer.ggml.scores is missing: a llama (SentencePiece) vocabulary merges by score"
                .into(),
        )
    })?;
    let mut bpe = BPE::builder()
        .vocab_and_merges(ids, spm::merges_from_scores(tokens, scores))
        .fuse_unk(true)
        .byte_fallback(true);
    if let Some(unk) = unk {
        bpe = bpe.unk_token(tokens[unk as usize].clone());
    }
    let bpe = bpe.build().map_err(|e| fail(e.to_string()))?;
    let replace = |from: &str, to: &str| Replace::new(from, to).map_err(|e| fail(e.to_string()));
    let mut normalizers: Vec<NormalizerWrapper> = vec![replace(" ", "▁")?.into()];
    let mut decoders: Vec<DecoderWrapper> = vec![
        replace("▁", " ")?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if vocab.add_space_prefix.unwrap_or(true) {
        normalizers.insert(0, Prepend::new("▁".to_string()).into());
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    let mut inner = tokenizers::Tokenizer::new(bpe);
    inner
        .with_normalizer(Some(NormalizerSequence::new(normalizers)))
        .map_err(|e| fail(e.to_string()))?;
    inner.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(inner)
}

/// The post-processor: BOS `$A` EOS as far as asked for, after GPT-2's own
/// byte-level one (which only trims offsets) for a `gpt2` vocabulary.
pub(super) fn post_processor(
    byte_level: bool,
    tokens: &[String],
    special: &SpecialIds,
    (add_bos, add_eos): (bool, bool),
    source: &str,
) -> Result<Option<PostProcessorWrapper>> {
    let template = template(tokens, special, add_bos, add_eos, source)?;
    if !byte_level {
        return Ok(template.map(Into::into));
    }
    let trim: PostProcessorWrapper = ByteLevel::default().trim_offsets(false).into();
    Ok(Some(match template {
        Some(t) => ProcessorSequence::new(vec![trim, t.into()]).into(),
        None => trim,
    }))
}

/// BOS `$A` EOS as far as asked for; `None` if neither is.
fn template(
    tokens: &[String],
    special: &SpecialIds,
    add_bos: bool,
    add_eos: bool,
    source: &str,
) -> Result<Option<TemplateProcessing>> {
    let fail = |message: String| err(source, message);
    let mut ends = [None, None];
    let wanted = [(add_bos, special.bos, "bos"), (add_eos, special.eos, "eos")];
    for (end, (add, id, key)) in wanted.into_iter().enumerate() {
        match (add, id) {
            (false, _) => {}
            (true, Some(id)) => {
                // Named by its text, as in the models' files (llama.cpp's
                // converter reads the names), unless that would not parse.
                let text = &tokens[id as usize];
                let plain = !text.contains([' ', ':']) && !text.starts_with('$');
                ends[end] = Some((if plain { text.as_str() } else { key }, id));
            }
            (true, None) => {
                return Err(fail(format!(
                    "tokenizer.ggml.add_{key}_token is true, but there is no tokenizer.ggml.{key}_token_id"
                )));
            }
        }
    }
    if ends.iter().all(Option::is_none) {
        return Ok(None);
    }
    let piece =
        |end: Option<(&str, u32)>, type_id: u32| end.map(|(name, _)| format!("{name}:{type_id}"));
    let [bos, eos] = ends;
    let sequence = |seq: &str, type_id| {
        [
            piece(bos, type_id),
            Some(format!("${seq}:{type_id}")),
            piece(eos, type_id),
        ]
        .into_iter()
        .flatten()
    };
    let single: Vec<String> = sequence("A", 0).collect();
    let pair: Vec<String> = sequence("A", 0).chain(sequence("B", 1)).collect();
    let (mut names, mut specials) = (Vec::new(), Vec::new());
    for (name, id) in ends.into_iter().flatten() {
        if !names.contains(&name) {
            names.push(name);
            let text = tokens[id as usize].clone();
            let token = SpecialToken::new(name.to_string(), vec![id], vec![text]);
            specials.push(token.map_err(|e| fail(e.to_string()))?);
        }
    }
    TemplateProcessing::builder()
        .try_single(single)
        .and_then(|b| b.try_pair(pair))
        .map_err(|e| fail(e.to_string()))?
        .special_tokens(specials)
        .build()
        .map(Some)
        .map_err(|e| fail(e.to_string()))
}

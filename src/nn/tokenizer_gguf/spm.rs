//! SentencePiece BPE scores (`tokenizer.ggml.model = "llama"`) and BPE
//! merges, each from the other. llama.cpp merges, among adjacent pieces, the
//! pair whose joined text is the token of highest score (leftmost on ties);
//! a `tokenizers` BPE applies ranked merges. Merges ranked by the score of
//! the token they make do the same.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::vocab::GgufVocab;

/// The merges that rank every split of a token into two tokens by the
/// token's score, best first: transformers' `generate_merges` (what its GGUF
/// loader and its SentencePiece converter use), so the result is the
/// model's own `tokenizer.json` merges. Per token, splits go in order of the
/// parts' ids; then a stable sort by score, then by the parts' lengths in
/// characters, all descending.
pub(super) fn merges_from_scores(tokens: &[String], scores: &[f32]) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let chars: Vec<usize> = tokens.iter().map(|t| t.chars().count()).collect();
    let mut merges: Vec<(usize, usize, f32)> = Vec::new();
    for (token, &score) in tokens.iter().zip(scores) {
        let start = merges.len();
        for (at, _) in token.char_indices().skip(1) {
            let (left, right) = token.split_at(at);
            if let (Some(&l), Some(&r)) = (ids.get(left), ids.get(right)) {
                merges.push((l, r, score));
            }
        }
        merges[start..].sort_by_key(|&(l, r, _)| (l, r));
    }
    // Python compares -0.0 and 0.0 equal, as `partial_cmp` does.
    merges.sort_by(|a, b| {
        b.2.partial_cmp(&a.2)
            .unwrap_or(Ordering::Equal)
            .then(chars[b.0].cmp(&chars[a.0]))
            .then(chars[b.1].cmp(&chars[a.1]))
    });
    merges
        .into_iter()
        .map(|(l, r, _)| (tokens[l].clone(), tokens[r].clone()))
        .collect()
}

/// Scores under which llama.cpp merges as `merges` (best first) do: the
/// k-th distinct token the merges make scores -k; normal tokens no merge
/// makes (single characters) follow in id order; user-defined and unused
/// tokens get -1000 and the rest 0, as llama.cpp's converter gives them.
/// For a SentencePiece BPE these are its own scores: it numbers its pieces
/// in merge order, characters last.
pub(super) fn scores_from_merges(
    tokens: &[String],
    types: &[i32],
    merges: &[(String, String)],
) -> Vec<f32> {
    let mut first: HashMap<String, usize> = HashMap::new();
    for (left, right) in merges {
        let next = first.len();
        first.entry(format!("{left}{right}")).or_insert(next);
    }
    let mut rest = first.len();
    tokens
        .iter()
        .zip(types)
        .map(|(token, &kind)| match kind {
            GgufVocab::NORMAL => match first.get(token) {
                Some(&k) => -(k as f32),
                None => {
                    rest += 1;
                    -((rest - 1) as f32)
                }
            },
            GgufVocab::USER_DEFINED | GgufVocab::UNUSED => -1000.0,
            _ => 0.0,
        })
        .collect()
}

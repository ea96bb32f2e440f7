//! `Tokenizer`: GPT-2's real vocabulary (rebuilt from the `r50k_base` ranks
//! `tiktoken-rs` embeds) gives tiktoken's ids, through both `vocab.json` +
//! `merges.txt` and `tokenizer.json`; encode → decode is the identity on the
//! shipped text and on tricky strings; streaming releases only complete
//! characters; bad files and unknown ids are errors, never panics.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::util::Rng;
use wgpu_tp::Error;
use wgpu_tp::nn::Tokenizer;

const GENESIS: &str = include_str!("../../examples/data/genesis_kjv.txt");

/// Strings that trip tokenizers: multi-byte characters, emoji (ZWJ
/// sequences, skin tones), combining marks, whitespace runs, contractions,
/// digits, control characters.
const TRICKY: &[&str] = &[
    "",
    " ",
    "Hello, world!",
    "  leading and trailing  ",
    "tabs\tand\t\ttabs\nnew\n\n\nlines\r\n",
    "       many spaces      ",
    "I'm sure they'll say we've 'quoted' it's",
    "12345 3.14159 1,000,000 0x1F",
    "naïve café résumé Ångström",
    "e\u{301}\u{302} combining",
    "日本語のテキスト、中文文本",
    "Привет мир; مرحبا بالعالم; שלום",
    "😀👍🏽👨‍👩‍👧‍👦🇺🇳 emoji",
    "\u{0}\u{1}\u{7f} controls \u{200b}zero-width\u{feff}",
    "fn main() { println!(\"{}\", x >= 1 && y != 2); }",
    "In the beginning God created the heaven and the earth.",
];

/// A temporary directory unique to this process and `label`.
pub(super) fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wgpu-tp-tok-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// GPT-2's byte ↔ printable-character map (`bytes_to_unicode` in its
/// `encoder.py`).
fn byte_chars() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut extra = 0;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        map[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap()
        };
    }
    map
}

/// The pieces BPE splits `bytes` into using only merges of rank below `limit`.
fn bpe_parts(bytes: &[u8], ranks: &HashMap<Vec<u8>, u32>, limit: u32) -> Vec<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = bytes.iter().map(|&b| vec![b]).collect();
    loop {
        let best = (0..parts.len().saturating_sub(1))
            .filter_map(|i| {
                let joined = [parts[i].as_slice(), &parts[i + 1]].concat();
                ranks.get(&joined).filter(|&&r| r < limit).map(|&r| (r, i))
            })
            .min();
        let Some((_, i)) = best else { return parts };
        let right = parts.remove(i + 1);
        parts[i].extend(right);
    }
}

/// GPT-2's `vocab.json` and `merges.txt`, rebuilt from tiktoken's ranks: a
/// token's id is its rank, and its merge is the last BPE step that builds it
/// from lower-ranked tokens.
pub(super) fn gpt2_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let bpe = tiktoken_rs::r50k_base().unwrap();
        let ranks: HashMap<Vec<u8>, u32> = (0..50256u32)
            .map(|r| (bpe.decode_bytes(&[r]).unwrap(), r))
            .collect();
        assert_eq!(
            ranks.len(),
            50256,
            "r50k_base has 50256 distinct byte tokens"
        );
        let chars = byte_chars();
        let show = |b: &[u8]| b.iter().map(|&x| chars[x as usize]).collect::<String>();
        let mut by_rank: Vec<(&Vec<u8>, u32)> = ranks.iter().map(|(b, &r)| (b, r)).collect();
        by_rank.sort_by_key(|&(_, r)| r);
        let mut merges = String::from("#version: 0.2\n");
        for &(bytes, rank) in by_rank.iter().filter(|(b, _)| b.len() > 1) {
            let parts = bpe_parts(bytes, &ranks, rank);
            assert_eq!(
                parts.len(),
                2,
                "token {rank} is not one merge of lower ranks"
            );
            merges += &format!("{} {}\n", show(&parts[0]), show(&parts[1]));
        }
        let mut vocab: serde_json::Map<String, serde_json::Value> =
            by_rank.iter().map(|&(b, r)| (show(b), r.into())).collect();
        vocab.insert("<|endoftext|>".into(), 50256.into());
        let dir = temp_dir("gpt2");
        std::fs::write(
            dir.join("vocab.json"),
            serde_json::to_string(&vocab).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.join("merges.txt"), merges).unwrap();
        dir
    })
}

pub(super) fn gpt2() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| Tokenizer::from_dir(gpt2_dir()).unwrap())
}

/// Random strings over a pool of ASCII, accented, CJK, RTL, emoji and
/// whitespace characters.
fn random_strings(rng: &mut Rng, n: usize) -> Vec<String> {
    let pool: Vec<char> = "abcXYZ019 ,.'!?-_\n\t  éßøñ中文日本😀👍🏽\u{200d}\u{301}Жשب"
        .chars()
        .collect();
    (0..n)
        .map(|_| {
            (0..1 + rng.below(40))
                .map(|_| pool[rng.below(pool.len())])
                .collect()
        })
        .collect()
}

fn tiktoken_ids(text: &str) -> Vec<i32> {
    static BPE: OnceLock<tiktoken_rs::CoreBPE> = OnceLock::new();
    let bpe = BPE.get_or_init(|| tiktoken_rs::r50k_base().unwrap());
    bpe.encode_ordinary(text)
        .into_iter()
        .map(|r| r as i32)
        .collect()
}

/// Our ids equal tiktoken's for GPT-2 on the shipped text (line by line and
/// whole), the tricky strings and random ones; decode gives the text back.
pub(super) fn check_against_tiktoken(tok: &Tokenizer, rng: &mut Rng) {
    let mut texts: Vec<String> = TRICKY.iter().map(|s| s.to_string()).collect();
    texts.extend(GENESIS.lines().take(150).map(str::to_string));
    texts.push(GENESIS.to_string());
    texts.extend(random_strings(rng, 300));
    for text in &texts {
        let ids = tok.encode(text).unwrap();
        assert_eq!(ids, tiktoken_ids(text), "ids of {text:?}");
        assert_eq!(&tok.decode(&ids).unwrap(), text, "decode of {text:?}");
    }
}

#[test]
fn gpt2_vocab_merges_equals_tiktoken_r50k() {
    let tok = gpt2();
    assert_eq!(tok.vocab_size(), 50257);
    assert_eq!(tok.token_id("<|endoftext|>"), Some(50256));
    let eot = tiktoken_rs::r50k_base()
        .unwrap()
        .encode_with_special_tokens("a<|endoftext|>b");
    let eot: Vec<i32> = eot.into_iter().map(|r| r as i32).collect();
    assert_eq!(tok.encode("a<|endoftext|>b").unwrap(), eot);
    check_against_tiktoken(tok, &mut Rng::fresh("gpt2_vocab_merges"));
}

#[test]
fn gpt2_tokenizer_json_equals_tiktoken_r50k() {
    // The `tokenizer.json` path, which `from_dir` prefers.
    let dir = temp_dir("gpt2-json");
    gpt2().save(dir.join("tokenizer.json")).unwrap();
    let tok = Tokenizer::from_dir(&dir).unwrap();
    assert!(tok.source().ends_with("tokenizer.json"), "{}", tok.source());
    assert_eq!(tok.vocab_size(), 50257);
    check_against_tiktoken(&tok, &mut Rng::fresh("gpt2_tokenizer_json"));
    std::fs::remove_dir_all(dir).unwrap();
}

fn trained() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        Tokenizer::train_byte_level_bpe(&[GENESIS], 512, &["<|endoftext|>"]).unwrap()
    })
}

#[test]
fn trained_bpe_round_trips_and_compresses() {
    let tok = trained();
    assert_eq!(tok.vocab_size(), 512);
    let ids = tok.encode(GENESIS).unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), GENESIS);
    // 256 merges learned on this text must shorten it well below one token
    // per byte.
    assert!(
        ids.len() * 2 < GENESIS.len(),
        "{} tokens for {} bytes",
        ids.len(),
        GENESIS.len()
    );
    let mut texts: Vec<String> = TRICKY.iter().map(|s| s.to_string()).collect();
    texts.extend(random_strings(
        &mut Rng::fresh("trained_bpe_round_trips"),
        200,
    ));
    for text in &texts {
        let ids = tok.encode(text).unwrap();
        assert!(ids.iter().all(|&i| (0..512).contains(&i)), "{ids:?}");
        assert_eq!(&tok.decode(&ids).unwrap(), text);
    }
    // Saved and read back: the same ids.
    let dir = temp_dir("trained");
    tok.save(dir.join("tokenizer.json")).unwrap();
    let back = Tokenizer::from_dir(&dir).unwrap();
    for text in TRICKY {
        assert_eq!(back.encode(text).unwrap(), tok.encode(text).unwrap());
    }
    std::fs::remove_dir_all(dir).unwrap();
    assert!(Tokenizer::train_byte_level_bpe(&[GENESIS], 100, &[]).is_err());
}

/// Pushes `ids` one by one; returns the pieces (`None` where text was held
/// back) and what `finish` released.
fn stream(tok: &Tokenizer, ids: &[i32]) -> (Vec<Option<String>>, Option<String>) {
    let mut s = tok.stream();
    let pieces = ids.iter().map(|&id| s.push(id).unwrap()).collect();
    (pieces, s.finish().unwrap())
}

#[test]
fn stream_releases_whole_characters() {
    for tok in [gpt2(), trained()] {
        let mut texts: Vec<String> = TRICKY.iter().map(|s| s.to_string()).collect();
        texts.extend(random_strings(&mut Rng::fresh("stream"), 100));
        for text in &texts {
            let ids = tok.encode(text).unwrap();
            let (pieces, rest) = stream(tok, &ids);
            assert_eq!(rest, None, "{text:?}: nothing held back at the end");
            let joined: String = pieces.iter().flatten().map(String::as_str).collect();
            assert_eq!(&joined, text);
            assert!(pieces.iter().flatten().all(|p| !p.contains('\u{FFFD}')));
        }
        // An emoji is several byte tokens: the first ones release nothing.
        let ids = tok.encode("😀").unwrap();
        assert!(ids.len() > 1, "{ids:?}");
        let (pieces, _) = stream(tok, &ids);
        assert_eq!(pieces.last().unwrap().as_deref(), Some("😀"));
        assert!(pieces[..ids.len() - 1].iter().all(Option::is_none));
        // Cut off inside the character: `finish` releases what is held back.
        let (pieces, rest) = stream(tok, &ids[..1]);
        assert_eq!(pieces, [None]);
        assert_eq!(rest.as_deref(), Some("\u{FFFD}"));
    }
}

#[test]
fn stream_of_random_ids_equals_decode() {
    // What a badly trained model may emit: random byte tokens, split and
    // invalid UTF-8 included. The released pieces and `finish` still add up
    // to `decode`.
    let mut rng = Rng::fresh("stream_of_random_ids");
    for tok in [gpt2(), trained()] {
        let vocab = tok.vocab_size();
        for _ in 0..50 {
            let ids: Vec<i32> = (0..1 + rng.below(30))
                .map(|_| rng.below(vocab) as i32)
                .collect();
            let (pieces, rest) = stream(tok, &ids);
            let joined: String = pieces
                .iter()
                .flatten()
                .chain(&rest)
                .map(String::as_str)
                .collect();
            assert_eq!(joined, tok.decode(&ids).unwrap(), "{ids:?}");
        }
    }
}

#[test]
fn unknown_ids_are_errors() {
    let tok = gpt2();
    for bad in [-1, 50257, i32::MAX, i32::MIN] {
        let e = tok.decode(&[15496, bad]).unwrap_err();
        assert!(
            matches!(e, Error::OutOfRange { value, bound: 50257, .. } if value == bad as i64),
            "{e}"
        );
    }
    // A bad id leaves the stream as it was.
    let ids = tok.encode("Hello 😀 world").unwrap();
    let mut s = tok.stream();
    let mut text = String::new();
    for &id in &ids {
        assert!(s.push(-5).is_err());
        text += &s.push(id).unwrap().unwrap_or_default();
    }
    assert_eq!(text, "Hello 😀 world");
}

/// The error of `from_dir(dir)`, checked to be a tokenizer error naming `file`.
fn dir_error(dir: &Path, file: &str) -> String {
    let e = Tokenizer::from_dir(dir).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Tokenizer { .. }), "{msg}");
    assert!(msg.contains(file), "{msg:?} should name {file}");
    msg
}

#[test]
fn bad_files_are_errors_naming_the_file() {
    let dir = temp_dir("bad");
    // Nothing there.
    let msg = dir_error(&dir, &dir.display().to_string());
    assert!(msg.contains("tokenizer.json"), "{msg}");
    // vocab.json without merges.txt.
    let vocab = std::fs::read_to_string(gpt2_dir().join("vocab.json")).unwrap();
    let merges = std::fs::read_to_string(gpt2_dir().join("merges.txt")).unwrap();
    std::fs::write(dir.join("vocab.json"), &vocab).unwrap();
    dir_error(&dir, "tokenizer.json");
    // merges.txt naming a token vocab.json lacks; a line of one token.
    std::fs::write(dir.join("merges.txt"), "#version: 0.2\nĠ t\n☃ ☃\n").unwrap();
    dir_error(&dir, "merges.txt");
    std::fs::write(dir.join("merges.txt"), "#version: 0.2\nĠ t\nĠ\n").unwrap();
    dir_error(&dir, "merges.txt");
    // vocab.json not JSON, truncated, or not a map of ids.
    std::fs::write(dir.join("merges.txt"), &merges).unwrap();
    for bad in [
        &b"not json"[..],
        &vocab.as_bytes()[..vocab.len() / 2],
        b"[1, 2]",
    ] {
        std::fs::write(dir.join("vocab.json"), bad).unwrap();
        dir_error(&dir, "vocab.json");
    }
    // tokenizer.json wins over the pair: garbage, truncated, wrong shape.
    let mut json = Vec::new();
    let saved = temp_dir("bad-json");
    trained().save(saved.join("tokenizer.json")).unwrap();
    let good = std::fs::read(saved.join("tokenizer.json")).unwrap();
    json.push(b"\x00\xff binary".to_vec());
    json.push(good[..good.len() / 2].to_vec());
    json.push(br#"{"model": {"type": "BPE", "vocab": 5}}"#.to_vec());
    json.push(Vec::new());
    for bytes in json {
        std::fs::write(dir.join("tokenizer.json"), bytes).unwrap();
        dir_error(&dir, "tokenizer.json");
    }
    // A directory where the file should be.
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    std::fs::create_dir(dir.join("tokenizer.json")).unwrap();
    assert!(Tokenizer::from_file(dir.join("tokenizer.json")).is_err());
    assert!(Tokenizer::from_file(dir.join("missing.json")).is_err());
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(saved).unwrap();
}

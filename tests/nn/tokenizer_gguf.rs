//! `Tokenizer::from_gguf_vocab` / `to_gguf_vocab` on small tokenizers with
//! the structure of GPT-2's, Llama 3's, Qwen2.5's, SmolLM2's and Llama 2's
//! (`tests/fixtures/gguf_tokenizer/`, made by `make_tokenizer_fixtures.py`).
//! Built from the metadata llama.cpp's converter wrote (read from the JSON
//! dump of each `vocab.gguf`, `gguf_metadata.json`: the crate's GGUF reader
//! is separate), a tokenizer encodes and decodes as the original
//! `tokenizer.json` and as llama.cpp (llama-cpp-python 0.3.36) do; written
//! back it gives the converter's metadata; bad metadata is an error naming
//! its key, and tokenizers llama.cpp cannot reproduce are refused.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::{Value, json};
use wgpu_tp::Error;
use wgpu_tp::nn::{ChatMessage, GgufVocab, Tokenizer};

use super::tokenizer::{check_against_tiktoken, gpt2, temp_dir};
use crate::util::Rng;

const FIXTURES: [&str; 5] = ["gpt2", "llama3", "qwen2", "smollm", "llama-spm"];

/// Where llama.cpp's ids differ from the tokenizer.json's (we follow the
/// latter): Qwen's tokenizer.json composes to NFC, llama.cpp does not.
const LLAMA_CPP_DIFFERS: &[(&str, &str)] = &[("qwen2", "e\u{301} decomposed")];

/// Llama 3.2's template prints today's date unless given one.
const DATE: &str = "26 Jul 2024";

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<i32>,
    ids_with_special: Vec<u32>,
    decoded: String,
    llama_cpp: Vec<i32>,
    llama_cpp_with_special: Vec<u32>,
}

fn dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf_tokenizer")
        .join(name)
}

fn read_json(name: &str, file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir(name).join(file)).unwrap()).unwrap()
}

fn cases(name: &str) -> Vec<Case> {
    serde_json::from_value(read_json(name, "cases.json")["cases"].take()).unwrap()
}

/// The test's GGUF "reader": the script's JSON dump of the file's metadata.
fn vocab_of(name: &str) -> GgufVocab {
    let meta = read_json(name, "gguf_metadata.json");
    let key = |k: &str| meta[format!("tokenizer.ggml.{k}")].clone();
    let list = |k: &str| key(k).as_array().cloned();
    let id = |k: &str| key(k).as_u64().map(|i| i as u32);
    GgufVocab {
        model: key("model").as_str().unwrap().into(),
        pre: key("pre").as_str().map(Into::into),
        tokens: serde_json::from_value(key("tokens")).unwrap(),
        scores: list("scores").map(|a| a.iter().map(|x| x.as_f64().unwrap() as f32).collect()),
        token_types: list("token_type")
            .map(|a| a.iter().map(|x| x.as_i64().unwrap() as i32).collect()),
        merges: list("merges").map(|a| a.iter().map(|x| x.as_str().unwrap().into()).collect()),
        bos_token_id: id("bos_token_id"),
        eos_token_id: id("eos_token_id"),
        unknown_token_id: id("unknown_token_id"),
        padding_token_id: id("padding_token_id"),
        add_bos_token: key("add_bos_token").as_bool(),
        add_eos_token: key("add_eos_token").as_bool(),
        add_space_prefix: key("add_space_prefix").as_bool(),
        chat_template: meta["tokenizer.chat_template"].as_str().map(Into::into),
    }
}

fn build(vocab: &GgufVocab) -> Tokenizer {
    Tokenizer::from_gguf_vocab(vocab, "test.gguf").unwrap()
}

/// `tokenizer` as its saved tokenizer.json loads in `tokenizers`, which
/// adds BOS / EOS as the post-processor says (the crate's `encode` adds none).
fn saved(tokenizer: &Tokenizer, label: &str) -> tokenizers::Tokenizer {
    let path = temp_dir(label).join("tokenizer.json");
    tokenizer.save(&path).unwrap();
    tokenizers::Tokenizer::from_file(&path).unwrap()
}

fn encode_with_special(tokenizer: &tokenizers::Tokenizer, text: &str) -> Vec<u32> {
    tokenizer.encode(text, true).unwrap().get_ids().to_vec()
}

fn assert_encodes(tokenizer: &Tokenizer, name: &str) {
    for case in cases(name) {
        let ids = tokenizer.encode(&case.text).unwrap();
        assert_eq!(ids, case.ids, "{name}: {:?}", case.text);
    }
}

#[test]
fn encodes_as_tokenizer_json_and_llama_cpp() {
    for name in FIXTURES {
        let tokenizer = build(&vocab_of(name));
        for case in cases(name) {
            let ids = tokenizer.encode(&case.text).unwrap();
            assert_eq!(
                ids, case.ids,
                "{name}: {:?} against tokenizer.json",
                case.text
            );
            let differs = LLAMA_CPP_DIFFERS
                .iter()
                .any(|(n, t)| *n == name && case.text.starts_with(t));
            assert_eq!(
                ids == case.llama_cpp,
                !differs,
                "{name}: {:?} against llama.cpp",
                case.text
            );
        }
    }
}

#[test]
fn decodes_as_tokenizer_json_whole_and_streamed() {
    for name in FIXTURES {
        let tokenizer = build(&vocab_of(name));
        for case in cases(name) {
            assert_eq!(
                tokenizer.decode(&case.ids).unwrap(),
                case.decoded,
                "{name}: {:?}",
                case.text
            );
            let mut stream = tokenizer.stream();
            let mut text = String::new();
            for &id in &case.ids {
                text.extend(stream.push(id).unwrap());
            }
            text.extend(stream.finish().unwrap());
            assert_eq!(text, case.decoded, "{name}: streamed {:?}", case.text);
        }
    }
}

#[test]
fn adds_bos_as_the_metadata_says() {
    for name in FIXTURES {
        let tokenizer = saved(&build(&vocab_of(name)), &format!("bos-{name}"));
        for case in cases(name) {
            let ids = encode_with_special(&tokenizer, &case.text);
            assert_eq!(ids, case.ids_with_special, "{name}: {:?}", case.text);
            if !LLAMA_CPP_DIFFERS
                .iter()
                .any(|(n, t)| *n == name && case.text.starts_with(t))
            {
                assert_eq!(ids, case.llama_cpp_with_special, "{name}: {:?}", case.text);
            }
        }
    }
}

#[test]
fn chat_template_comes_with_its_special_tokens() {
    let messages = [ChatMessage::system("Be brief."), ChatMessage::user("Hi!")];
    let extra = json!({ "date_string": DATE });
    for name in ["llama3", "qwen2", "smollm", "llama-spm"] {
        let from_gguf = build(&vocab_of(name));
        let from_dir = Tokenizer::from_dir(dir(name)).unwrap();
        let render = |t: &Tokenizer| t.apply_chat_template_with(&messages, true, &extra).unwrap();
        assert_eq!(render(&from_gguf), render(&from_dir), "{name}");
    }
    let none = build(&vocab_of("gpt2"));
    assert!(none.chat_template().is_none());
    assert!(matches!(
        none.apply_chat_template(&[], true),
        Err(Error::Tokenizer { .. })
    ));
}

/// The fields a GGUF reader and llama.cpp act on, with llama.cpp's defaults
/// filled in, so equal means "tokenizes the same".
fn resolved(v: &GgufVocab) -> GgufVocab {
    let spm = v.model == "llama";
    let mut v = v.clone();
    v.add_bos_token = v
        .add_bos_token
        .or(Some(spm || v.pre.as_deref() == Some("llama-bpe")));
    v.add_eos_token = v.add_eos_token.or(Some(false));
    v.add_space_prefix = if spm {
        v.add_space_prefix.or(Some(true))
    } else {
        None
    };
    v
}

#[test]
fn round_trips_through_to_gguf_vocab() {
    for name in FIXTURES {
        let vocab = vocab_of(name);
        let back = build(&vocab).to_gguf_vocab().unwrap();
        assert_eq!(resolved(&back), resolved(&vocab), "{name}");
        assert_encodes(&build(&back), name);
    }
}

#[test]
fn writes_what_the_converter_writes() {
    for name in FIXTURES {
        let converter = vocab_of(name);
        let mut ours = Tokenizer::from_dir(dir(name))
            .unwrap()
            .to_gguf_vocab()
            .unwrap();
        // What only config.json says: a writer with the model's config adds it.
        let config = read_json(name, "config.json");
        ours.pad_to(config["vocab_size"].as_u64().unwrap() as usize)
            .unwrap();
        let from_config: &[&str] = match name {
            "gpt2" => &["bos", "eos", "unk"],
            "qwen2" => &["bos"],
            _ => &[],
        };
        for key in from_config {
            let slot = match *key {
                "bos" => (&mut ours.bos_token_id, converter.bos_token_id),
                "eos" => (&mut ours.eos_token_id, converter.eos_token_id),
                _ => (&mut ours.unknown_token_id, converter.unknown_token_id),
            };
            assert_eq!(
                *slot.0, None,
                "{name}: {key} is not in tokenizer.json or its chat template"
            );
            *slot.0 = slot.1;
        }
        assert_eq!(resolved(&ours), resolved(&converter), "{name}");
        assert_encodes(&build(&ours), name);
    }
}

#[test]
fn gpt2_real_vocabulary_round_trips_through_gguf() {
    // GPT-2's 50257 tokens and 50000 merges (from tiktoken's r50k_base).
    let vocab = gpt2().to_gguf_vocab().unwrap();
    assert_eq!(
        (vocab.tokens.len(), vocab.merges.as_ref().unwrap().len()),
        (50257, 50000)
    );
    assert_eq!(vocab.pre.as_deref(), Some("gpt-2"));
    assert_eq!(
        vocab.token_types.as_ref().unwrap()[50256],
        GgufVocab::CONTROL
    );
    let tokenizer = build(&vocab);
    check_against_tiktoken(&tokenizer, &mut Rng::fresh("gguf_gpt2"));
    assert_eq!(tokenizer.to_gguf_vocab().unwrap(), vocab);
}

#[test]
fn pre_names_llama_cpp_aliases_and_defaults() {
    for (name, alias) in [
        ("gpt2", "phi-2"),
        ("llama3", "llama3"),
        ("llama3", "llama-v3"),
        ("smollm", "starcoder"),
    ] {
        let mut vocab = vocab_of(name);
        vocab.pre = Some(alias.into());
        assert_encodes(&build(&vocab), name);
    }
    // Llama 3's split without ignore_merges is llama.cpp's smaug-bpe.
    let mut smaug = vocab_of("llama3");
    smaug.pre = Some("smaug-bpe".into());
    assert_eq!(
        build(&smaug).to_gguf_vocab().unwrap().pre.as_deref(),
        Some("smaug-bpe")
    );
    // add_bos_token absent: llama.cpp adds BOS for llama-bpe and SentencePiece only.
    for (name, adds) in [("llama3", true), ("llama-spm", true), ("qwen2", false)] {
        let mut vocab = vocab_of(name);
        vocab.add_bos_token = None;
        let tokenizer = saved(&build(&vocab), &format!("default-{name}"));
        let ids = encode_with_special(&tokenizer, "Hi");
        assert_eq!(Some(ids[0]) == vocab.bos_token_id, adds, "{name}: {ids:?}");
    }
    // A SentencePiece vocabulary without add_space_prefix puts no space first.
    let mut bare = vocab_of("llama-spm");
    bare.add_space_prefix = Some(false);
    let bare = build(&bare);
    let spaced = build(&vocab_of("llama-spm"));
    assert_eq!(
        bare.encode(" Hello").unwrap(),
        spaced.encode("Hello").unwrap()
    );
    assert_eq!(
        bare.decode(&bare.encode(" Hello").unwrap()).unwrap(),
        " Hello"
    );
    assert_eq!(bare.to_gguf_vocab().unwrap().add_space_prefix, Some(false));
}

#[test]
fn padding_tokens_keep_their_ids() {
    // Qwen's embedding is wider than its tokenizer: [PADn] placeholders.
    let vocab = vocab_of("qwen2");
    let tokenizer = build(&vocab);
    assert_eq!(tokenizer.vocab_size(), vocab.tokens.len());
    let last = vocab.tokens.len() - 1;
    assert_eq!(vocab.tokens[last], format!("[PAD{last}]"));
    assert_eq!(tokenizer.token_id(&vocab.tokens[last]), Some(last as i32));
    let mut short = vocab.clone();
    assert!(short.pad_to(3).is_err());
    short.pad_to(last + 3).unwrap();
    assert_eq!(short.tokens.len(), last + 3);
    assert_eq!(
        short.token_types.as_ref().unwrap()[last + 2],
        GgufVocab::UNUSED
    );
}

/// The message of the error `from_gguf_vocab` gives for `vocab`.
fn refusal(vocab: &GgufVocab) -> String {
    match Tokenizer::from_gguf_vocab(vocab, "bad.gguf") {
        Err(e @ Error::Tokenizer { .. }) => e.to_string(),
        other => panic!("expected a tokenizer error, got {other:?}"),
    }
}

#[test]
fn bad_metadata_is_an_error_naming_the_key() {
    let gpt2 = vocab_of("gpt2");
    let spm = vocab_of("llama-spm");
    let n = gpt2.tokens.len() as u32;
    type Edit = fn(&mut GgufVocab, u32);
    let cases: [(&GgufVocab, &str, Edit); 16] = [
        (&gpt2, "tokenizer.ggml.model", |v, _| {
            v.model = "bert".into()
        }),
        (&gpt2, "tokenizer.ggml.pre", |v, _| {
            v.pre = Some("tekken-2".into())
        }),
        (&gpt2, "tokenizer.ggml.pre", |v, _| v.pre = None),
        (&spm, "tokenizer.ggml.pre", |v, _| {
            v.pre = Some("qwen2".into())
        }),
        (&gpt2, "tokenizer.ggml.tokens", |v, _| v.tokens.clear()),
        (&gpt2, "tokenizer.ggml.tokens", |v, _| {
            v.tokens[5] = v.tokens[6].clone()
        }),
        (&gpt2, "tokenizer.ggml.token_type", |v, _| {
            v.token_types.as_mut().unwrap().pop();
        }),
        (&gpt2, "tokenizer.ggml.token_type", |v, _| {
            v.token_types.as_mut().unwrap()[3] = 9
        }),
        (&spm, "tokenizer.ggml.scores", |v, _| {
            v.scores.as_mut().unwrap().truncate(10)
        }),
        (&spm, "tokenizer.ggml.scores", |v, _| v.scores = None),
        (&gpt2, "tokenizer.ggml.bos_token_id", |v, n| {
            v.bos_token_id = Some(n)
        }),
        (&gpt2, "tokenizer.ggml.padding_token_id", |v, n| {
            v.padding_token_id = Some(n + 7)
        }),
        (&gpt2, "tokenizer.ggml.merges", |v, _| v.merges = None),
        (&gpt2, "tokenizer.ggml.merges", |v, _| {
            v.merges.as_mut().unwrap()[0] = "nospace".into()
        }),
        (&gpt2, "tokenizer.ggml.merges", |v, _| {
            v.merges.as_mut().unwrap()[0] = "zz qq".into()
        }),
        (&gpt2, "tokenizer.ggml.add_eos_token", |v, _| {
            v.add_eos_token = Some(true);
            v.eos_token_id = None;
        }),
    ];
    for (base, key, edit) in cases {
        let mut vocab = base.clone();
        edit(&mut vocab, n);
        let message = refusal(&vocab);
        assert!(message.contains(key), "{key}: {message}");
        assert!(message.contains("bad.gguf"), "{message}");
    }
}

/// `name`'s tokenizer.json with `edit` applied, loaded.
fn edited(name: &str, edit: impl Fn(&mut Value)) -> Tokenizer {
    let mut json = read_json(name, "tokenizer.json");
    edit(&mut json);
    let path = temp_dir(&format!("edited-{name}")).join("tokenizer.json");
    std::fs::write(&path, json.to_string()).unwrap();
    Tokenizer::from_file(&path).unwrap()
}

#[test]
fn tokenizers_llama_cpp_cannot_reproduce_are_refused() {
    let cases: [(Tokenizer, &str); 6] = [
        (
            edited("llama-spm", |j| {
                j["normalizer"] = Value::Null;
                j["pre_tokenizer"] = json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false});
            }),
            "Metaspace",
        ),
        (
            edited("gpt2", |j| {
                j["pre_tokenizer"] = json!({"type": "Whitespace"})
            }),
            "pre-tokenizer",
        ),
        (
            edited("gpt2", |j| j["normalizer"] = json!({"type": "Lowercase"})),
            "normaliser",
        ),
        (
            edited("llama3", |j| j["model"]["ignore_merges"] = json!(false)),
            "smaug-bpe",
        ),
        (
            edited("gpt2", |j| j["added_tokens"][0]["lstrip"] = json!(true)),
            "strips",
        ),
        (
            edited("gpt2", |j| j["decoder"] = json!({"type": "Fuse"})),
            "decoder",
        ),
    ];
    for (tokenizer, why) in &cases[..3] {
        match tokenizer.to_gguf_vocab() {
            Err(e @ Error::Tokenizer { .. }) => assert!(e.to_string().contains(why), "{why}: {e}"),
            other => panic!("{why}: expected an error, got {other:?}"),
        }
    }
    // Llama 3's regex with merges always applied is a pre of its own.
    assert_eq!(
        cases[3].0.to_gguf_vocab().unwrap().pre.as_deref(),
        Some(cases[3].1)
    );
    for (tokenizer, why) in &cases[4..] {
        let e = tokenizer.to_gguf_vocab().unwrap_err().to_string();
        assert!(e.contains(why), "{why}: {e}");
    }
}

#[test]
fn streaming_survives_byte_runs_that_are_not_utf8() {
    // Byte fallback decodes a run of bytes that is not UTF-8 as U+FFFD
    // throughout, "A" already released included: the stream goes on with
    // what is pending instead of failing.
    let vocab = vocab_of("llama-spm");
    let tokenizer = build(&vocab);
    let id = |t: &str| vocab.tokens.iter().position(|x| x == t).unwrap() as i32;
    let ids = [id("<0x41>"), id("<0xE2>"), id("<0x41>"), id("<0x42>")];
    let mut stream = tokenizer.stream();
    let mut text = String::new();
    for &i in &ids {
        if let Some(piece) = stream.push(i).unwrap() {
            text.push_str(&piece);
        }
    }
    if let Some(rest) = stream.finish().unwrap() {
        text.push_str(&rest);
    }
    assert!(text.starts_with('A'), "{text:?}");
    assert!(text.contains('\u{FFFD}'), "{text:?}");
    // Valid UTF-8 still streams exactly as it decodes.
    let ids = tokenizer.encode("Hello wörld €").unwrap();
    let mut stream = tokenizer.stream();
    let mut text = String::new();
    for &i in &ids {
        text.push_str(&stream.push(i).unwrap().unwrap_or_default());
    }
    text.push_str(&stream.finish().unwrap().unwrap_or_default());
    assert_eq!(text, tokenizer.decode(&ids).unwrap());
}

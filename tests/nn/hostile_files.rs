//! Hostile tokenizer files (a `tokenizer.json`, GPT-2's `vocab.json` and
//! `merges.txt`, a GGUF vocabulary): each is
//! an `Error::Tokenizer` naming the field and the [`FileLimits`] field to
//! raise, before `tokenizers` builds anything from it, with no abort or
//! hang and little memory. Before the limits, a 100 MB added token took
//! `tokenizers` 7 s and 7 GB, twelve million tiny vocabulary entries 18 s
//! and 3.3 GB. The cases run in a child process, whose peak memory is
//! measured (`VmHWM`); raising a limit lets the refused file load.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wgpu_tp::Error;
use wgpu_tp::nn::{FileLimits, GgufVocab, Tokenizer};

use crate::util::{peak_rss_kib, run_test_in_child};

const CHILD_VAR: &str = "WGPU_TP_HOSTILE_FILES";

/// A small valid byte-level BPE `tokenizer.json`.
fn base() -> Value {
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": {"a": 0, "b": 1, "ab": 2},
            "merges": ["a b"]
        }
    })
}

fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile_files");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(name: &str, text: &str) -> PathBuf {
    let path = dir().join(format!("{name}.json"));
    std::fs::write(&path, text).unwrap();
    path
}

fn edited(name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut v = base();
    edit(&mut v);
    write(name, &v.to_string())
}

/// `base()` with `model.vocab` (or another array or object) written as
/// `n` generated entries, streamed: no `Value` of millions of entries.
fn with_many(name: &str, key: &str, n: usize, entry: impl Fn(usize) -> String) -> PathBuf {
    let marker = "\"__MANY__\"";
    let mut v = base();
    match key {
        "vocab" => v["model"]["vocab"] = json!("__MANY__"),
        "merges" => v["model"]["merges"] = json!("__MANY__"),
        _ => v["added_tokens"] = json!("__MANY__"),
    }
    let text = v.to_string();
    let (open, close) = if key == "vocab" {
        ("{", "}")
    } else {
        ("[", "]")
    };
    let mut body = String::with_capacity(n * 16);
    body.push_str(open);
    for i in 0..n {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&entry(i));
    }
    body.push_str(close);
    write(name, &text.replace(marker, &body))
}

/// The hostile files and what their errors must say.
fn cases() -> Vec<(&'static str, PathBuf, Vec<&'static str>)> {
    let long = "x".repeat(100 << 10);
    let nested = "[".repeat(100_000) + &"]".repeat(100_000);
    vec![
        (
            "a billion-entry vocabulary claim",
            edited("billion_id", |v| {
                v["model"]["vocab"]["c"] = json!(1_000_000_000u64)
            }),
            vec!["model.vocab", "token id 1000000000", "max_token_id"],
        ),
        (
            "an added token id past u32",
            edited(
                "huge_added_id",
                |v| {
                    v["added_tokens"] =
                        json!([{"id": 5_000_000_000u64, "content": "<x>", "special": true}])
                },
            ),
            vec!["added_tokens", "token id 5000000000", "max_token_id"],
        ),
        (
            "deeply nested JSON",
            write(
                "deep",
                &base()
                    .to_string()
                    .replace("\"normalizer\":null", &format!("\"normalizer\":{nested}")),
            ),
            vec!["recursion limit exceeded"],
        ),
        (
            "a 100 MB added token",
            edited(
                "added_100mb",
                |v| {
                    v["added_tokens"] =
                        json!([{"id": 3, "content": "y".repeat(100_000_000), "special": true}])
                },
            ),
            vec![
                "added_tokens",
                "a token of 100000000 bytes",
                "max_token_bytes",
            ],
        ),
        (
            "a 100 KB vocabulary entry",
            edited("long_entry", |v| {
                v["model"]["vocab"][long.as_str()] = json!(3)
            }),
            vec!["model.vocab", "a token of 102400 bytes", "max_token_bytes"],
        ),
        (
            "a 100 KB merge",
            edited("long_merge", |v| {
                v["model"]["merges"] = json!([format!("{long} {long}")])
            }),
            vec!["model.merges", "max_token_bytes"],
        ),
        (
            "a 100 KB Unigram piece",
            edited(
                "long_piece",
                |v| {
                    v["model"] =
                        json!({"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0], [long, -1.0]]})
                },
            ),
            vec!["model.vocab", "max_token_bytes"],
        ),
        (
            "1.1 million vocabulary entries",
            with_many("many_entries", "vocab", 1_100_000, |i| {
                format!("\"{i:x}\":{i}")
            }),
            vec!["model.vocab", "more than 1048576 entries", "max_vocab"],
        ),
        (
            "2.2 million merges",
            with_many("many_merges", "merges", 2_200_000, |_| "\"a b\"".into()),
            vec!["model.merges", "more than 2097152 entries", "max_merges"],
        ),
        (
            "300 thousand added tokens",
            with_many("many_added", "added_tokens", 300_000, |i| {
                format!("{{\"id\":{i},\"content\":\"t{i}\"}}")
            }),
            vec![
                "added_tokens",
                "more than 262144 entries",
                "max_added_tokens",
            ],
        ),
        (
            "trailing bytes",
            write("trailing", &(base().to_string() + "x")),
            vec!["trailing characters"],
        ),
        (
            "nine million values under an unknown key",
            edited("many_values", |v| {
                v["model"]["x"] = json!(vec![0u8; 9 << 20])
            }),
            vec!["more than 8388608 JSON values", "max_json_values"],
        ),
        (
            "padding to four billion tokens",
            edited("fixed_padding", |v| {
                v["padding"] = json!({"strategy": {"Fixed": 4_000_000_000u64}, "direction": "Right",
                    "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "a"})
            }),
            vec!["pads every encoding to 4000000000 tokens", "max_padding"],
        ),
        (
            "padding to a multiple of four billion",
            edited("multiple_padding", |v| {
                v["padding"] = json!({"strategy": "BatchLongest", "direction": "Right",
                    "pad_to_multiple_of": 4_000_000_000u64, "pad_id": 0, "pad_type_id": 0, "pad_token": "a"})
            }),
            vec!["max_padding"],
        ),
        (
            "a 100 KB padding token",
            edited("long_pad_token", |v| {
                v["padding"] = json!({"strategy": "BatchLongest", "direction": "Right",
                    "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": long})
            }),
            vec!["padding.pad_token is 102400 bytes", "max_token_bytes"],
        ),
        (
            "a tokenizer.json that is /dev/zero",
            zero_link("dev_zero"),
            vec!["is more than 268435456 bytes", "max_tokenizer_bytes"],
        ),
        (
            "a file past the size limit",
            sparse("too_big", 257 << 20),
            vec!["is 269484032 bytes", "max_tokenizer_bytes"],
        ),
    ]
}

/// A link to `/dev/zero`, which says it is empty and never ends.
fn zero_link(name: &str) -> PathBuf {
    let path = dir().join(format!("{name}.json"));
    let _ = std::fs::remove_file(&path);
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    path
}

/// A file of `len` zero bytes that takes no disk (its size is what is
/// refused).
fn sparse(name: &str, len: u64) -> PathBuf {
    let path = dir().join(format!("{name}.json"));
    std::fs::File::create(&path).unwrap().set_len(len).unwrap();
    path
}

fn refused(path: &Path, needles: &[&str]) -> String {
    let e = match Tokenizer::from_file(path) {
        Ok(_) => panic!("{}: loaded", path.display()),
        Err(e) => e,
    };
    assert!(matches!(e, Error::Tokenizer { .. }), "{e:?}");
    let text = e.to_string();
    for n in needles {
        assert!(
            text.contains(n),
            "{}: {text:.400} should say {n:?}",
            path.display()
        );
    }
    text
}

/// A GGUF vocabulary of `tokens`.
fn gguf_vocab(tokens: Vec<String>) -> GgufVocab {
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("gpt2".into()),
        tokens,
        ..GgufVocab::default()
    }
}

/// In the child process: every case refused, the base loads, raising a
/// limit lets a refused file load. Prints `RESULT <peak KiB>`.
#[test]
fn hostile_files_in_child_process() {
    if std::env::var(CHILD_VAR).is_err() {
        return;
    }
    for (case, path, needles) in cases() {
        let start = Instant::now();
        let error = refused(&path, &needles);
        let ms = start.elapsed().as_millis();
        println!("{case:<36} {ms:>5} ms  {error:.160}");
        std::fs::remove_file(&path).unwrap();
    }
    Tokenizer::from_file(edited("good", |_| {})).unwrap();
    // GPT-2's vocab.json + merges.txt: the same limits.
    let (vocab, merges) = (dir().join("vocab.json"), dir().join("merges.txt"));
    std::fs::write(&merges, "#version: 0.2\na b\n").unwrap();
    let many = with_many("many_vocab_json", "vocab", 1_100_000, |i| {
        format!("\"{i:x}\":{i}")
    });
    let text = std::fs::read_to_string(&many).unwrap();
    let start = text.find("\"vocab\":").unwrap() + "\"vocab\":".len();
    let end = start + text[start..].find('}').unwrap() + 1;
    std::fs::write(&vocab, &text[start..end]).unwrap();
    let e = Tokenizer::from_vocab_merges(&vocab, &merges)
        .unwrap_err()
        .to_string();
    assert!(e.contains("vocab.json") && e.contains("max_vocab"), "{e}");
    std::fs::write(&vocab, r#"{"a": 0, "b": 1, "ab": 2}"#).unwrap();
    Tokenizer::from_vocab_merges(&vocab, &merges).unwrap();
    std::fs::write(
        &merges,
        format!("#version: 0.2\na {}\n", "b".repeat(200 << 10)),
    )
    .unwrap();
    let e = Tokenizer::from_vocab_merges(&vocab, &merges)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("merges.txt: line 2") && e.contains("max_token_bytes"),
        "{e}"
    );
    // GGUF vocabularies: the same limits.
    let many: Vec<String> = (0..1_100_000).map(|i| format!("{i:x}")).collect();
    let e = Tokenizer::from_gguf_vocab(&gguf_vocab(many), "many.gguf").unwrap_err();
    assert!(e.to_string().contains("max_vocab"), "{e}");
    let long = vec!["a".into(), "x".repeat(100 << 10)];
    let e = Tokenizer::from_gguf_vocab(&gguf_vocab(long), "long.gguf").unwrap_err();
    assert!(e.to_string().contains("tokenizer.ggml.tokens[1]"), "{e}");
    assert!(e.to_string().contains("max_token_bytes"), "{e}");
    // For a trusted file, a raised limit (this process only).
    let long = "x".repeat(100 << 10);
    let path = edited("trusted", |v| v["model"]["vocab"][long.as_str()] = json!(3));
    refused(&path, &["max_token_bytes"]);
    FileLimits {
        max_token_bytes: 1 << 20,
        ..FileLimits::current()
    }
    .set();
    let t = Tokenizer::from_file(&path).unwrap();
    assert_eq!(t.vocab_size(), 4);
    FileLimits::default().set();
    refused(&path, &["max_token_bytes"]);
    println!("RESULT {}", peak_rss_kib());
}

#[test]
fn hostile_tokenizer_files_are_errors() {
    let test = "nn::hostile_files::hostile_files_in_child_process";
    let out = run_test_in_child(test, CHILD_VAR, "1", Duration::from_secs(120))
        .expect("the hostile files were still loading after 120 s");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let kib: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("no RESULT line")
        .trim()
        .parse()
        .unwrap();
    println!("{stdout}\npeak memory {} MiB", kib / 1024);
    // /dev/zero is read up to the 256 MiB limit (324 MiB peak here); tokenizers
    // built nothing.
    assert!(kib < 600 * 1024, "peak memory {} MiB", kib / 1024);
}

//! Fuzzing as a habit: every reader of a model's files gets inputs mutated
//! from real ones (bytes flipped, spans deleted or repeated, numbers made
//! huge, negative or fractional, files cut short), from a fixed seed, and
//! must answer `Ok` or an `Error` — never panic, abort or hang. A short
//! deterministic budget runs in the suite; `WGPU_TP_FUZZ_ITERS=N` (per
//! target, default 40) and `WGPU_TP_FUZZ_SEED=S` run it longer or
//! elsewhere (docs/SETTINGS.md). Targets: `config.json` of every family,
//! `tokenizer.json`, `tokenizer_config.json`, `generation_config.json`,
//! sharded indexes, the GGUF reader, safetensors model directories, PEFT
//! adapter directories and chat templates. Every crash found becomes a
//! regression case.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wgpu_tp::models::{CausalLm, config_from_json};
use wgpu_tp::nn::gguf::GgufFile;
use wgpu_tp::nn::{Params, Tokenizer};

use crate::util::mesh;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn iters() -> usize {
    std::env::var("WGPU_TP_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

/// xorshift64*, seeded per target.
struct Fuzz(u64);

impl Fuzz {
    fn new(target: &str) -> Fuzz {
        let base: u64 = std::env::var("WGPU_TP_FUZZ_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0x5eed);
        let h = target.bytes().fold(base ^ 0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Fuzz(h | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// `input` with 1..4 mutations.
    fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = input.to_vec();
        for _ in 0..1 + self.below(4) {
            let at = self.below(out.len().max(1));
            match self.below(7) {
                0 if !out.is_empty() => out[at] ^= 1 << self.below(8),
                1 if !out.is_empty() => out[at] = self.next() as u8,
                2 => {
                    let end = (at + 1 + self.below(64)).min(out.len());
                    out.drain(at.min(end)..end);
                }
                3 => {
                    let end = (at + 1 + self.below(64)).min(out.len());
                    let span = out[at.min(end)..end].to_vec();
                    out.splice(at..at, span.repeat(1 + self.below(8)));
                }
                4 => out.truncate(at),
                5 => {
                    // A number where one may be read.
                    let n = [
                        "0",
                        "-1",
                        "4294967297",
                        "18446744073709551615",
                        "1e308",
                        "0.5",
                        "null",
                        "\"x\"",
                        "[]",
                        "{}",
                    ];
                    let s = n[self.below(n.len())].as_bytes();
                    out.splice(at..at, s.iter().copied());
                }
                _ => {
                    // Eight bytes of a little-endian count made huge.
                    let v = [u64::MAX, 1 << 62, 1 << 40, u32::MAX as u64 + 1][self.below(4)];
                    let end = (at + 8).min(out.len());
                    out.splice(at..end, v.to_le_bytes());
                }
            }
        }
        out
    }
}

/// Run `f` on `iters()` mutations of each seed input: it must not panic.
/// The slowest input is printed (the limits, not a clock, keep each
/// bounded; a slow one is worth a look).
fn fuzz(target: &str, seeds: &[Vec<u8>], mut f: impl FnMut(&[u8])) {
    let mut rng = Fuzz::new(target);
    let mut slowest = (Duration::ZERO, 0);
    for i in 0..iters() {
        let seed = &seeds[i % seeds.len()];
        let input = rng.mutate(seed);
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| f(&input)));
        if r.is_err() {
            let path = std::env::temp_dir().join(format!("wgpu-tp-fuzz-{target}-{i}.bin"));
            let _ = std::fs::write(&path, &input);
            panic!("{target}: input {i} panicked (saved to {})", path.display());
        }
        slowest = slowest.max((t.elapsed(), i));
    }
    println!("{target}: slowest input {} took {:?}", slowest.1, slowest.0);
}

fn configs() -> Vec<Vec<u8>> {
    let hf = root().join("tests/fixtures/hf");
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&hf)
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("config.json")).ok())
        .collect();
    out.push(std::fs::read(root().join("tests/fixtures/gpt2_tiny/f32/config.json")).unwrap());
    assert!(out.len() >= 9);
    out
}

#[test]
fn fuzz_config_json_of_every_family() {
    fuzz("config", &configs(), |b| {
        if let Ok(text) = std::str::from_utf8(b) {
            let _ = config_from_json(text, "fuzz/config.json");
        }
    });
}

#[test]
fn fuzz_tokenizer_json() {
    let seeds = vec![
        std::fs::read(root().join("examples/data/tiny-llama/tokenizer.json")).unwrap(),
        std::fs::read(root().join("examples/data/tiny-gpt2/tokenizer.json")).unwrap(),
    ];
    let dir = std::env::temp_dir().join(format!("wgpu-tp-fuzz-tok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    fuzz("tokenizer", &seeds, |b| {
        std::fs::write(&path, b).unwrap();
        if let Ok(tok) = Tokenizer::from_file(&path) {
            // A tokenizer that loads must encode and decode without panicking.
            if let Ok(ids) = tok.encode("In the beginning God created") {
                let _ = tok.decode(&ids);
            }
        }
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fuzz_gguf_reader() {
    let gguf = root().join("tests/fixtures/gguf");
    let seeds: Vec<Vec<u8>> = ["llama_q8_0", "gpt2_q8_0", "qwen3_q5_k_m"]
        .iter()
        .map(|n| std::fs::read(gguf.join(n).join("model.gguf")).unwrap())
        .collect();
    fuzz("gguf", &seeds, |b| {
        if let Ok(f) = GgufFile::from_bytes("fuzz.gguf", b.to_vec()) {
            for t in f.tensors() {
                let _ = f.tensor_bytes(t.name());
            }
        }
    });
}

#[test]
fn fuzz_model_directories_and_adapters() {
    // The tiny Llama's directory with one file mutated at a time, and a
    // PEFT adapter directory likewise: loading is Ok or an Error, and a
    // refused adapter leaves the model as it was.
    let llama = root().join("tests/fixtures/hf/llama_gqa");
    let adapter = root().join("tests/fixtures/lora/llama_gqa");
    let dir = std::env::temp_dir().join(format!("wgpu-tp-fuzz-dir-{}", std::process::id()));
    let (model_dir, adapter_dir) = (dir.join("model"), dir.join("adapter"));
    for (from, to) in [(&llama, &model_dir), (&adapter, &adapter_dir)] {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
    let m = mesh(2);
    let mut base = CausalLm::from_pretrained(&m, &llama).unwrap();
    let count = base.named_parameters().len();
    let files = [
        (model_dir.join("model.safetensors"), true),
        (model_dir.join("config.json"), true),
        (adapter_dir.join("adapter_model.safetensors"), false),
        (adapter_dir.join("adapter_config.json"), false),
    ];
    let originals: Vec<Vec<u8>> = files
        .iter()
        .map(|(p, _)| std::fs::read(p).unwrap())
        .collect();
    let mut i = 0;
    fuzz("directories", &originals, |b| {
        let (path, model) = &files[i % files.len()];
        i += 1;
        std::fs::write(path, b).unwrap();
        if *model {
            let _ = CausalLm::from_pretrained(&m, &model_dir);
        } else if base.load_adapter(&adapter_dir).is_ok() {
            base.remove_lora();
        } else {
            assert_eq!(
                base.named_parameters().len(),
                count,
                "a refused adapter adds nothing"
            );
            assert!(base.lora_config().is_none());
        }
        std::fs::write(path, &originals[(i - 1) % files.len()]).unwrap();
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A copy of `from` (its files) in a fresh directory under the system's
/// temporary one.
fn copy_dir(from: &Path, name: &str) -> PathBuf {
    let to = std::env::temp_dir().join(format!("wgpu-tp-fuzz-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
    to
}

#[test]
fn fuzz_the_small_files_of_a_model_directory() {
    // tokenizer_config.json (chat template, special tokens) and
    // generation_config.json of the tiny Llama, read as generation reads
    // them; a sharded index, read as loading the model reads it.
    use wgpu_tp::nn::{ChatMessage, GenerationConfig};
    let tiny = copy_dir(&root().join("examples/data/tiny-llama"), "tiny");
    let sharded = copy_dir(&root().join("tests/fixtures/hf/qwen2_bias_bf16"), "sharded");
    let files = [
        tiny.join("tokenizer_config.json"),
        tiny.join("generation_config.json"),
        sharded.join("model.safetensors.index.json"),
    ];
    let originals: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let m = mesh(1);
    let mut i = 0;
    fuzz("small files", &originals, |b| {
        let which = i % files.len();
        i += 1;
        std::fs::write(&files[which], b).unwrap();
        match which {
            0 => {
                if let Ok(t) = Tokenizer::from_dir(&tiny) {
                    let _ = t.apply_chat_template(&[ChatMessage::user("hi")], true);
                }
            }
            1 => {
                let _ = GenerationConfig::read(&tiny, &[2]);
            }
            _ => {
                let _ = CausalLm::from_pretrained(&m, &sharded);
            }
        }
        std::fs::write(&files[which], &originals[which]).unwrap();
    });
    std::fs::remove_dir_all(&tiny).unwrap();
    std::fs::remove_dir_all(&sharded).unwrap();
}

#[test]
fn crashes_found_stay_errors() {
    // tokenizers 0.23.2 panicked deserializing this file's decoder (a JSON
    // syntax error inside it); found by `fuzz_tokenizer_json`.
    let path = root().join("tests/fixtures/fuzz/tokenizer_decoder_panic.json");
    let e = match Tokenizer::from_file(&path) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("not valid JSON"), "{e}");
    // tokenizers 0.23.2 panicked on a lone surrogate escape (`\ud800`) in
    // the decoder; found by `fuzz_tokenizer_json` with another seed.
    let path = root().join("tests/fixtures/fuzz/tokenizer_decoder_surrogate.json");
    let e = match Tokenizer::from_file(&path) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("not valid JSON") && e.contains("line 30"), "{e}");
}

/// Self-contained template pieces: real syntax and runaway growth.
const PIECES: &[&str] = &[
    "{{ m['content'] }}",
    "{{ m.role|upper }}",
    "{% if m.role == 'user' %}U{% else %}A{% endif %}",
    "{% set ns.v = ns.v ~ ns.v %}",
    "{{ ns.v|length }}",
    "{{ (messages|list) * 1000 }}",
    "{{ '%099999d'|format(1) }}",
    "{% set ns.v = ns.v|replace('a', ns.v) %}",
    "{{ [ns.v] * 100 | join(ns.v) }}",
    "{% macro f(x) %}{{ f(x ~ x) }}{% endmacro %}{{ f('a') }}",
    "{{ messages|tojson }}",
    "{{ ns.v.strip() }}",
    "<|im_start|>",
    "{{ raise_exception('no') }}",
    "{{ m.content.split(' ')|reverse|join('-') }}",
    "{% set ns.l = ns.l + ns.l + [1] %}",
    "{{ ns.l|length }}",
    "{% set ns.l = [ns.l, ns.l] %}",
    "{% set p = [ns.l, ns.l] %}{% set q = [p, p] %}{{ p == q }}{{ q < [p] }}",
    "{{ ns.l in [ns.l] }}{{ [ns.l, ns.l]|unique|list|length }}{{ [ns.l]|sort|length }}",
    "{{ {ns.v: 1}[ns.v] }}{{ ns.v in m.content }}{{ m.content == ns.v }}",
    "{{ m is eq(messages[1]) }}{{ messages|selectattr('role', 'equalto', m.role)|list|length }}",
    "{{ loop.changed(ns.l) }}{{ [ns.l].count(ns.l) }}",
    "{%- macro g(x='%}') -%} {{ x }} {%- endmacro %}{{ g() }}",
    "{% macro h() %}[{% set t %}text{% endset %}{{ caller() }}]{% endmacro %}{% call h() %}y{% endcall %}",
    "{{ (ns.l|chain(ns.l))[1:]|reverse|list }}{% for c in ns.v if c is lower %}{{ c }}{% endfor %}",
];

/// Loops the pieces may run in, and pieces that break the syntax.
const LOOPS: &[(&str, &str)] = &[
    ("{% for m in messages %}", "{% endfor %}"),
    (
        "{% for i in range(100000) %}{% for m in messages %}",
        "{% endfor %}{% endfor %}",
    ),
    (
        "{% for i in range(60) %}{% set m = messages[0] %}",
        "{% endfor %}",
    ),
];
const BROKEN: &[&str] = &["{{", "}}", "{%", "%}", "{% endfor %}", "{{ m.", "{% if %}"];

#[test]
fn fuzz_chat_templates() {
    use wgpu_tp::nn::{ChatLimits, ChatMessage, ChatTemplate};
    let mut rng = Fuzz::new("chat");
    let long = "a".repeat(10_000);
    let messages = vec![
        ChatMessage::system("You are short."),
        ChatMessage::user(long.as_str()),
        ChatMessage::assistant("ok"),
    ];
    // Small limits so runaway templates stop in milliseconds.
    let limits = ChatLimits {
        fuel: 200_000,
        max_output_bytes: 1 << 20,
        max_value_bytes: 1 << 20,
        max_items: 10_000,
        max_total_bytes: 16 << 20,
    };
    let mut slowest = (Duration::ZERO, 0);
    for i in 0..iters() {
        let n = 1 + rng.below(6);
        let body: String = (0..n).map(|_| PIECES[rng.below(PIECES.len())]).collect();
        let (open, close) = LOOPS[rng.below(LOOPS.len())];
        let mut text = format!(
            "{{% set ns = namespace(v='ab', l=[1]) %}}{{% set m = messages[0] %}}{open}{body}{close}"
        );
        if rng.below(8) == 0 {
            let at = rng.below(text.len());
            if text.is_char_boundary(at) {
                text.insert_str(at, BROKEN[rng.below(BROKEN.len())]);
            }
        }
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| {
            match ChatTemplate::new(text.as_str()).and_then(|t| t.with_limits(limits.clone())) {
                Ok(tpl) => {
                    let _ = tpl.render(&messages, true);
                    // The template stays usable after an error.
                    let _ = tpl.render(&messages[..1], false);
                }
                // A template minijinja parses that the sandbox cannot
                // rewrite is the sandbox's bug.
                Err(e) => assert!(
                    !e.to_string().contains("could not be rewritten"),
                    "chat: template {i}: {e}: {text:?}"
                ),
            }
        }));
        assert!(r.is_ok(), "chat: template {i} panicked: {text:?}");
        slowest = slowest.max((t.elapsed(), i));
    }
    println!("chat: slowest template {} took {:?}", slowest.1, slowest.0);
}

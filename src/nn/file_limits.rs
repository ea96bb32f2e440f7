//! [`FileLimits`]: how large the files of a downloaded model may be before
//! they are read. A model directory or GGUF comes from a stranger; its
//! sizes are checked against these before anything is allocated for them.

use std::sync::RwLock;

/// Bounds on the files of a model directory, checked before a file is read
/// or a tokenizer built from it; a file past one is an error naming the
/// file, the field and the limit. One setting for the process (a model's
/// files are read by many loaders: `from_pretrained`, `Tokenizer::from_dir`,
/// adapters, chat templates). The defaults are far above real files and
/// far below what would exhaust memory; for a model you trust, raise them:
///
/// ```
/// use wgpu_tp::nn::FileLimits;
///
/// FileLimits {
///     max_vocab: 4 << 20,
///     ..FileLimits::current()
/// }
/// .set();
/// assert_eq!(FileLimits::current().max_vocab, 4 << 20);
/// # FileLimits::default().set();
/// ```
///
/// Chat templates have their own bounds on rendering,
/// [`ChatLimits`](super::ChatLimits); GGUF and safetensors headers are
/// checked against the file's own size. `docs/SETTINGS.md` ("Limits on
/// untrusted model files") has the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileLimits {
    /// Bytes of `config.json` and `generation_config.json`. Default 4 MiB
    /// (real ones are a few KB).
    pub max_config_bytes: u64,
    /// Bytes of `tokenizer_config.json`, chat template files, sharded
    /// indexes and `adapter_config.json`. Default 64 MiB (the largest
    /// indexes are a few hundred KB).
    pub max_json_bytes: u64,
    /// Bytes of `tokenizer.json`. Default 256 MiB (Gemma 3's, among the
    /// largest, is 33 MB).
    pub max_tokenizer_bytes: u64,
    /// Entries of a tokenizer's vocabulary (`model.vocab`). Default
    /// 1 048 576, four times Gemma 3's 262 144: `tokenizers` takes about
    /// 280 bytes an entry, so a file of tiny entries would otherwise grow
    /// to gigabytes.
    pub max_vocab: usize,
    /// A BPE tokenizer's merges. Default 2 097 152 (Llama 3 has 280 147).
    pub max_merges: usize,
    /// A tokenizer's added tokens. Default 262 144 (real ones: a few
    /// thousand at most).
    pub max_added_tokens: usize,
    /// Bytes of one token: a vocabulary entry, a merge, an added token.
    /// Default 64 KiB (real tokens are at most a few hundred bytes; a
    /// 100 MB added token took `tokenizers` 7 GB to load).
    pub max_token_bytes: usize,
    /// The largest token id. Default 4 194 303 (2^22 - 1).
    pub max_token_id: u64,
    /// Bytes of a fine-tuning JSONL file ([`sft`](super::sft)). Default 1 GiB.
    pub max_jsonl_bytes: u64,
}

impl FileLimits {
    /// The defaults, as a constant (the process-wide value starts as it).
    const DEFAULT: FileLimits = FileLimits {
        max_config_bytes: 4 << 20,
        max_json_bytes: 64 << 20,
        max_tokenizer_bytes: 256 << 20,
        max_vocab: 1 << 20,
        max_merges: 2 << 20,
        max_added_tokens: 1 << 18,
        max_token_bytes: 64 << 10,
        max_token_id: (1 << 22) - 1,
        max_jsonl_bytes: 1 << 30,
    };

    /// No limits, for files you trust (what is read is then bounded only
    /// by memory).
    pub fn unlimited() -> FileLimits {
        FileLimits {
            max_config_bytes: u64::MAX,
            max_json_bytes: u64::MAX,
            max_tokenizer_bytes: u64::MAX,
            max_vocab: usize::MAX,
            max_merges: usize::MAX,
            max_added_tokens: usize::MAX,
            max_token_bytes: usize::MAX,
            max_token_id: u64::MAX,
            max_jsonl_bytes: u64::MAX,
        }
    }

    /// The limits files are read with now.
    pub fn current() -> FileLimits {
        LIMITS.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes these the limits every later read of a model file uses, in
    /// every thread of the process.
    pub fn set(self) {
        *LIMITS.write().unwrap_or_else(|e| e.into_inner()) = self;
    }
}

impl Default for FileLimits {
    fn default() -> FileLimits {
        FileLimits::DEFAULT
    }
}

static LIMITS: RwLock<FileLimits> = RwLock::new(FileLimits::DEFAULT);

/// The end of an error about going past `field`: its value and how to
/// raise it.
pub(crate) fn raise(field: &str, value: impl std::fmt::Display) -> String {
    format!(
        "FileLimits::{field} = {value}; for a model you trust, raise it with FileLimits {{ {field}: .., ..FileLimits::current() }}.set()"
    )
}

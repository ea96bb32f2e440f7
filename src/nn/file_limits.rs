//! [`FileLimits`]: how large the files of a downloaded model may be before
//! they are read. A model directory or GGUF comes from a stranger; its
//! sizes are checked against these before anything is allocated for them.

use std::io::Read;
use std::path::Path;
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
    /// JSON values (numbers, strings, lists, objects) in a
    /// `tokenizer.json`, wherever they are: `tokenizers` holds the whole
    /// model section twice over at about 32 bytes a value while it parses.
    /// Default 8 388 608 (Gemma 3's has about 2 million).
    pub max_json_values: u64,
    /// The length a tokenizer's padding may ask for (`padding.strategy`'s
    /// `Fixed`, `pad_to_multiple_of`): every encoding is padded to it.
    /// Default 1 048 576.
    pub max_padding: usize,
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
        max_json_values: 8 << 20,
        max_padding: 1 << 20,
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
            max_json_values: u64::MAX,
            max_padding: usize::MAX,
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

/// The bytes of `path`, read only if it holds at most `max` (the value of
/// [`FileLimits`] field `field`); `Err` is the message to give, naming the
/// size and how to raise the limit. The size is checked before reading and
/// again while reading: a pipe or a device (`/dev/zero`) reports none.
pub(crate) fn read_limited(path: &Path, max: u64, field: &str) -> Result<Vec<u8>, String> {
    let too_large = |len: String| {
        format!(
            "is {len} bytes, more than a file of its kind may be ({})",
            raise(field, max)
        )
    };
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it ({e})"))?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read it ({e})"))?
        .len();
    if len > max {
        return Err(too_large(len.to_string()));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it ({e})"))?;
    if bytes.len() as u64 > max {
        return Err(too_large(format!("more than {max}")));
    }
    Ok(bytes)
}

/// [`read_limited`] as text.
pub(crate) fn read_text_limited(path: &Path, max: u64, field: &str) -> Result<String, String> {
    String::from_utf8(read_limited(path, max, field)?)
        .map_err(|e| format!("is not UTF-8 text ({e})"))
}

//! Small JSON files of a model directory (`config.json`,
//! `generation_config.json`, indexes), read with their size checked before
//! anything is allocated for them.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::nn::file_limits::{FileLimits, read_text_limited};

/// `message` about `path` as a checkpoint error.
fn bad(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{}: {message}", path.display()))
}

/// The text of `path`, refused past `max` bytes (the value of [`FileLimits`]
/// field `field`) before it is read.
pub(crate) fn read_text(path: &Path, max: u64, field: &str) -> Result<String> {
    read_text_limited(path, max, field).map_err(|m| bad(path, m))
}

/// `path` parsed as JSON (at most [`FileLimits::max_json_bytes`]).
pub(crate) fn read_json_file(path: &Path) -> Result<Value> {
    let max = FileLimits::current().max_json_bytes;
    let text = read_text(path, max, "max_json_bytes")?;
    serde_json::from_str(&text).map_err(|e| bad(path, format!("not valid JSON ({e})")))
}

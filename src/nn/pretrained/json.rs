//! Small JSON files of a model directory (`config.json`,
//! `generation_config.json`, indexes), read with their size checked before
//! anything is allocated for them.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// `message` about `path` as a checkpoint error.
fn bad(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Checkpoint(format!("{}: {message}", path.display()))
}

/// The largest config-like JSON file read: real ones are a few KB, the
/// largest sharded indexes a few hundred.
pub(crate) const MAX_JSON_BYTES: u64 = 64 << 20;

/// The text of `path`, refused past `max` bytes before it is read.
pub(crate) fn read_text(path: &Path, max: u64) -> Result<String> {
    let len = std::fs::metadata(path)
        .map_err(|e| bad(path, format!("cannot read it ({e})")))?
        .len();
    if len > max {
        return Err(bad(
            path,
            format!("is {len} bytes, more than the {max} a file of its kind may be"),
        ));
    }
    std::fs::read_to_string(path).map_err(|e| bad(path, format!("cannot read it ({e})")))
}

/// `path` parsed as JSON (at most [`MAX_JSON_BYTES`]).
pub(crate) fn read_json_file(path: &Path) -> Result<Value> {
    let text = read_text(path, MAX_JSON_BYTES)?;
    serde_json::from_str(&text).map_err(|e| bad(path, format!("not valid JSON ({e})")))
}

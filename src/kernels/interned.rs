//! Generated WGSL kept for the program's life: pipeline specs take
//! `&'static str`, and each composed source is built once per process.

/// A generated WGSL source (or entry name), built once per process under
/// `key` and kept for the program's life: pipeline specs take `&'static str`.
pub(crate) fn interned(key: &str, build: impl FnOnce() -> String) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(s) = cache.get(key) {
        return s;
    }
    let s: &'static str = Box::leak(build().into_boxed_str());
    cache.insert(key.to_string(), s);
    s
}

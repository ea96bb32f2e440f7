//! Kernel variants chosen by measurement: at a kernel family's first use
//! per shape class on an adapter, time each candidate on the device, keep
//! the fastest, and remember it in memory and on disk, one file per
//! adapter, driver, host CPU and version of the kernels' code. The
//! candidates measured against each other compute the same bits (they
//! differ in workgroup shape, not in arithmetic order: the kernels' tests
//! check it), so ranks and processes that measure apart still compute
//! alike. Kernels whose arithmetic order differs (the GEMV's split-K
//! entry, the tree-reduced norm) are picked by adapter type, which every
//! rank of a mesh over like adapters sees alike, and only their knobs are
//! measured.
//!
//! Settings ([`Tuning`], the `tuning` field of the process's settings:
//! `device/settings/`): `WGPU_TP_TUNE=off` turns measuring and the disk cache
//! off (every kernel takes its vendor / Mesa guess, as before);
//! `WGPU_TP_TUNE_DIR` is the cache directory (default
//! `$XDG_CACHE_HOME/wgpu-tp/tune`, else `~/.cache/wgpu-tp/tune`; measuring
//! still happens when none can be found or written);
//! `WGPU_TP_TUNE_BUDGET_MS` bounds the time a process spends measuring,
//! pipeline builds included (default 3000): past it, kernels take their
//! guesses until a later process measures them. In a browser nothing is
//! measured (waiting would block the page).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use web_time::Instant;

use super::context::Device;
use super::recording::lock;
use super::settings::{Settings, Tuning, tuning};
use crate::error::Result;

/// Timed runs of each candidate after its warm-up (the fastest counts).
const RUNS: usize = 3;

/// What the process knows: per device key, per shape class, the choice.
#[derive(Default)]
struct Known {
    choices: BTreeMap<String, BTreeMap<String, String>>,
    /// Device keys whose disk file was read.
    loaded: Vec<String>,
    /// Time spent measuring so far.
    spent: Duration,
}

fn known() -> &'static Mutex<Known> {
    static KNOWN: OnceLock<Mutex<Known>> = OnceLock::new();
    KNOWN.get_or_init(Default::default)
}

/// The host CPU's model name (a CPU adapter's speed is the host's), read
/// once: every tuned dispatch asks.
fn cpu_model() -> &'static str {
    static MODEL: OnceLock<String> = OnceLock::new();
    MODEL.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default()
    })
}

/// What a measurement holds for: the adapter, its driver, the host CPU for
/// CPU adapters, this crate's version and its kernels' code (`build.rs`
/// hashes `shaders/` and `src/kernels/`: a choice timed on other code is
/// timed again).
pub(crate) fn device_key(device: &Device) -> String {
    let info = device.adapter_info();
    let cpu = if device.is_cpu() { cpu_model() } else { "" };
    format!(
        "{} | {:?} | {} {} | {} | wgpu-tp {} kernels {}",
        info.name,
        info.backend,
        info.driver,
        info.driver_info,
        cpu,
        env!("CARGO_PKG_VERSION"),
        Settings::kernels_hash()
    )
}

/// The file in `dir` a device key's choices live in: the key with
/// everything but letters, digits, `.` and `-` made `_`.
fn cache_file(dir: &Option<PathBuf>, key: &str) -> Option<PathBuf> {
    let name: String = key
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                true => c,
                false => '_',
            },
        )
        .collect();
    Some(dir.as_ref()?.join(format!("{name}.json")))
}

/// Read a device key's file into memory once (a missing or unreadable file
/// is an empty one: the cache only saves time).
fn load(k: &mut Known, dir: &Option<PathBuf>, key: &str) {
    if k.loaded.iter().any(|l| l == key) {
        return;
    }
    k.loaded.push(key.to_string());
    let read = cache_file(dir, key)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|s| serde_json::from_str::<BTreeMap<String, String>>(&s).ok());
    if let Some(map) = read {
        let mine = k.choices.entry(key.to_string()).or_default();
        for (class, choice) in map {
            mine.entry(class).or_insert(choice);
        }
    }
}

/// Write a device key's choices (to a temporary file, then renamed, so a
/// reader never sees half a file). Failure only costs a later measurement.
fn save(dir: &Option<PathBuf>, key: &str, map: &BTreeMap<String, String>) {
    let Some(file) = cache_file(dir, key) else {
        return;
    };
    let Some(dir) = file.parent() else { return };
    let tmp = file.with_extension(format!("json.{}", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok()
        && serde_json::to_string_pretty(map)
            .ok()
            .is_some_and(|s| std::fs::write(&tmp, s).is_ok());
    if ok && std::fs::rename(&tmp, &file).is_ok() {
        prune(dir, &file);
    }
}

/// Remove the files in `dir` of `file`'s adapter, driver, CPU and crate
/// version that other kernel code wrote (their choices timed code that is
/// gone; each edit of a kernel would otherwise leave one behind).
fn prune(dir: &std::path::Path, file: &std::path::Path) {
    let Some(name) = file.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let Some(prefix) = name.find("_kernels_").map(|i| &name[..i]) else {
        return;
    };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let other = e.file_name();
        let other = other.to_string_lossy();
        if other != name && other.starts_with(prefix) && other.ends_with(".json") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The file where `device`'s choices are kept under `tuning`'s directory.
pub fn tuning_file(device: &Device, tuning: &Tuning) -> Option<PathBuf> {
    cache_file(&tuning.dir, &device_key(device))
}

/// The choices this process holds (measured or read from disk), as
/// (device key, shape class, choice), for benches to print.
pub fn tuned_choices() -> Vec<(String, String, String)> {
    let k = lock(known());
    k.choices
        .iter()
        .flat_map(|(d, m)| {
            m.iter()
                .map(move |(c, v)| (d.clone(), c.clone(), v.clone()))
        })
        .collect()
}

/// The candidate of `candidates` (names) that `device` runs fastest for the
/// shape class `class`: remembered, read from disk, or measured now by
/// `run(i)` recording candidate `i` (every candidate must compute the same
/// result). `None` when tuning is off, or the budget is spent: the caller
/// takes its guess. `cost(i)` scales candidate `i`'s measured time (1 for
/// most; more for one that must win by a margin to pay for what it holds).
pub(crate) fn choose(
    device: &Device,
    class: &str,
    candidates: &[String],
    cost: impl Fn(usize) -> f64,
    mut run: impl FnMut(usize) -> Result<()>,
) -> Result<Option<usize>> {
    let t = tuning();
    if !t.enabled || candidates.len() < 2 {
        return Ok(None);
    }
    let key = device_key(device);
    let find = |k: &Known| {
        let choice = k.choices.get(&key)?.get(class)?;
        candidates.iter().position(|c| c == choice)
    };
    {
        let mut k = lock(known());
        load(&mut k, &t.dir, &key);
        if let Some(i) = find(&k) {
            return Ok(Some(i));
        }
        if k.spent >= t.budget {
            return Ok(None);
        }
    }
    // Measure (one measurement at a time in the process).
    static MEASURING: Mutex<()> = Mutex::new(());
    let _one = lock(&MEASURING);
    if let Some(i) = find(&lock(known())) {
        return Ok(Some(i));
    }
    let start = Instant::now();
    device.synchronize()?;
    let mut best = (Duration::MAX, 0);
    for i in 0..candidates.len() {
        // Warm-up: builds the pipeline.
        run(i)?;
        device.synchronize()?;
        for _ in 0..RUNS {
            let t = Instant::now();
            run(i)?;
            device.synchronize()?;
            best = best.min((t.elapsed().mul_f64(cost(i)), i));
        }
    }
    let mut k = lock(known());
    k.spent += start.elapsed();
    let map = k.choices.entry(key.clone()).or_default();
    map.insert(class.to_string(), candidates[best.1].clone());
    let snapshot = map.clone();
    drop(k);
    save(&t.dir, &key, &snapshot);
    Ok(Some(best.1))
}

/// The choice already made for `class` on `device` (in this process or on
/// disk), without measuring: `None` where tuning is off or nothing is known.
pub(crate) fn known_choice(device: &Device, class: &str) -> Option<String> {
    let t = tuning();
    if !t.enabled {
        return None;
    }
    let key = device_key(device);
    let mut k = lock(known());
    load(&mut k, &t.dir, &key);
    k.choices.get(&key)?.get(class).cloned()
}

/// Whether a class not yet known would be measured now: tuning on and its
/// budget not spent.
pub(crate) fn can_measure() -> bool {
    let t = tuning();
    t.enabled && lock(known()).spent < t.budget
}

/// Record `choice` for `class` on `device` in this process, as a
/// measurement would (for tests of what a choice implies).
#[cfg(test)]
pub(crate) fn remember(device: &Device, class: &str, choice: &str) {
    let key = device_key(device);
    let mut k = lock(known());
    let map = k.choices.entry(key).or_default();
    map.insert(class.to_string(), choice.to_string());
}

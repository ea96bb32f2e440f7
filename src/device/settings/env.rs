//! [`Settings`] read from `WGPU_TP_*` variables: one parser per variable,
//! one spelling of on/off for every switch, and a warning (never silence)
//! for a value or a name the crate does not know.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::kinds::{AttentionEntries, GemmTile, GemmVariant, LimitsPreset};
use super::values::Settings;

/// How every switch is spelled (case-insensitive).
const ON_OFF: &str = "1|on|true|yes or 0|off|false|no";

/// The variables the library reads: (name, the values it takes, its default).
const VARIABLES: &[(&str, &str, &str)] = &[
    ("WGPU_TP_LIMITS", "adapter, webgpu or downlevel", "adapter"),
    (
        "WGPU_TP_TRACE",
        "a file path for the Chrome JSON trace",
        "no trace",
    ),
    ("WGPU_TP_TUNE", ON_OFF, "on (off in a browser)"),
    (
        "WGPU_TP_TUNE_DIR",
        "a directory (empty: keep no choices on disk)",
        "$XDG_CACHE_HOME/wgpu-tp/tune, else ~/.cache/wgpu-tp/tune",
    ),
    (
        "WGPU_TP_TUNE_BUDGET_MS",
        "a whole number of milliseconds",
        "3000",
    ),
    (
        "WGPU_TP_GEMM_VARIANT",
        "auto, texture, sampled-texture, storage-texture, buffer (or cpu), tiled, coop, \
         packed-buffer (or generic), gemv",
        "auto",
    ),
    (
        "WGPU_TP_GEMM_TILE",
        "TMxTN/WG[m|n|s], e.g. 32x8/8s (TN a positive multiple of 4)",
        "chosen by adapter and shape",
    ),
    (
        "WGPU_TP_GEMV_TEXTURE",
        "auto, or 1|on|true|yes or 0|off|false|no",
        "auto",
    ),
    ("WGPU_TP_PACK_CACHE", ON_OFF, "on"),
    (
        "WGPU_TP_ATTENTION_ENTRIES",
        "auto, scalar, buffers or textures",
        "auto",
    ),
    ("WGPU_TP_MPI_TIMEOUT", "a positive number of seconds", "300"),
];

/// Variables this crate's build, tests, benchmarks and examples read, not
/// the library: known names, so they draw no warning.
const ELSEWHERE: &[&str] = &[
    "WGPU_TP_KERNELS_HASH",
    "WGPU_TP_REQUIRE_F16",
    "WGPU_TP_REQUIRE_COOP",
    "WGPU_TP_SEED",
    "WGPU_TP_MPI_WORKER",
    "WGPU_TP_MPI_TMP",
    "WGPU_TP_BENCH_GPT2",
    "WGPU_TP_BENCH_MAX_MIB",
    "WGPU_TP_BENCH_STEPS",
    "WGPU_TP_PROJECT_GPU_STEP_S",
    "WGPU_TP_OVERLAP",
    "WGPU_TP_TRAIN_MODEL",
    "WGPU_TP_GPT2_BLOCK_MIB",
    "WGPU_TP_GPT2_DTYPE",
    "WGPU_TP_GPT2_LAYERS",
    "WGPU_TP_GPT2_LOAD",
    "WGPU_TP_GPT2_RANKS",
    "WGPU_TP_GPT2_SHARED",
    "WGPU_TP_GPT2_TOP",
    "WGPU_TP_DECODE_BLOCK_MIB",
    "WGPU_TP_DECODE_GGUF",
    "WGPU_TP_DECODE_GUESSES",
    "WGPU_TP_DECODE_MODEL",
    "WGPU_TP_DECODE_PROMPT",
    "WGPU_TP_DECODE_RANKS",
    "WGPU_TP_DECODE_SHARED",
    "WGPU_TP_DECODE_TOKENS",
    "WGPU_TP_DECODE_TOP",
    "WGPU_TP_DECODE_WEIGHTS",
    "WGPU_TP_LORA_CASE",
    "WGPU_TP_LORA_CASES",
    "WGPU_TP_LORA_LAYERS",
    "WGPU_TP_KEEP_ADAPTERS",
    "WGPU_TP_FUZZ_ITERS",
    "WGPU_TP_FUZZ_SEED",
];

/// A switch's value: `1|on|true|yes` or `0|off|false|no`, any case.
fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// Parse `value` into `settings` as variable `name` says: `Ok(true)` where
/// it was set, `Ok(false)` for a name the library does not read, `Err`
/// for a value it cannot take (the field keeps its default).
fn apply(s: &mut Settings, name: &str, value: &str) -> Result<bool, ()> {
    let v = value.trim();
    let lower = v.to_ascii_lowercase();
    let auto = lower.is_empty() || lower == "auto";
    match name {
        "WGPU_TP_LIMITS" => {
            s.limits = match lower.as_str() {
                "" | "adapter" => LimitsPreset::Adapter,
                "webgpu" => LimitsPreset::WebGpu,
                "downlevel" => LimitsPreset::Downlevel,
                _ => return Err(()),
            }
        }
        "WGPU_TP_TRACE" => s.trace = (!v.is_empty()).then(|| PathBuf::from(v)),
        "WGPU_TP_TUNE" if v.is_empty() => {}
        "WGPU_TP_TUNE" => s.tuning.enabled = parse_switch(v).ok_or(())? && s.tuning.enabled,
        "WGPU_TP_TUNE_DIR" => s.tuning.dir = (!v.is_empty()).then(|| PathBuf::from(v)),
        "WGPU_TP_TUNE_BUDGET_MS" if v.is_empty() => {}
        "WGPU_TP_TUNE_BUDGET_MS" => {
            s.tuning.budget = Duration::from_millis(v.parse().map_err(|_| ())?)
        }
        "WGPU_TP_GEMM_VARIANT" => s.gemm_variant = GemmVariant::parse(&lower).ok_or(())?,
        "WGPU_TP_GEMM_TILE" if v.is_empty() => {}
        "WGPU_TP_GEMM_TILE" => s.gemm_tile = Some(GemmTile::parse(v).ok_or(())?),
        "WGPU_TP_GEMV_TEXTURE" if auto => {}
        "WGPU_TP_GEMV_TEXTURE" => s.gemv_texture = Some(parse_switch(v).ok_or(())?),
        "WGPU_TP_PACK_CACHE" if v.is_empty() => {}
        "WGPU_TP_PACK_CACHE" => s.pack_cache = parse_switch(v).ok_or(())?,
        "WGPU_TP_ATTENTION_ENTRIES" => {
            s.attention_entries = match lower.as_str() {
                _ if auto => None,
                "scalar" => Some(AttentionEntries::Scalar),
                "buffers" => Some(AttentionEntries::Buffers),
                "textures" => Some(AttentionEntries::Textures),
                _ => return Err(()),
            }
        }
        "WGPU_TP_MPI_TIMEOUT" if v.is_empty() => {}
        "WGPU_TP_MPI_TIMEOUT" => {
            let secs: f64 = v.parse().map_err(|_| ())?;
            if !(secs.is_finite() && secs > 0.0) {
                return Err(());
            }
            s.mpi_timeout = Duration::try_from_secs_f64(secs).map_err(|_| ())?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The tuning cache directory an environment names, where one can be named.
fn cache_dir(vars: &BTreeMap<String, String>) -> Option<PathBuf> {
    let set = |k: &str| vars.get(k).filter(|v| !v.is_empty());
    let base = match set("XDG_CACHE_HOME") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(set("HOME")?).join(".cache"),
    };
    Some(base.join("wgpu-tp").join("tune"))
}

impl Settings {
    /// Every variable the library reads: (name, the values it takes, its
    /// default), as docs/SETTINGS.md lists them.
    pub const VARIABLES: &[(&str, &str, &str)] = VARIABLES;

    /// Variables the crate's build, tests, benchmarks and examples read
    /// (not the library): known names, which draw no warning.
    pub const OTHER_VARIABLES: &[&str] = ELSEWHERE;

    /// The settings this process's environment gives, with a warning for
    /// each malformed value (its field keeps the default) and each unknown
    /// `WGPU_TP_*` name. In a browser there is no environment: the defaults.
    pub fn from_env() -> (Settings, Vec<String>) {
        #[cfg(target_arch = "wasm32")]
        return (Settings::default(), Vec::new());
        #[cfg(not(target_arch = "wasm32"))]
        Settings::from_vars(std::env::vars_os().map(|(k, v)| {
            let text = |s: std::ffi::OsString| s.to_string_lossy().into_owned();
            (text(k), text(v))
        }))
    }

    /// [`Settings::from_env`] over the variables given (name, value) instead
    /// of the process's (a later duplicate wins): the settings, and one
    /// warning per malformed value or unknown `WGPU_TP_*` name, each naming
    /// the variable, the value and what it takes. An empty value is the
    /// default (`WGPU_TP_TUNE_DIR`: no directory).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> (Settings, Vec<String>) {
        let vars: BTreeMap<String, String> = vars.into_iter().collect();
        let mut s = Settings {
            tuning: super::kinds::Tuning {
                dir: cache_dir(&vars),
                ..Settings::default().tuning
            },
            ..Settings::default()
        };
        let mut warnings = Vec::new();
        for (name, value) in vars.iter().filter(|(k, _)| k.starts_with("WGPU_TP_")) {
            match apply(&mut s, name, value) {
                Ok(true) => {}
                Ok(false) if ELSEWHERE.contains(&name.as_str()) => {}
                Ok(false) => {
                    let known: Vec<&str> = VARIABLES.iter().map(|v| v.0).collect();
                    warnings.push(format!(
                        "{name} is not a wgpu-tp setting and is ignored; the library reads {} \
                         (docs/SETTINGS.md)",
                        known.join(", ")
                    ));
                }
                Err(()) => {
                    let (_, takes, default) = VARIABLES
                        .iter()
                        .find(|v| v.0 == name)
                        .copied()
                        .unwrap_or_default();
                    warnings.push(format!(
                        "{name}={value:?} is not a value it takes ({takes}); using the default \
                         ({default})"
                    ));
                }
            }
        }
        (s, warnings)
    }
}

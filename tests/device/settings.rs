//! The settings surface (`device/settings/`): every `WGPU_TP_*` variable
//! parsed from a supplied map (never the process's environment, which
//! other tests share), every spelling of on/off, a warning naming the
//! variable, the value and what it takes for each malformed value (the
//! default kept) and each unknown name, setters that refuse bad values,
//! and docs/SETTINGS.md listing every variable.

use std::path::PathBuf;
use std::time::Duration;

use wgpu_tp::kernels::GemmVariant;
use wgpu_tp::{AttentionEntries, GemmTile, LimitsPreset, Settings, TileLanes};

/// The settings and warnings of an environment holding only `vars`.
fn parse(vars: &[(&str, &str)]) -> (Settings, Vec<String>) {
    Settings::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

/// The settings of `vars`, which must draw no warning.
fn clean(vars: &[(&str, &str)]) -> Settings {
    let (s, warnings) = parse(vars);
    assert!(warnings.is_empty(), "{vars:?}: {warnings:?}");
    s
}

const ON: [&str; 9] = ["1", "on", "true", "yes", "ON", "True", "YES", " on ", "On"];
const OFF: [&str; 8] = ["0", "off", "false", "no", "OFF", "False", "NO", "Off"];

#[test]
fn an_empty_environment_gives_the_defaults() {
    let s = clean(&[("PATH", "/bin"), ("WGPU_BACKEND", "vulkan")]);
    assert_eq!(s, Settings::default());
    assert_eq!(s.limits, LimitsPreset::Adapter);
    assert!(s.tuning.enabled && s.pack_cache);
    assert_eq!(s.tuning.budget, Duration::from_millis(3000));
    assert_eq!(s.mpi_timeout, Duration::from_secs(300));
    assert_eq!(
        (s.trace, s.gemm_tile, s.gemv_texture, s.attention_entries),
        (None, None, None, None)
    );
    assert_eq!(s.gemm_variant, GemmVariant::Auto);
    assert_eq!(Settings::kernels_hash().len(), 16);
}

#[test]
fn every_switch_takes_every_spelling_of_on_and_off() {
    for v in ON {
        let s = clean(&[
            ("WGPU_TP_TUNE", v),
            ("WGPU_TP_PACK_CACHE", v),
            ("WGPU_TP_GEMV_TEXTURE", v),
        ]);
        assert!(s.tuning.enabled && s.pack_cache, "{v:?}");
        assert_eq!(s.gemv_texture, Some(true), "{v:?}");
    }
    for v in OFF {
        let s = clean(&[
            ("WGPU_TP_TUNE", v),
            ("WGPU_TP_PACK_CACHE", v),
            ("WGPU_TP_GEMV_TEXTURE", v),
        ]);
        assert!(!s.tuning.enabled && !s.pack_cache, "{v:?}");
        assert_eq!(s.gemv_texture, Some(false), "{v:?}");
    }
    // `auto` (or empty) leaves the texture to the adapter.
    for v in ["auto", "AUTO", ""] {
        assert_eq!(clean(&[("WGPU_TP_GEMV_TEXTURE", v)]).gemv_texture, None);
    }
}

#[test]
fn every_variable_parses_its_values() {
    for (v, want) in [
        ("webgpu", LimitsPreset::WebGpu),
        ("WebGPU", LimitsPreset::WebGpu),
        ("downlevel", LimitsPreset::Downlevel),
        ("adapter", LimitsPreset::Adapter),
        ("", LimitsPreset::Adapter),
    ] {
        assert_eq!(clean(&[("WGPU_TP_LIMITS", v)]).limits, want, "{v:?}");
    }
    assert_eq!(LimitsPreset::WebGpu.limits(), Some(wgpu::Limits::default()));
    assert_eq!(LimitsPreset::Adapter.limits(), None);
    let s = clean(&[
        ("WGPU_TP_TRACE", "run.json"),
        ("WGPU_TP_TUNE_DIR", "/tmp/tune"),
        ("WGPU_TP_TUNE_BUDGET_MS", "250"),
        ("WGPU_TP_MPI_TIMEOUT", "1.5"),
        ("WGPU_TP_GEMM_TILE", "32x8/8s"),
    ]);
    assert_eq!(s.trace, Some(PathBuf::from("run.json")));
    assert_eq!(s.tuning.dir, Some(PathBuf::from("/tmp/tune")));
    assert_eq!(s.tuning.budget, Duration::from_millis(250));
    assert_eq!(s.mpi_timeout, Duration::from_millis(1500));
    let tile = GemmTile {
        rows: 32,
        columns: 8,
        workgroup: 8,
        lanes: TileLanes::SharedRows,
    };
    assert_eq!(s.gemm_tile, Some(tile));
    for (name, lanes) in [
        ("4x16/8m", TileLanes::Rows),
        ("4x16/16n", TileLanes::Columns),
        ("4x16/16", TileLanes::Columns),
    ] {
        let t = GemmTile::parse(name).expect(name);
        assert_eq!((t.rows, t.columns, t.lanes), (4, 16, lanes), "{name}");
        assert_eq!(
            GemmTile::parse(&t.to_string()),
            Some(t),
            "{name} round trip"
        );
    }
    // Every variant by every name it takes, in any case.
    for (variant, names) in GemmVariant::NAMES {
        for name in names.iter().flat_map(|n| [n.to_string(), n.to_uppercase()]) {
            let s = clean(&[("WGPU_TP_GEMM_VARIANT", &name)]);
            assert_eq!(s.gemm_variant, *variant, "{name}");
        }
    }
    for (v, want) in [
        ("scalar", Some(AttentionEntries::Scalar)),
        ("buffers", Some(AttentionEntries::Buffers)),
        ("Textures", Some(AttentionEntries::Textures)),
        ("auto", None),
    ] {
        let s = clean(&[("WGPU_TP_ATTENTION_ENTRIES", v)]);
        assert_eq!(s.attention_entries, want, "{v:?}");
    }
}

#[test]
fn the_tuning_cache_follows_xdg_then_home_and_empty_means_none() {
    let dir = |vars: &[(&str, &str)]| clean(vars).tuning.dir;
    let under = |base: &str| Some(PathBuf::from(base).join("wgpu-tp").join("tune"));
    assert_eq!(dir(&[("HOME", "/home/u")]), under("/home/u/.cache"));
    assert_eq!(
        dir(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/c")]),
        under("/c")
    );
    assert_eq!(
        dir(&[("HOME", "/home/u"), ("WGPU_TP_TUNE_DIR", "/t")]),
        Some(PathBuf::from("/t"))
    );
    assert_eq!(dir(&[("HOME", "/home/u"), ("WGPU_TP_TUNE_DIR", "")]), None);
    assert_eq!(dir(&[]), None);
}

#[test]
fn a_malformed_value_is_a_warning_naming_it_and_the_default_is_kept() {
    let default = Settings::default();
    for (name, bad) in [
        ("WGPU_TP_LIMITS", "webgpu2"),
        ("WGPU_TP_TUNE", "maybe"),
        ("WGPU_TP_TUNE_BUDGET_MS", "3s"),
        ("WGPU_TP_GEMM_VARIANT", "fastest"),
        ("WGPU_TP_GEMM_TILE", "32x6/8s"),
        ("WGPU_TP_GEMM_TILE", "0x8/8s"),
        ("WGPU_TP_GEMM_TILE", "32x8"),
        ("WGPU_TP_GEMV_TEXTURE", "2"),
        ("WGPU_TP_PACK_CACHE", "disabled"),
        ("WGPU_TP_ATTENTION_ENTRIES", "vec4"),
        ("WGPU_TP_MPI_TIMEOUT", "0"),
        ("WGPU_TP_MPI_TIMEOUT", "-3"),
        ("WGPU_TP_MPI_TIMEOUT", "NaN"),
        ("WGPU_TP_MPI_TIMEOUT", "soon"),
    ] {
        let (s, warnings) = parse(&[(name, bad)]);
        assert_eq!(s, default, "{name}={bad}: the default stays");
        let [w] = warnings.as_slice() else {
            panic!("{name}={bad}: one warning, got {warnings:?}");
        };
        assert!(w.contains(name) && w.contains(bad), "names both: {w}");
        assert!(w.contains("default"), "says the default is used: {w}");
        let takes = Settings::VARIABLES.iter().find(|v| v.0 == name).unwrap().1;
        assert!(w.contains(takes), "says what it takes: {w}");
    }
    // A switch's warning spells every accepted value.
    let (_, w) = parse(&[("WGPU_TP_PACK_CACHE", "nope")]);
    for v in ["1", "on", "true", "yes", "0", "off", "false", "no"] {
        assert!(w[0].contains(v), "{v} in {w:?}");
    }
}

#[test]
fn an_unknown_name_is_a_warning_listing_the_known_ones() {
    let (s, warnings) = parse(&[("WGPU_TP_PACKCACHE", "0"), ("WGPU_TP_TUNE", "off")]);
    assert!(!s.tuning.enabled, "the known one still applies");
    assert!(s.pack_cache, "the misspelt one changes nothing");
    let [w] = warnings.as_slice() else {
        panic!("one warning, got {warnings:?}");
    };
    assert!(w.contains("WGPU_TP_PACKCACHE"), "{w}");
    for (name, _, _) in Settings::VARIABLES {
        assert!(w.contains(name), "lists {name}: {w}");
    }
    // The variables the tests, benchmarks and build read draw none.
    let others: Vec<(&str, &str)> = Settings::OTHER_VARIABLES
        .iter()
        .map(|n| (*n, "1"))
        .collect();
    clean(&others);
}

#[test]
fn setters_refuse_bad_values_and_change_nothing() {
    let before = wgpu_tp::settings();
    let bad_tile = GemmTile {
        rows: 4,
        columns: 6,
        workgroup: 8,
        lanes: TileLanes::Rows,
    };
    let e = wgpu_tp::update_settings(|s| s.gemm_tile = Some(bad_tile)).unwrap_err();
    assert!(e.to_string().contains("gemm_tile"), "{e}");
    let e = wgpu_tp::update_settings(|s| s.mpi_timeout = Duration::ZERO).unwrap_err();
    assert!(e.to_string().contains("mpi_timeout"), "{e}");
    let mut s = wgpu_tp::settings();
    s.trace = Some(PathBuf::new());
    assert!(wgpu_tp::set_settings(s).is_err());
    let mut s = wgpu_tp::settings();
    s.tuning.dir = Some(PathBuf::new());
    assert!(wgpu_tp::set_settings(s).is_err());
    assert_eq!(
        wgpu_tp::settings(),
        before,
        "refused changes change nothing"
    );
    // A good change is seen (the MPI limit: no mesh of this binary reads it).
    let mpi = before.mpi_timeout;
    wgpu_tp::update_settings(|s| s.mpi_timeout = mpi + Duration::from_secs(1)).unwrap();
    assert_eq!(
        wgpu_tp::settings().mpi_timeout,
        mpi + Duration::from_secs(1)
    );
    wgpu_tp::update_settings(|s| s.mpi_timeout = mpi).unwrap();
    // `tuning` / `set_tuning` are the `tuning` field.
    assert_eq!(wgpu_tp::tuning(), wgpu_tp::settings().tuning);
}

#[test]
fn docs_settings_lists_every_variable_in_one_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/SETTINGS.md");
    let doc = std::fs::read_to_string(path).expect("docs/SETTINGS.md");
    let rows: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| `WGPU_TP_"))
        .collect();
    let names = Settings::VARIABLES.iter().map(|v| v.0);
    for name in names.chain(Settings::OTHER_VARIABLES.iter().copied()) {
        let n = rows
            .iter()
            .filter(|r| r.starts_with(&format!("| `{name}`")))
            .count();
        assert_eq!(n, 1, "{name}: one row in docs/SETTINGS.md's table");
    }
    for name in rows.iter().filter_map(|r| r.split('`').nth(1)) {
        let known = Settings::VARIABLES.iter().any(|v| v.0 == name)
            || Settings::OTHER_VARIABLES.contains(&name);
        assert!(
            known,
            "{name} is in the table but the crate does not know it"
        );
    }
}

//! `nn::RopeConfig` against transformers' own numbers
//! (`tests/fixtures/hf/rope/rope.json`, written by `LlamaRotaryEmbedding`
//! for every RoPE variant: default, linear, dynamic, llama3, yarn with its
//! options, longrope within and past the original context): each case's `RopeConfig` is built from its `config` as the JSON
//! spells it (`rope_parameters`, `partial_rotary_factor`, defaults as
//! transformers fills them), and its inverse frequencies, attention scaling
//! and `cos`, `sin` tables must equal the fixture's within 1e-6 relative
//! (about 2 f32 ulp; the tables with an absolute floor of 1e-6 times the
//! scaling, where a cosine or sine crosses 0). `dynamic` is evaluated at the
//! case's sequence length, and at a short one (a fresh module keeps the
//! default frequencies).

use std::path::Path;

use serde_json::Value;
use wgpu_tp::nn::{RopeConfig, RopeScaling};

/// Relative tolerance against transformers' f32 values.
const TOL: f64 = 1e-6;

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/rope/rope.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The `RopeConfig` of a case's Hugging Face `config`.
fn rope_config(config: &Value) -> RopeConfig {
    let params = &config["rope_parameters"];
    let num = |v: &Value, key: &str| v.get(key).and_then(Value::as_f64);
    let int = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).map(|x| x as usize);
    let max_pos = int(config, "max_position_embeddings").unwrap();
    let head_dim = int(config, "head_dim").unwrap_or_else(|| {
        int(config, "hidden_size").unwrap() / int(config, "num_attention_heads").unwrap()
    });
    let rope_type = params["rope_type"].as_str().unwrap();
    // Every variant but Llama's default honours partial_rotary_factor.
    let partial = num(params, "partial_rotary_factor")
        .or_else(|| num(config, "partial_rotary_factor"))
        .unwrap_or(1.0);
    let dim = if rope_type == "default" {
        head_dim
    } else {
        (head_dim as f64 * partial) as usize
    };
    // transformers' standardize_rope_params: absent, it is max_position_embeddings.
    let original = int(params, "original_max_position_embeddings").unwrap_or(max_pos);
    let factor = num(params, "factor");
    let scaling = match rope_type {
        "default" => RopeScaling::Default,
        "linear" => RopeScaling::Linear {
            factor: factor.unwrap(),
        },
        "dynamic" => RopeScaling::Dynamic {
            factor: factor.unwrap(),
        },
        "llama3" => RopeScaling::Llama3 {
            factor: factor.unwrap(),
            low_freq_factor: num(params, "low_freq_factor").unwrap(),
            high_freq_factor: num(params, "high_freq_factor").unwrap(),
            original_max_position_embeddings: original,
        },
        "yarn" => RopeScaling::Yarn {
            factor,
            original_max_position_embeddings: original,
            attention_factor: num(params, "attention_factor"),
            beta_fast: num(params, "beta_fast"),
            beta_slow: num(params, "beta_slow"),
            mscale: num(params, "mscale"),
            mscale_all_dim: num(params, "mscale_all_dim"),
            truncate: params
                .get("truncate")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        },
        "longrope" => RopeScaling::LongRope {
            short_factor: f64s(&params["short_factor"]),
            long_factor: f64s(&params["long_factor"]),
            factor,
            attention_factor: num(params, "attention_factor"),
            original_max_position_embeddings: original,
        },
        other => panic!("rope_type {other} has no RopeScaling"),
    };
    RopeConfig {
        theta: num(params, "rope_theta").unwrap(),
        head_dim: dim,
        rotary_dim: dim,
        scaling,
        max_position_embeddings: max_pos,
    }
}

/// Element-wise `|got − want| ≤ TOL·max(|want|, floor)`; returns the worst
/// `|got − want| / max(|want|, floor)`.
#[track_caller]
fn assert_within(what: &str, got: &[f32], want: &[f64], floor: f64) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let mut worst = 0.0f64;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let e = (*g as f64 - w).abs() / w.abs().max(floor);
        assert!(
            e <= TOL,
            "{what}: element {i}: got {g:e}, want {w:e} (relative {e:.2e})"
        );
        worst = worst.max(e);
    }
    worst
}

/// `cos` or `sin` `[n, dim]` of the fixture (`cat(freqs, freqs)`): both
/// halves hold the same `[n, dim/2]` table, which is returned.
fn half_table(what: &str, v: &Value, shape: &Value) -> Vec<f64> {
    let (rows, cols) = (
        shape[0].as_u64().unwrap() as usize,
        shape[1].as_u64().unwrap() as usize,
    );
    let full = f64s(v);
    assert_eq!(full.len(), rows * cols, "{what}: shape");
    let half = cols / 2;
    let mut out = Vec::with_capacity(rows * half);
    for r in full.chunks(cols) {
        assert_eq!(r[..half], r[half..], "{what}: halves differ");
        out.extend_from_slice(&r[..half]);
    }
    out
}

/// One evaluation of the fixture (positions `lo..=hi`) against `cfg`.
fn check_eval(what: &str, cfg: &RopeConfig, case: &Value) -> f64 {
    let pos = f64s(&case["position_ids"]);
    let (lo, hi) = (pos[0] as usize, pos[1] as usize);
    let (inv, scaling) = cfg.inv_freq(hi + 1);
    let want_scaling = case["attention_scaling"].as_f64().unwrap();
    let mut worst = assert_within(
        &format!("{what}: attention_scaling"),
        &[scaling],
        &[want_scaling],
        0.0,
    );
    worst = worst.max(assert_within(
        &format!("{what}: inv_freq"),
        &inv,
        &f64s(&case["inv_freq"]),
        0.0,
    ));
    let (cos, sin) = cfg.tables(lo..hi + 1);
    let floor = want_scaling.abs();
    for (name, got) in [("cos", &cos), ("sin", &sin)] {
        let want = half_table(
            &format!("{what}: {name}"),
            &case[name],
            &case[format!("{name}_shape")],
        );
        worst = worst.max(assert_within(&format!("{what}: {name}"), got, &want, floor));
    }
    worst
}

#[test]
fn rope_tables_equal_transformers_for_every_case() {
    let fixture = fixture();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 10, "rope.json has {} cases", cases.len());
    let mut worst = 0.0f64;
    for case in cases {
        let label = case["label"].as_str().unwrap();
        let cfg = rope_config(&case["config"]);
        assert_eq!(
            cfg.head_dim / 2,
            f64s(&case["inv_freq"]).len(),
            "{label}: rotated width"
        );
        worst = worst.max(check_eval(label, &cfg, case));
        // At initialisation: transformers takes the longest position as
        // max_position_embeddings − 1, except longrope, which starts from
        // its short factors (as a call within the original context).
        let init = match cfg.scaling {
            RopeScaling::LongRope { .. } => 1,
            _ => cfg.max_position_embeddings,
        };
        let (inv, _) = cfg.inv_freq(init);
        worst = worst.max(assert_within(
            &format!("{label}: inv_freq at init"),
            &inv,
            &f64s(&case["inv_freq_at_init"]),
            0.0,
        ));
        if let Some(short) = case.get("fresh_module_short") {
            worst = worst.max(check_eval(&format!("{label} (short)"), &cfg, short));
        }
    }
    eprintln!("[rope.json] worst relative difference {worst:.2e}");
}

/// Tables of a slice of positions are the matching rows of the whole
/// table (decoding asks for `past..past + n`), for the variants whose
/// frequencies do not depend on the call's length.
#[test]
fn rope_tables_of_later_positions_are_rows_of_the_whole_table() {
    let fixture = fixture();
    for case in fixture["cases"].as_array().unwrap() {
        let cfg = rope_config(&case["config"]);
        if matches!(
            cfg.scaling,
            RopeScaling::Dynamic { .. } | RopeScaling::LongRope { .. }
        ) {
            continue;
        }
        let half = cfg.head_dim / 2;
        let (cos, sin) = cfg.tables(0..20);
        let (c, s) = cfg.tables(7..13);
        let label = case["label"].as_str().unwrap();
        assert_eq!(c, cos[7 * half..13 * half], "{label}: cos");
        assert_eq!(s, sin[7 * half..13 * half], "{label}: sin");
    }
}

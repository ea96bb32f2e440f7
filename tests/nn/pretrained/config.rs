//! `Gpt2Config`: what a GPT-2 `config.json` says, its defaults and legacy
//! names, the activation names, refused options (with the key named), and
//! the round trip through `to_json`.

use wgpu_tp::kernels::Activation;
use wgpu_tp::models::Gpt2Config;
use wgpu_tp::nn::{ConfigFile, DecoderConfig};

fn parse(extra: &str) -> Result<Gpt2Config, String> {
    let text = format!(
        r#"{{"model_type": "gpt2", "vocab_size": 50, "n_embd": 16, "n_layer": 2, "n_head": 4{extra}}}"#
    );
    Gpt2Config::from_json(&text, "dir/config.json").map_err(|e| e.to_string())
}

#[test]
fn config_defaults_legacy_names_and_activations() {
    // n_ctx is the older name of n_positions; the rest take transformers' defaults.
    let c = parse(r#", "n_ctx": 12"#).unwrap();
    assert_eq!(
        (
            c.vocab_size,
            c.n_positions,
            c.n_embd,
            c.n_head,
            c.n_layer,
            c.ffn()
        ),
        (50, 12, 16, 4, 2, 64)
    );
    assert_eq!(
        (c.activation().unwrap(), c.layer_norm_epsilon, c.resid_pdrop),
        (Activation::Gelu, 1e-5, 0.1)
    );
    let c = parse(r#", "n_positions": 9, "n_inner": 24, "layer_norm_epsilon": 1e-6"#).unwrap();
    assert_eq!(
        (c.n_positions, c.ffn(), c.layer_norm_epsilon),
        (9, 24, 1e-6)
    );
    // transformers writes `n_inner: null`: 4 · n_embd.
    let c = parse(r#", "n_positions": 9, "n_inner": null"#).unwrap();
    assert_eq!(c.ffn(), 64);
    for (name, want) in [
        ("gelu_new", Activation::Gelu),
        ("gelu_pytorch_tanh", Activation::Gelu),
        ("gelu_fast", Activation::Gelu),
        ("relu", Activation::Relu),
        ("silu", Activation::Silu),
        ("swish", Activation::Silu),
    ] {
        let c = parse(&format!(
            r#", "n_positions": 9, "activation_function": "{name}""#
        ))
        .unwrap();
        assert_eq!(c.activation().unwrap(), want, "{name}");
    }
}

#[test]
fn config_refuses_what_gpt2_here_cannot_compute() {
    let cases = [
        (
            r#", "n_positions": 9, "activation_function": "gelu""#,
            "tanh",
        ),
        (
            r#", "n_positions": 9, "activation_function": "quick_gelu""#,
            "quick_gelu",
        ),
        (
            r#", "n_positions": 9, "add_cross_attention": true"#,
            "add_cross_attention",
        ),
        (
            r#", "n_positions": 9, "scale_attn_weights": false"#,
            "scale_attn_weights",
        ),
        (
            r#", "n_positions": 9, "scale_attn_by_inverse_layer_idx": true"#,
            "inverse_layer_idx",
        ),
        (r#", "n_positions": 9, "n_inner": 1e30"#, "n_inner"),
        (r#", "n_positions": 99999999999"#, "n_positions"),
        (r#", "n_positions": -3"#, "n_positions"),
        (r#", "n_positions": 9, "resid_pdrop": 1.5"#, "resid_pdrop"),
        ("", "n_ctx"),
    ];
    for (extra, needle) in cases {
        let err = parse(extra).expect_err(extra);
        assert!(
            err.contains(needle) && err.contains("config.json"),
            "{extra}: {err}"
        );
    }
    let err = Gpt2Config::from_json(r#"{"n_embd": 4}"#, "x/config.json").unwrap_err();
    assert!(err.to_string().contains("model_type"), "{err}");
    let err = Gpt2Config::from_json("{not json", "x/config.json").unwrap_err();
    assert!(err.to_string().contains("x/config.json"), "{err}");
    // A config built in code is checked as a file's is, before any model.
    let mut c = Gpt2Config::new(37, 16, 24, 3, 2);
    c.n_head = 5;
    assert!(c.check().unwrap_err().to_string().contains("n_head"));
}

#[test]
fn gpt2_config_round_trips_through_config_json() {
    let mut g = Gpt2Config::new(37, 16, 24, 3, 2);
    for (activation, ffn, eps) in [
        ("gelu_new", 96, 1e-5),
        ("relu", 40, 1e-6),
        ("silu", 17, 3e-5),
    ] {
        g.activation_function = activation.into();
        g.n_inner = (ffn != 96).then_some(ffn);
        g.layer_norm_epsilon = eps;
        (g.bos_token_id, g.eos_token_id) = (Some(1), Some(2));
        let text = g.to_json(&[]).unwrap();
        let back = Gpt2Config::from_json(&text, "config.json").unwrap();
        assert_eq!(back, g);
        assert_eq!(
            (back.ffn(), back.activation_function.as_str()),
            (ffn, activation)
        );
    }
    // The eos ids generation stops at are written, as one id or a list.
    let one: serde_json::Value = serde_json::from_str(&g.to_json(&[5]).unwrap()).unwrap();
    assert_eq!(one["eos_token_id"], 5);
    let two: serde_json::Value = serde_json::from_str(&g.to_json(&[5, 6]).unwrap()).unwrap();
    assert_eq!(two["eos_token_id"], serde_json::json!([5, 6]));
}

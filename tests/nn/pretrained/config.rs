//! `HfGpt2Config`: what a GPT-2 `config.json` says, its defaults and legacy
//! names, the activation names, refused options, and the round trip through
//! `GptConfig`.

use wgpu_tp::kernels::Activation;
use wgpu_tp::models::{GptConfig, HfGpt2Config};

fn parse(extra: &str) -> Result<HfGpt2Config, String> {
    let text = format!(
        r#"{{"model_type": "gpt2", "vocab_size": 50, "n_embd": 16, "n_layer": 2, "n_head": 4{extra}}}"#
    );
    HfGpt2Config::from_json(&text, "dir/config.json").map_err(|e| e.to_string())
}

#[test]
fn config_defaults_legacy_names_and_activations() {
    // n_ctx is the older name of n_positions; the rest take transformers' defaults.
    let c = parse(r#", "n_ctx": 12"#).unwrap();
    let g = c.to_gpt_config().unwrap();
    assert_eq!(
        (g.vocab, g.n_ctx, g.hidden, g.heads, g.layers, g.ffn),
        (50, 12, 16, 4, 2, 64)
    );
    assert_eq!(
        (g.activation, g.eps, g.dropout),
        (Activation::Gelu, 1e-5, 0.0)
    );
    let c = parse(r#", "n_positions": 9, "n_inner": 24, "layer_norm_epsilon": 1e-6"#).unwrap();
    let g = c.to_gpt_config().unwrap();
    assert_eq!((g.n_ctx, g.ffn, g.eps), (9, 24, 1e-6));
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
        assert_eq!(c.to_gpt_config().unwrap().activation, want, "{name}");
    }
}

#[test]
fn config_refuses_what_gpt_cannot_compute() {
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
        ("", "n_ctx"),
    ];
    for (extra, needle) in cases {
        let err = parse(extra).and_then(|c| c.to_gpt_config().map_err(|e| e.to_string()));
        let err = err.expect_err(extra);
        assert!(
            err.contains(needle) && err.contains("config.json"),
            "{extra}: {err}"
        );
    }
    let err = HfGpt2Config::from_json(r#"{"n_embd": 4}"#, "x/config.json").unwrap_err();
    assert!(err.to_string().contains("model_type"), "{err}");
    let err = HfGpt2Config::from_json("{not json", "x/config.json").unwrap_err();
    assert!(err.to_string().contains("x/config.json"), "{err}");
}

#[test]
fn gpt_config_round_trips_through_config_json() {
    let mut g = GptConfig::new(37, 16, 24, 3, 2);
    for (activation, ffn, eps) in [
        (Activation::Gelu, 96, 1e-5),
        (Activation::Relu, 40, 1e-6),
        (Activation::Silu, 17, 3e-5),
    ] {
        (g.activation, g.ffn, g.eps) = (activation, ffn, eps);
        let hf = HfGpt2Config::from(&g);
        assert_eq!(hf.n_inner, (ffn != 96).then_some(ffn));
        let back = HfGpt2Config::from_json(&hf.to_json(), "config.json").unwrap();
        assert_eq!(back, hf);
        let b = back.to_gpt_config().unwrap();
        assert_eq!(
            (
                b.vocab,
                b.n_ctx,
                b.hidden,
                b.heads,
                b.layers,
                b.ffn,
                b.activation,
                b.eps
            ),
            (37, 16, 24, 3, 2, ffn, activation, eps)
        );
    }
}

//! Chat templates in the browser: the same sandbox as on native
//! (`tests/nn/chat_limits.rs`), so a runaway template from a downloaded
//! model stops at a limit instead of freezing the page, and a real one
//! renders as transformers does.

use wasm_bindgen_test::wasm_bindgen_test;
use wgpu_tp::nn::{ChatMessage, ChatTemplate};

use crate::log;

/// SmolLM2's ChatML template.
const CHATML: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#[wasm_bindgen_test]
fn runaway_templates_stop_at_a_limit_in_the_browser() {
    let mut shared = String::new();
    for name in ["a", "b"] {
        shared += &format!("{{% set {name}0 = [0] %}}");
        for i in 1..=60 {
            shared += &format!("{{% set {name}{i} = [{name}{j}, {name}{j}] %}}", j = i - 1);
        }
    }
    let attacks = [
        (
            "{% set ns = namespace(v='a') %}{% for i in range(60) %}{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v|length }}".to_string(),
            "max_value_bytes",
        ),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}".to_string(),
            "fuel",
        ),
        ("{{ (range(100000)|list) * 100000 }}".to_string(), "max_items"),
        ("{{ '%0999999999d'|format(1) }}".to_string(), "max_value_bytes"),
        (format!("{shared}{{{{ a60 == b60 }}}}"), "max_items"),
    ];
    let messages = [ChatMessage::user("hi")];
    for (text, limit) in attacks {
        let template = ChatTemplate::new(text.as_str()).unwrap();
        let start = js_sys::Date::now();
        let e = template.render(&messages, false).unwrap_err().to_string();
        log!("{limit}: stopped in {} ms", js_sys::Date::now() - start);
        assert!(e.contains(limit), "{e}");
    }
    let template = ChatTemplate::new(CHATML).unwrap();
    assert_eq!(
        template.render(&messages, true).unwrap(),
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    // strftime_now reads the page's clock.
    let year = ChatTemplate::new("{{ strftime_now('%Y') }}")
        .unwrap()
        .render(&messages, false)
        .unwrap();
    assert!(year.parse::<u32>().is_ok_and(|y| y >= 2025), "{year}");
}

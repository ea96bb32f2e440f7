//! Chat templates against transformers: the real templates of SmolLM2,
//! Qwen2.5 and Llama 3.2 (`tests/fixtures/chat/`, rendered by
//! `make_chat_fixtures.py` with transformers 5.24 into `expected.json`) give
//! transformers' strings byte for byte, loaded from `tokenizer_config.json`,
//! from `chat_template.jinja` and from a list of named templates, directly and
//! through `Tokenizer::from_dir`; the environment's pieces (`tojson`, Python
//! methods and printing, undefined values, loop controls, `{% generation %}`,
//! `strftime_now`) match jinja2's; `raise_exception`, a malformed template
//! and a directory without one are errors, never panics.
//!
//! Tool calling: the templates of Llama 3.1, Mistral v0.3, Hermes 2 Pro
//! (`tool_use`), Command-R (`tool_use`, `rag`), Qwen3, Qwen2-VL and Qwen2.5
//! render conversations with content parts, tool calls (arguments as objects
//! and as JSON strings), tool results, reasoning, `tools` and `documents`
//! (keys in no alphabetical order) as transformers does; what transformers
//! refuses (`errors`) is an error; small templates (`inline`) pin jinja2's
//! semantics; malformed messages are errors naming the field.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use serde_json::json;
use wgpu_tp::Error;
use wgpu_tp::nn::{
    ChatContent, ChatMessage, ChatTemplate, ContentPart, OrderedJson, Tokenizer, ToolArguments,
    ToolCall,
};

use super::tokenizer::temp_dir;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

fn tiny_gpt2() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/tiny-gpt2")
}

#[derive(Deserialize)]
pub(super) struct Case {
    pub(super) name: String,
    pub(super) dir: String,
    #[serde(default)]
    pub(super) template_name: Option<String>,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    extra: OrderedJson,
    #[serde(default)]
    tools: Option<OrderedJson>,
    #[serde(default)]
    documents: Option<OrderedJson>,
    #[serde(default)]
    date_from_clock: Option<String>,
    pub(super) expected: String,
}

/// A conversation transformers refuses to render.
#[derive(Deserialize)]
struct ErrorCase {
    name: String,
    dir: String,
    #[serde(default)]
    template_name: Option<String>,
    messages: Vec<ChatMessage>,
    tools: Option<OrderedJson>,
    /// What transformers' error says.
    says: String,
}

/// A small template pinning jinja2's semantics.
#[derive(Deserialize)]
struct InlineCase {
    name: String,
    template: String,
    messages: Vec<ChatMessage>,
    extra: OrderedJson,
    #[serde(default)]
    tools: Option<OrderedJson>,
    expected: String,
}

/// expected.json, read from its text so that objects keep their order.
#[derive(Deserialize)]
struct Fixtures {
    cases: Vec<Case>,
    errors: Vec<ErrorCase>,
    inline: Vec<InlineCase>,
}

fn all_fixtures() -> Fixtures {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub(super) fn cases() -> Vec<Case> {
    all_fixtures().cases
}

/// The template variables of `apply_chat_template(..., tools=tools,
/// documents=documents, **extra)`.
fn context(
    extra: &OrderedJson,
    tools: Option<&OrderedJson>,
    documents: Option<&OrderedJson>,
) -> BTreeMap<String, OrderedJson> {
    let mut ctx: BTreeMap<String, OrderedJson> = extra
        .keys()
        .into_iter()
        .map(|k| {
            let v = extra.get(&k).unwrap();
            (k, v)
        })
        .collect();
    ctx.extend(tools.map(|t| ("tools".to_string(), t.clone())));
    ctx.extend(documents.map(|d| ("documents".to_string(), d.clone())));
    ctx
}

pub(super) fn template_of(dir: &str, name: Option<&str>) -> ChatTemplate {
    let dir = fixtures().join(dir);
    match name {
        Some(name) => ChatTemplate::from_dir_named(&dir, name),
        None => ChatTemplate::from_dir(&dir),
    }
    .unwrap()
}

/// `text` with the `DD Mon YYYY` after "Today Date: " checked and replaced
/// by `pinned`.
fn pin_date(text: &str, pinned: &str) -> String {
    let at = text.find("Today Date: ").expect("no date line") + "Today Date: ".len();
    let date = &text[at..at + pinned.len()];
    let b = date.as_bytes();
    let months = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec";
    assert!(
        b[..2].iter().chain(&b[7..]).all(u8::is_ascii_digit)
            && b[2] == b' '
            && b[6] == b' '
            && months.split(' ').any(|m| m == &date[3..6]),
        "strftime_now gave {date:?}, not like {pinned:?}"
    );
    format!("{}{pinned}{}", &text[..at], &text[at + pinned.len()..])
}

pub(super) fn render(template: &ChatTemplate, case: &Case) -> String {
    let ctx = context(&case.extra, case.tools.as_ref(), case.documents.as_ref());
    let text = template
        .render_with(&case.messages, case.add_generation_prompt, &ctx)
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    match &case.date_from_clock {
        Some(pinned) => pin_date(&text, pinned),
        None => text,
    }
}

/// The first difference of two renderings, for failure messages.
fn diff(got: &str, want: &str) -> String {
    let at = got
        .bytes()
        .zip(want.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let lo = got[..at].char_indices().rev().nth(20).map_or(0, |(i, _)| i);
    format!(
        "differs at byte {at}:\n got {:?}\nwant {:?}",
        &got[lo..],
        &want[lo..]
    )
}

#[test]
fn renders_as_transformers() {
    let cases = cases();
    assert_eq!(cases.len(), 51, "expected.json changed; update this count");
    let tool_cases = cases
        .iter()
        .filter(|c| c.tools.is_some() || c.documents.is_some())
        .count();
    assert_eq!(tool_cases, 13, "cases with tools or documents");
    let mut failures = Vec::new();
    for case in &cases {
        let template = template_of(&case.dir, case.template_name.as_deref());
        let got = render(&template, case);
        if got != case.expected {
            failures.push(format!("{}: {}", case.name, diff(&got, &case.expected)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn loads_each_source_and_special_tokens() {
    let smol = ChatTemplate::from_dir(fixtures().join("smollm2-135m-instruct")).unwrap();
    assert!(smol.source().ends_with("tokenizer_config.json"));
    let tokens = smol.special_tokens();
    assert_eq!(
        (tokens["bos_token"].as_str(), tokens["eos_token"].as_str()),
        ("<|im_start|>", "<|im_end|>")
    );
    // Qwen's bos_token is null: not a variable at all, as in transformers.
    let qwen = ChatTemplate::from_dir(fixtures().join("qwen2.5-0.5b-instruct")).unwrap();
    assert!(!qwen.special_tokens().contains_key("bos_token"));
    let llama = ChatTemplate::from_dir(fixtures().join("llama-3.2-1b-instruct")).unwrap();
    assert!(llama.source().ends_with("chat_template.jinja"));
    assert_eq!(llama.special_tokens()["bos_token"], "<|begin_of_text|>");
    // The AddedToken object form ({"content": ...}) of the named-templates config.
    let named = fixtures().join("named-templates");
    let default = ChatTemplate::from_dir(&named).unwrap();
    assert_eq!(default.special_tokens()["bos_token"], "<|im_start|>");
    assert_eq!(
        ChatTemplate::names_in_dir(&named).unwrap(),
        ["default", "tool_use"]
    );
    let unnamed = ChatTemplate::names_in_dir(fixtures().join("smollm2-135m-instruct"));
    assert!(unnamed.unwrap().is_empty());
    let e = ChatTemplate::from_dir_named(&named, "nope")
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"nope\"") && e.contains("tool_use"), "{e}");
}

#[test]
fn template_file_wins_and_lists_need_a_default() {
    let dir = temp_dir("chat-precedence");
    let config = json!({"chat_template": "from the config", "bos_token": "<s>"});
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    let file = "from the file {{ bos_token }}\n";
    std::fs::write(dir.join("chat_template.jinja"), file).unwrap();
    let t = ChatTemplate::from_dir(&dir).unwrap();
    // The one trailing newline goes, as jinja2's keep_trailing_newline=False.
    assert_eq!(t.render(&[], false).unwrap(), "from the file <s>");
    std::fs::create_dir_all(dir.join("additional_chat_templates")).unwrap();
    std::fs::write(dir.join("additional_chat_templates/rag.jinja"), "rag").unwrap();
    assert_eq!(
        ChatTemplate::names_in_dir(&dir).unwrap(),
        ["default", "rag"]
    );
    let rag = ChatTemplate::from_dir_named(&dir, "rag").unwrap();
    assert_eq!(rag.render(&[], false).unwrap(), "rag");

    let dir = temp_dir("chat-no-default");
    let list =
        json!({"chat_template": [{"name": "a", "template": "A"}, {"name": "b", "template": "B"}]});
    std::fs::write(dir.join("tokenizer_config.json"), list.to_string()).unwrap();
    let e = ChatTemplate::from_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains("from_dir_named") && e.contains("[\"a\", \"b\"]"),
        "{e}"
    );
    let b = ChatTemplate::from_dir_named(&dir, "b").unwrap();
    assert_eq!(b.render(&[], true).unwrap(), "B");
}

/// A directory with the tiny GPT-2's tokenizer.json and `files` from `model`.
fn model_dir(label: &str, model: &str, files: &[&str]) -> PathBuf {
    let dir = temp_dir(label);
    std::fs::copy(
        tiny_gpt2().join("tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    for file in files {
        std::fs::copy(fixtures().join(model).join(file), dir.join(file)).unwrap();
    }
    dir
}

fn expected(name: &str) -> Case {
    cases().into_iter().find(|c| c.name == name).unwrap()
}

#[test]
fn tokenizer_from_dir_applies_the_template() {
    let config = ["tokenizer_config.json"];
    let dir = model_dir("chat-smol", "smollm2-135m-instruct", &config);
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    for name in ["user_gen", "multi_turn", "unicode"] {
        let case = expected(&format!("smollm2-135m-instruct/{name}"));
        let got = tokenizer
            .apply_chat_template(&case.messages, case.add_generation_prompt)
            .unwrap();
        assert_eq!(got, case.expected, "{name}");
        // The rendered text encodes like any other (special tokens included).
        assert!(!tokenizer.encode(&got).unwrap().is_empty());
    }
    let files = ["tokenizer_config.json", "chat_template.jinja"];
    let dir = model_dir("chat-llama", "llama-3.2-1b-instruct", &files);
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    let case = expected("llama-3.2-1b-instruct/system_gen");
    let got = tokenizer
        .apply_chat_template_with(&case.messages, true, &case.extra)
        .unwrap();
    assert_eq!(got, case.expected);

    // with_chat_template replaces the directory's template.
    let other = ChatTemplate::new("{{ messages | length }}").unwrap();
    let tokenizer = tokenizer.with_chat_template(other);
    assert_eq!(
        tokenizer.apply_chat_template(&case.messages, true).unwrap(),
        "2"
    );
}

#[test]
fn no_template_is_a_clear_error() {
    let tokenizer = Tokenizer::from_dir(tiny_gpt2()).unwrap();
    assert!(tokenizer.chat_template().is_none());
    let e = tokenizer
        .apply_chat_template(&[ChatMessage::user("hi")], true)
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Tokenizer { .. }), "{e:?}");
    for part in [
        "tiny-gpt2",
        "has no chat template",
        "tokenizer_config.json",
        "with_chat_template",
    ] {
        assert!(text.contains(part), "{text}");
    }
    let e = ChatTemplate::from_dir(temp_dir("chat-empty")).unwrap_err();
    assert!(e.to_string().contains("has no chat template"), "{e}");
}

#[test]
fn raise_exception_is_an_error_with_its_message() {
    let t = ChatTemplate::new(
        "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}\
         {{ raise_exception('Conversation roles must be user or assistant, not ' + m.role) }}\
         {% endif %}{{ m.content }}{% endfor %}",
    )
    .unwrap();
    assert_eq!(t.render(&[ChatMessage::user("ok")], false).unwrap(), "ok");
    let e = t
        .render(&[ChatMessage::new("robot", "x")], false)
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Tokenizer { .. }), "{e:?}");
    assert!(
        text.contains("Conversation roles must be user or assistant, not robot"),
        "{text}"
    );
}

#[test]
fn malformed_templates_are_errors() {
    for bad in [
        "{% for m in messages %}{{ m.content }",
        "{% if x %}",
        "{{ a b }}",
        "{% endfor %}",
    ] {
        let e = ChatTemplate::new(bad).unwrap_err().to_string();
        assert!(e.contains("not a valid chat template"), "{bad}: {e}");
    }
    // A broken template in a directory: the tokenizer still loads, the
    // template's error (naming its file) comes back when it is used.
    let dir = model_dir("chat-bad", "smollm2-135m-instruct", &[]);
    std::fs::write(dir.join("chat_template.jinja"), "{% for m in messages %}").unwrap();
    let tokenizer = Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(
        tokenizer.encode("hi").unwrap().len(),
        tokenizer.encode("hi").unwrap().len()
    );
    let e = tokenizer
        .apply_chat_template(&[], true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("chat_template.jinja") && e.contains("not a valid chat template"),
        "{e}"
    );
    let e = ChatTemplate::from_dir(&dir).unwrap_err().to_string();
    assert!(e.contains("chat_template.jinja"), "{e}");
    std::fs::write(dir.join("chat_template.jinja"), "").unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), "{ not json").unwrap();
    let e = ChatTemplate::from_dir(&dir).unwrap_err().to_string();
    assert!(
        e.contains("tokenizer_config.json") && e.contains("not valid JSON"),
        "{e}"
    );
    // A render-time failure (calling a string) is an error too.
    let t = ChatTemplate::new("{{ messages[0].content() }}").unwrap();
    assert!(t.render(&[ChatMessage::user("x")], false).is_err());
    let e = t
        .render_with(&[], false, &json!({"messages": []}))
        .unwrap_err();
    assert!(e.to_string().contains("messages"), "{e}");
}

/// Renders `template` with a user "a" and an assistant "b" and `extra`.
fn one(template: &str, extra: serde_json::Value) -> String {
    let messages = [ChatMessage::user("a"), ChatMessage::assistant("b")];
    ChatTemplate::new(template)
        .unwrap()
        .render_with(&messages, false, &extra)
        .unwrap()
}

/// Each expected string is what transformers 5.24 (jinja2 3.1.6) renders.
#[test]
fn environment_matches_jinja2() {
    let x = json!({"a": [1, 2.5, "<é>\n"], "b": null, "c": true, "d": {},
        "e": [1e16, 0.0001, 1e-05, 100.0, -0.5, 123456789.125]});
    assert_eq!(
        one("{{ x | tojson }}", json!({"x": x})),
        r#"{"a": [1, 2.5, "<é>\n"], "b": null, "c": true, "d": {}, "e": [1e+16, 0.0001, 1e-05, 100.0, -0.5, 123456789.125]}"#
    );
    assert_eq!(
        one("{{ x | tojson(indent=2) }}", json!({"x": x})),
        "{\n  \"a\": [\n    1,\n    2.5,\n    \"<é>\\n\"\n  ],\n  \"b\": null,\n  \"c\": true,\n  \"d\": {},\n  \"e\": [\n    1e+16,\n    0.0001,\n    1e-05,\n    100.0,\n    -0.5,\n    123456789.125\n  ]\n}"
    );
    assert_eq!(
        one(
            "{{ s | tojson(ensure_ascii=true) }}|{{ s | tojson }}",
            json!({"s": "é😀\u{7}\"\\"})
        ),
        r#""\u00e9\ud83d\ude00\u0007\"\\"|"é😀\u0007\"\\""#
    );
    let y = json!({"y": {"b": 1, "a": [1, 2]}});
    assert_eq!(
        one("{{ y | tojson(separators=(',', ':'), sort_keys=true) }}", y),
        r#"{"a":[1,2],"b":1}"#
    );
    let generation =
        "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}\n{% endfor %}";
    assert_eq!(one(generation, json!({})), "ab");
    let generation = "{%- for m in messages %}\n  {%- generation -%}\n  [{{ m.content }}]\n  {%- endgeneration %}\n{% endfor %}";
    assert_eq!(one(generation, json!({})), "[a][b]");
    let methods = "{{ 'Hello'.upper() }} {{ ' x '.strip() }} {{ 'a,b'.split(',') | join('+') }} \
                   {{ 'abc'.startswith('ab') }} {{ '\\n\\nq'.lstrip('\\n') }} {{ 'aXb'.replace('X', '-') }}";
    assert_eq!(one(methods, json!({})), "HELLO x a+b True q a-b");
    let undefined = "[{{ missing }}]{% if missing %}x{% endif %}{% for a in missing %}y{% endfor %}\
                     {{ missing is defined }}{{ tools is none }}{{ documents is none }}";
    assert_eq!(one(undefined, json!({})), "[]FalseTrueTrue");
    let loops = "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.role }}{% break %}{% endfor %}\n";
    assert_eq!(one(loops, json!({})), "assistant");
    assert_eq!(
        one(
            "{{ messages[5] is defined }}|{{ messages[0].nope is defined }}",
            json!({})
        ),
        "False|False"
    );
    // Printing as Python's str(): None, floats, lists, dicts.
    let printed = one(
        "{{ n }} {{ f }} {{ l }} {{ d }}",
        json!({"n": null, "f": 1.0, "l": ["a", "it's", 2], "d": {"k": false}}),
    );
    assert_eq!(printed, "None 1.0 ['a', \"it's\", 2] {'k': False}");
}

#[test]
fn strftime_now_reads_the_clock() {
    let text = one(
        "{{ strftime_now('%d %b %Y|%Y-%m-%d %H:%M:%S|%A %B %j %%') }}",
        json!({}),
    );
    let (date, rest) = text.split_once('|').unwrap();
    pin_date(&format!("Today Date: {date}"), "05 Mar 2025");
    let (iso, names) = rest.split_once('|').unwrap();
    let b = iso.as_bytes();
    assert_eq!(
        (b.len(), b[4], b[7], b[10], b[13], b[16]),
        (19, b'-', b'-', b' ', b':', b':'),
        "{iso}"
    );
    assert_eq!(&iso[..4], &date[7..], "{text}");
    let words: Vec<&str> = names.split(' ').collect();
    assert!(
        words[0].ends_with("day") && words[1].starts_with(&date[3..6]) && words[3] == "%",
        "{text}"
    );
    assert!(
        (1..=366).contains(&words[2].parse::<u32>().unwrap()),
        "{text}"
    );
}

#[test]
fn refuses_what_transformers_refuses() {
    let errors = all_fixtures().errors;
    assert_eq!(errors.len(), 3, "expected.json changed; update this count");
    for case in &errors {
        let template = template_of(&case.dir, case.template_name.as_deref());
        let ctx = context(
            &OrderedJson::parse("{}").unwrap(),
            case.tools.as_ref(),
            None,
        );
        let e = template
            .render_with(&case.messages, false, &ctx)
            .expect_err(&case.name);
        let text = e.to_string();
        assert!(matches!(e, Error::Tokenizer { .. }), "{}: {e:?}", case.name);
        assert!(text.contains(&case.says), "{}: {text}", case.name);
    }
    // With tools, transformers picks a directory's "tool_use" template.
    let hermes = fixtures().join("hermes-2-pro-llama-3-8b");
    let tool_use = ChatTemplate::from_dir_for_tools(&hermes).unwrap();
    let named = ChatTemplate::from_dir_named(&hermes, "tool_use").unwrap();
    let case = expected("hermes-2-pro-llama-3-8b/one_tool");
    assert_eq!(render(&tool_use, &case), render(&named, &case));
    let qwen = ChatTemplate::from_dir_for_tools(fixtures().join("qwen2.5-0.5b-instruct")).unwrap();
    assert_eq!(
        render(&qwen, &expected("qwen2.5-0.5b-instruct/tools_no_system")),
        expected("qwen2.5-0.5b-instruct/tools_no_system").expected
    );
    // Looping over tools=None names the loop.
    let e = template_of("hermes-2-pro-llama-3-8b", Some("tool_use"))
        .render(&[ChatMessage::user("hi")], true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot loop over `tools`: it is None"), "{e}");
}

#[test]
fn inline_templates_match_jinja2() {
    let inline = all_fixtures().inline;
    assert_eq!(inline.len(), 6, "expected.json changed; update this count");
    let mut failures = Vec::new();
    for case in &inline {
        let ctx = context(&case.extra, case.tools.as_ref(), None);
        let got = ChatTemplate::new(case.template.as_str())
            .unwrap()
            .render_with(&case.messages, false, &ctx)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        if got != case.expected {
            failures.push(format!("{}: {}", case.name, diff(&got, &case.expected)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The round trip of tests/fixtures/chat/make_chat_fixtures.py, built with
/// the constructors instead of read from JSON.
fn round_trip_by_hand() -> Vec<ChatMessage> {
    let args = OrderedJson::parse(r#"{"unit": "celsius", "city": "Paris"}"#).unwrap();
    let calls = vec![
        ToolCall::function("get_weather", args).with_id("call00001"),
        ToolCall::function("search_docs", r#"{"query": "umbrella", "limit": 3}"#)
            .with_id("call00002"),
    ];
    vec![
        ChatMessage::system("You are a helpful assistant with tools.\u{1c}"),
        ChatMessage::user("What's the weather in Paris, and what do the docs say about umbrellas?"),
        ChatMessage::assistant("Let me check.").with_tool_calls(calls),
        ChatMessage::tool(r#"{"temperature": 21.5, "sky": "clear"}"#)
            .with_tool_call_id("call00001")
            .with_name("get_weather"),
        ChatMessage::tool("No results.")
            .with_tool_call_id("call00002")
            .with_name("search_docs"),
        ChatMessage::assistant(
            "It is 21.5 °C and clear in Paris; the docs say nothing about umbrellas.",
        ),
        ChatMessage::user("Thanks! And tomorrow?"),
    ]
}

#[test]
fn constructors_build_what_json_gives() {
    let by_hand = round_trip_by_hand();
    for name in [
        "qwen2.5-0.5b-instruct/tools_round_trip",
        "mistral-7b-instruct-v0.3/tools_round_trip",
        "hermes-2-pro-llama-3-8b/tools_round_trip",
    ] {
        let case = expected(name);
        assert_eq!(by_hand, case.messages, "{name}");
        let template = template_of(&case.dir, case.template_name.as_deref());
        let by_hand_case = Case {
            messages: by_hand.clone(),
            ..case
        };
        assert_eq!(
            render(&template, &by_hand_case),
            by_hand_case.expected,
            "{name}"
        );
    }
    // Reasoning, parts, and the extra keys of a message.
    let qwen3 = expected("qwen3-0.6b/content_parts");
    let parts = ChatMessage::with_parts(
        "user",
        vec![
            ContentPart::text("Describe this."),
            ContentPart::with(
                "image_url",
                "image_url",
                OrderedJson::parse(r#"{"url": "https://example.com/cat.png"}"#).unwrap(),
            ),
        ],
    );
    let think = ChatMessage::assistant("It is 21.5 °C in Paris.")
        .with_reasoning_content("\nThe tool said 21.5.\n");
    assert_eq!(qwen3.messages, [parts, think]);
    let aliases = expected("qwen3-0.6b/reasoning_aliases");
    let thinking = ChatMessage::assistant("It is 21.5 °C.")
        .with_extra("thinking", OrderedJson::string("Old name for reasoning."));
    assert_eq!(aliases.messages[1], thinking);
    assert_eq!(thinking.text(), Some("It is 21.5 °C."));
}

#[test]
fn messages_from_json() {
    let record = r#"{"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "index": 0,
         "function": {"name": "f", "arguments": {"z": 1, "a": [true, null, 2.5]}}},
        {"function": {"name": "g", "arguments": "{\"b\": 2}"}}],
        "weight": 0.5, "dropped": null}"#;
    let m = ChatMessage::from_json_str(record).unwrap();
    assert_eq!(m.role, "assistant");
    assert_eq!(m.content, None);
    let calls = m.tool_calls.as_ref().unwrap();
    assert_eq!(calls[0].id.as_deref(), Some("c1"));
    assert_eq!(calls[0].kind.as_deref(), Some("function"));
    assert_eq!(calls[0].extra[0].0, "index");
    let ToolArguments::Object(args) = &calls[0].function.arguments else {
        panic!("{:?}", calls[0].function.arguments);
    };
    assert_eq!(args.keys(), ["z", "a"]);
    assert_eq!(args.to_string(), r#"{"z":1,"a":[true,null,2.5]}"#);
    assert_eq!(
        calls[1].function.arguments,
        ToolArguments::Text(r#"{"b": 2}"#.into())
    );
    assert_eq!(calls[1].kind, None);
    assert_eq!(m.extra.len(), 1, "{:?}", m.extra);
    // Serialised, it reads back the same; the template sees it as given.
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(ChatMessage::from_json_str(&text).unwrap(), m);
    let shown = ChatTemplate::new("{{ messages[0] | tojson }}")
        .unwrap()
        .render(std::slice::from_ref(&m), false)
        .unwrap();
    assert_eq!(
        shown,
        r#"{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [true, null, 2.5]}}, "index": 0}, {"function": {"name": "g", "arguments": "{\"b\": 2}"}}], "weight": 0.5}"#
    );

    // From a serde_json::Value (sorted keys without preserve_order), and lists.
    let v = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
    let m = ChatMessage::from_json(&v).unwrap();
    assert_eq!(
        m.content,
        Some(ChatContent::Parts(vec![ContentPart::text("hi")]))
    );
    let list = ChatMessage::list_from_json(
        &json!([v, {"role": "tool", "content": "1", "tool_call_id": "c1", "name": "f"}]),
    )
    .unwrap();
    assert_eq!(list[1].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(list[1].name.as_deref(), Some("f"));
    let list = ChatMessage::list_from_json_str(r#"[{"role": "user", "content": "x"}]"#).unwrap();
    assert_eq!(list, [ChatMessage::user("x")]);
    let m: ChatMessage =
        serde_json::from_str(r#"{"content": "x", "role": "user", "reasoning_content": "r"}"#)
            .unwrap();
    assert_eq!(m.reasoning_content.as_deref(), Some("r"));
}

#[test]
fn malformed_messages_are_errors_naming_the_field() {
    let bad = [
        (r#"{"content": "x"}"#, "`role` is missing"),
        (r#"{"role": null, "content": "x"}"#, "`role` is missing"),
        (r#"{"role": 3}"#, "`role` must be a string, not a number"),
        (
            r#"{"role": "user", "content": 5}"#,
            "`content` must be a string or a list of parts",
        ),
        (
            r#"{"role": "user", "content": {"text": "x"}}"#,
            "not an object",
        ),
        (
            r#"{"role": "user", "content": ["x"]}"#,
            "`content[0]`: a content part must be a JSON object",
        ),
        (
            r#"{"role": "user", "content": [{"type": 1}]}"#,
            "`content[0].type` must be a string",
        ),
        (
            r#"{"role": "user", "content": [{"type": "text", "text": []}]}"#,
            "`content[0].text` must be a string, not a list",
        ),
        (
            r#"{"role": "assistant", "tool_calls": {"function": {}}}"#,
            "`tool_calls` must be a list of tool calls",
        ),
        (
            r#"{"role": "assistant", "tool_calls": "f()"}"#,
            "not a string",
        ),
        (
            r#"{"role": "assistant", "tool_calls": [7]}"#,
            "`tool_calls[0]`: a tool call must be a JSON object",
        ),
        (
            r#"{"role": "assistant", "tool_calls": [{"name": "f"}]}"#,
            "`tool_calls[0].function` is missing",
        ),
        (
            r#"{"role": "assistant", "tool_calls": [{"function": "f"}]}"#,
            "`tool_calls[0].function`: a tool call's function must be a JSON object",
        ),
        (
            r#"{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}"#,
            "`tool_calls[0].function.name` is missing",
        ),
        (
            r#"{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}"#,
            "`tool_calls[0].function.arguments` is missing",
        ),
        (
            r#"{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}"#,
            "`tool_calls[0].function.arguments` must be an object or a JSON string, not a list",
        ),
        (
            r#"{"role": "assistant", "tool_calls": [{"id": 1, "function": {"name": "f", "arguments": {}}}]}"#,
            "`tool_calls[0].id` must be a string",
        ),
        (
            r#"{"role": "tool", "tool_call_id": 5}"#,
            "`tool_call_id` must be a string",
        ),
        (
            r#"{"role": "tool", "name": false}"#,
            "`name` must be a string, not true or false",
        ),
        (
            r#"{"role": "assistant", "reasoning_content": 1.5}"#,
            "`reasoning_content` must be a string",
        ),
        (r#"["user", "hi"]"#, "a message must be a JSON object"),
        (r#""hi""#, "not a string"),
        ("{\"role\": ", "must be JSON"),
    ];
    for (text, says) in bad {
        let e = ChatMessage::from_json_str(text).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{text}: {e:?}");
        assert!(e.to_string().contains(says), "{text}: {e}");
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
            let e = ChatMessage::from_json(&v).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
            let e = serde_json::from_str::<ChatMessage>(text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
    let e = ChatMessage::list_from_json_str(
        r#"[{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": {}}]"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("messages[1]: `tool_calls` must be a list"),
        "{e}"
    );
    let e = ChatMessage::list_from_json(&json!({"role": "user"}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("messages must be a JSON list"), "{e}");
}

#[test]
fn tools_and_documents_must_be_lists_of_objects() {
    let t = ChatTemplate::new("{{ tools | length }}").unwrap();
    let user = [ChatMessage::user("x")];
    for (extra, says) in [
        (
            json!({"tools": "get_weather"}),
            "`tools` is a string: it must be a list of JSON schemas",
        ),
        (json!({"tools": {"name": "f"}}), "`tools` is an object"),
        (
            json!({"tools": [{"name": "f"}, 3]}),
            "`tools[1]` is a number",
        ),
        (
            json!({"documents": [["a"]]}),
            "`documents[0]` is a list: `documents` must be a list of objects",
        ),
    ] {
        let e = t.render_with(&user, false, &extra).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(e.to_string().contains(says), "{e}");
    }
    assert_eq!(
        t.render_with(&user, false, &json!({"tools": []})).unwrap(),
        "0"
    );
    // An OrderedJson keeps the order of its text; a serde_json::Value sorts
    // (unless serde_json's preserve_order feature is on).
    let tool = r#"{"type": "function", "function": {"name": "f", "parameters": {}}}"#;
    let ordered: BTreeMap<&str, Vec<OrderedJson>> =
        BTreeMap::from([("tools", vec![OrderedJson::parse(tool).unwrap()])]);
    let t = ChatTemplate::new("{{ tools[0] | tojson }}").unwrap();
    assert_eq!(t.render_with(&user, false, &ordered).unwrap(), tool);
    assert!(OrderedJson::parse("{").is_err());
    assert_eq!(
        "[1, \"a\"]".parse::<OrderedJson>().unwrap().items().len(),
        2
    );
}

//! Chat templates are untrusted input (they come in downloaded model
//! files), so rendering one is bounded ([`ChatLimits`]): each template of
//! [`attacks`] runs in a child process of this test binary (a crash or an
//! out-of-memory abort must not take the other tests with it), which
//! renders it, checks that it fails with an error naming the limit that
//! stopped it (0-1.5 s here; a child still running after a minute is
//! killed and counts as hung), and that the same template object then
//! renders a harmless conversation; the parent checks the child's peak
//! memory (`VmHWM`, under 600 MiB; 307 MiB at most here, the total
//! budget's worth). Real templates render as before with a hundredth of
//! every default limit; limits can be raised and lowered; compiling is
//! bounded too (no constant folding of `'a' * n`, no deep operator chains);
//! and the rewrite that puts operators under the limits keeps their
//! meaning (against plain minijinja).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use wgpu_tp::nn::{ChatLimits, ChatMessage, ChatTemplate};

use crate::util::{peak_rss_kib, run_test_in_child};

/// An attack: its name, the template (run when `attack` is true) and what
/// the error must say.
struct Attack {
    name: &'static str,
    template: String,
    says: &'static str,
    /// Messages of this many bytes each, this many of them.
    messages: (usize, usize),
}

fn attack(name: &'static str, template: impl Into<String>, says: &'static str) -> Attack {
    Attack {
        name,
        template: template.into(),
        says,
        messages: (1, 0),
    }
}

/// `{% set a0 = [0] %}{% set a1 = [a0, a0] %}`... up to `a60` and the same
/// for `b`: two equal lists of 2^60 leaves in 122 nodes, which minijinja
/// compares or hashes leaf by leaf (no namespace is needed to build them,
/// so the checks on storing do not see them).
fn shared_lists() -> String {
    let mut text = String::new();
    for name in ["a", "b"] {
        text += &format!("{{% set {name}0 = [0] %}}");
        for i in 1..=60 {
            text += &format!("{{% set {name}{i} = [{name}{j}, {name}{j}] %}}", j = i - 1);
        }
    }
    text
}

/// Comparing or hashing `a60` and `b60` of [`shared_lists`] in each way
/// minijinja does it: the attacks, named.
fn comparisons() -> Vec<Attack> {
    let lists = shared_lists();
    let with = |name: &'static str, tail: &str| attack(name, format!("{lists}{tail}"), "max_items");
    vec![
        with("compare_shared_lists", "{{ a60 == b60 }}"),
        with("order_shared_lists", "{{ a60 < b60 }}"),
        with("chained_comparison", "{{ 1 < 2 < a60 == b60 }}"),
        with("shared_list_in_list", "{{ a60 in [b60] }}"),
        with("shared_list_not_in_list", "{{ a60 not in [b60] }}"),
        with("shared_list_as_key", "{{ {a60: 1}[b60] }}"),
        with("sort_shared_lists", "{{ [a60, b60]|sort|length }}"),
        with("unique_shared_lists", "{{ [a60, b60]|unique|list|length }}"),
        with("max_shared_lists", "{{ [a60, b60]|max|length }}"),
        with(
            "dictsort_by_shared_values",
            "{{ {'x': a60, 'y': b60}|dictsort(by='value')|length }}",
        ),
        with(
            "groupby_shared_lists",
            "{{ [{'k': a60}, {'k': b60}]|groupby('k')|length }}",
        ),
        with(
            "select_equal_shared_list",
            "{{ [a60]|select('equalto', b60)|list|length }}",
        ),
        with(
            "selectattr_shared_list",
            "{{ [{'k': a60}]|selectattr('k', 'equalto', b60)|list|length }}",
        ),
        with("test_equal_shared_list", "{{ a60 is eq(b60) }}"),
        with("test_in_shared_list", "{{ a60 is in([b60]) }}"),
        with(
            "loop_changed_shared_lists",
            "{% for x in [a60, b60] %}{{ loop.changed(x) }}{% endfor %}",
        ),
        with("count_shared_lists", "{{ [a60, a60].count(b60) }}"),
        with("get_shared_key", "{{ {'k': 1}.get(b60) }}"),
        with(
            "compare_lazy_shared_lists",
            "{{ ([a60]|select) == ([b60]|select) }}",
        ),
        with("replace_with_a_shared_list", "{{ 'x'|replace(a60, '') }}"),
        with("shared_list_as_attr", "{{ {'p': 1, 'q': 2}|attr(a60) }}"),
        with(
            "shared_list_as_map_attribute",
            "{{ [{'p': 1, 'q': 2}]|map(attribute=a60)|list }}",
        ),
        with("shared_list_as_join_separator", "{{ [1, 2]|join(a60) }}"),
        with("shared_list_as_select_test", "{{ [1]|select(a60)|list }}"),
        with("shared_list_raised", "{{ raise_exception(a60) }}"),
        with("shared_list_as_time_format", "{{ strftime_now(a60) }}"),
        with(
            "shared_list_as_tojson_separators",
            "{{ [1]|tojson(separators=[a60, ':']) }}",
        ),
        attack(
            "search_a_long_list_in_a_loop",
            "{% set l = [0] * 500000 %}{% for i in range(100000) %}{% for j in range(100000) %}{{ 1 in l }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "compare_long_strings_in_a_loop",
            "{% set s = 'a' * 16000000 %}{% set t = 'a' * 16000000 %}{% for i in range(100000) %}{% for j in range(100000) %}{{ s == t }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "index_a_long_string_in_a_loop",
            "{% set s = 'a' * 16000000 %}{% for i in range(100000) %}{% for j in range(100000) %}{{ s[-1] }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "slice_a_long_string_in_a_loop",
            "{% set s = 'a' * 16000000 %}{% for i in range(100000) %}{% for j in range(100000) %}{{ s[-1:] }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "raise_a_huge_list",
            "{% set l = ['a' * 16000000] * 1000000 %}{{ raise_exception(l) }}",
            "max_value_bytes",
        ),
        attack(
            "hash_a_long_key_in_a_loop",
            "{% set s = 'a' * 16000000 %}{% set d = {'p': 1, 'q': 2} %}{% for i in range(100000) %}{% for j in range(100) %}{{ d|attr(s) }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "select_a_long_list_in_a_loop",
            "{% set l = [0] * 1000000 %}{% for i in range(100000) %}{% for j in range(100) %}{% if l|select %}{% endif %}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "splat_into_a_filter_in_a_loop",
            "{% set l = [0] * 500000 %}{% for i in range(100000) %}{% for j in range(100) %}{{ ('%s'|format(*l))|length }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "index_a_lazy_list_in_a_loop",
            "{% set l = [0] * 500000 %}{% for i in range(100000) %}{% for j in range(100) %}{{ (l|chain(''))[499999] }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "last_of_a_long_chain",
            "{% set l = [0] * 1000000 %}{{ (l|chain(l, l, l, l, l, l, l, l, l, l, l))|last }}",
            "max_value_bytes",
        ),
        attack(
            "last_of_a_lazy_chain",
            "{% set l = [1] * 300000 %}{{ (l|chain(l|select, l|select, l|select, l|select))|last }}",
            "max_items",
        ),
        attack(
            "reverse_an_endless_chain",
            "{% set l = [0] * 1000 %}{% set ls = [l] * 1000000 %}{{ (l|chain(*ls))|reverse|first }}",
            "max_items",
        ),
        attack(
            "map_a_long_string",
            "{% set s = 'a' * 16000000 %}{{ s|map('upper')|length }}",
            "max_items",
        ),
        attack(
            "select_a_long_string",
            "{% set s = 'a' * 16000000 %}{{ s|select|list|length }}",
            "max_items",
        ),
        attack(
            "chain_long_strings",
            "{% set s = 'a' * 16000000 %}{{ (s|chain(s, s))|list|length }}",
            "max_items",
        ),
        attack(
            "macro_literal_captured",
            format!(
                "{{% macro m() %}}{{% set x %}}{}{{% endset %}}{{% endmacro %}}{{% for i in range(100000) %}}{{% for j in range(100000) %}}{{{{ m() }}}}{{% endfor %}}{{% endfor %}}",
                "z".repeat(1 << 20)
            ),
            "max_total_bytes",
        ),
        attack(
            "caller_literal_captured",
            format!(
                "{{% macro m() %}}{{% do caller() %}}{{% endmacro %}}{{% for i in range(100000) %}}{{% for j in range(100000) %}}{{% call m() %}}{}{{% endcall %}}{{% endfor %}}{{% endfor %}}",
                "z".repeat(1 << 20)
            ),
            "max_total_bytes",
        ),
        attack(
            "test_a_long_string_in_a_loop",
            "{% set s = 'a' * 16000000 %}{% for i in range(100000) %}{% for j in range(100) %}{% if s is lower %}{% endif %}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "select_by_test_over_long_strings",
            "{% set s = 'a' * 16000000 %}{% set l = [s] * 1000 %}{{ l|select('lower')|length }}",
            "max_total_bytes",
        ),
        attack(
            "strip_a_long_set_of_characters",
            "{% set s = 'a' * 16000000 %}{% set c = 'b' * 16000000 ~ 'a' %}{% for i in range(100000) %}{% for j in range(100) %}{{ s.lstrip(c)|length }}{{ s|trim(c)|length }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "chain_of_a_million_maps",
            "{% set c = {}|chain(*([{}] * 999999)) %}{% for i in range(100000) %}{% for j in range(100) %}{{ c.x }}{% endfor %}{% endfor %}",
            "fuel",
        ),
        attack(
            "reversed_slice_in_a_loop",
            "{% set l = [0] * 1000000 %}{% set r = l[::-1] %}{% for i in range(100000) %}{% for j in range(100) %}{{ r|first }}{% endfor %}{% endfor %}",
            "fuel",
        ),
        attack(
            "loop_over_a_long_string",
            "{% set s = 'a' * 16000000 %}{% for i in range(100000) %}{% for j in range(100000) %}{% for c in s %}{% break %}{% endfor %}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        attack(
            "escape_quotes_into_a_capture",
            "{% set s = '\"' * 16000000 %}{% autoescape true %}{% set x %}{% for i in range(15) %}{{ s }}{% endfor %}{% endset %}{% endautoescape %}{{ x|length }}",
            "max_total_bytes",
        ),
        attack(
            "split_into_characters",
            "{% set s = 'a' * 16000000 %}{{ s.split('')|length }}",
            "max_items",
        ),
        attack(
            "split_lines",
            "{% set s = '\n' * 16000000 %}{{ s.splitlines()|length }}",
            "max_items",
        ),
        attack(
            "split_on_spaces",
            "{% set s = ' a' * 8000000 %}{{ s.split()|length }}{{ s.split(' ')|length }}",
            "max_items",
        ),
        attack(
            "split_filter",
            "{% set s = ' a' * 8000000 %}{{ (s|split(' '))|list|length }}",
            "max_items",
        ),
        attack(
            "string_to_list",
            "{% set s = 'a' * 16000000 %}{{ s|list|length }}",
            "max_items",
        ),
        attack(
            "search_a_long_string_in_a_loop",
            "{% set s = 'a' * 16000000 %}{% for i in range(100000) %}{% for j in range(100000) %}{{ 'b' in s }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
    ]
}

/// The runaway templates: the issue's, and more of the kind.
fn attacks() -> Vec<Attack> {
    let kb = |n: usize| "y".repeat(n * 1024);
    let mut all = comparisons();
    all.extend(vec![
        attack(
            "repeat_string",
            "{{ 'a' * 100000000000 }}",
            "max_value_bytes",
        ),
        attack(
            "range_10_12",
            "{% for i in range(1000000000000) %}x{% endfor %}",
            "range has too many elements",
        ),
        attack(
            "macro_calls_itself",
            "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
            "recursion",
        ),
        attack(
            "macro_calls_itself_twice",
            "{% macro f(n) %}{{ f(n + 1) }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "recursion",
        ),
        attack(
            "macro_tree",
            "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
            "ChatLimits::fuel",
        ),
        attack(
            "namespace_doubling",
            "{% set ns = namespace(v='a') %}{% for i in range(60) %}{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v|length }}",
            "max_value_bytes",
        ),
        attack(
            "nested_ranges",
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "ChatLimits::fuel",
        ),
        attack(
            "list_repeat",
            "{{ (range(100000)|list) * 100000 }}",
            "max_items",
        ),
        attack(
            "printf_width",
            "{{ '%0999999999d'|format(1) }}",
            "max_value_bytes",
        ),
        attack(
            "str_format_width",
            "{{ '{:0999999999}'.format(1) }}",
            "max_value_bytes",
        ),
        attack(
            "join_doubling",
            "{% set ns = namespace(v=['ab']) %}{% for i in range(60) %}{% set ns.v = [ns.v|join('-'), ns.v|join('+')] %}{% endfor %}{{ ns.v|length }}",
            "max_value_bytes",
        ),
        attack(
            "join_method_doubling",
            "{% set ns = namespace(v='ab') %}{% for i in range(60) %}{% set ns.v = ns.v.join([ns.v, ns.v]) %}{% endfor %}{{ ns.v|length }}",
            "max_value_bytes",
        ),
        attack(
            "replace_growth",
            "{% set ns = namespace(v='ab') %}{% for i in range(60) %}{% set ns.v = ns.v|replace('a', ns.v) %}{% endfor %}{{ ns.v|length }}",
            "max_value_bytes",
        ),
        attack(
            "replace_method_growth",
            "{% set ns = namespace(v='ab') %}{% for i in range(60) %}{% set ns.v = ns.v.replace('', 'xyz') %}{% endfor %}{{ ns.v|length }}",
            "max_value_bytes",
        ),
        attack(
            "list_concat_doubling",
            "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}",
            "max_items",
        ),
        attack(
            "list_of_itself",
            "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
            "max_items",
        ),
        attack(
            "list_appends",
            format!(
                "{{% set ns = namespace(l=[]) %}}{{% for i in range(100000) %}}{{% for j in range(100000) %}}{{% set ns.l = ns.l + ['{}' ~ i] %}}{{% endfor %}}{{% endfor %}}{{{{ ns.l|length }}}}",
                kb(1)
            ),
            "max_total_bytes",
        ),
        attack(
            "slices_kept",
            "{% set ns = namespace(s='a' * 10000000, l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + [ns.s[i:]] %}{% endfor %}{{ ns.l|length }}",
            "max_total_bytes",
        ),
        attack(
            "indent_width",
            "{{ 'a\nb'|indent(1000000000) }}",
            "max_value_bytes",
        ),
        attack(
            "tojson_indent",
            "{{ [1, 2]|tojson(indent=1000000000) }}",
            "max_value_bytes",
        ),
        attack("batch_count", "{{ [1]|batch(1000000000000) }}", "max_items"),
        attack("slice_count", "{{ [1]|slice(1000000000000) }}", "max_items"),
        attack(
            "namespace_holds_itself",
            "{% set ns = namespace() %}{% set ns.x = ns %}{{ ns == ns }}{{ [ns]|sort }}{{ ns }}",
            "namespace stored in a namespace",
        ),
        attack(
            "literal_text_in_captured_loops",
            format!(
                "{{% set x %}}{{% for i in range(100000) %}}{{% for j in range(100000) %}}{}{{% endfor %}}{{% endfor %}}{{% endset %}}{{{{ x|length }}}}",
                kb(1)
            ),
            "max_total_bytes",
        ),
        attack(
            "recursive_loop_text",
            format!(
                "{{% set s %}}{{% for x in [1] recursive %}}{}{{% if loop.depth < 100 %}}{{{{ loop(range(100000)) }}}}{{% endif %}}{{% endfor %}}{{% endset %}}{{{{ s|length }}}}",
                kb(1)
            ),
            "max_total_bytes",
        ),
        attack(
            "macro_text_kept",
            format!(
                "{{% macro m() %}}{}{{% endmacro %}}{{% set ns = namespace(l=[]) %}}{{% for i in range(100000) %}}{{% set ns.l = ns.l + [m()] %}}{{% endfor %}}{{{{ ns.l|length }}}}",
                kb(10)
            ),
            "max_total_bytes",
        ),
        Attack {
            messages: (10 * 1024, 2000),
            ..attack(
                "nested_loops_over_huge_messages",
                "{% for m in messages %}{% for n in messages %}{{ m.content ~ n.content }}{% endfor %}{% endfor %}",
                "max_output_bytes",
            )
        },
        Attack {
            messages: (10 * 1024, 2000),
            ..attack(
                "captured_loops_over_huge_messages",
                "{% set x %}{% for m in messages %}{% for n in messages %}{{ m.content }}{% endfor %}{% endfor %}{% endset %}{{ x|length }}",
                "max_total_bytes",
            )
        },
        Attack {
            messages: (10, 2000),
            ..attack(
                "store_messages_in_a_loop",
                "{% set ns = namespace() %}{% for i in range(100000) %}{% for j in range(100) %}{% set ns.m = messages %}{% endfor %}{% endfor %}",
                "max_total_bytes",
            )
        },
        Attack {
            messages: (10, 2000),
            ..attack(
                "namespace_of_messages_in_a_loop",
                "{% for i in range(100000) %}{% for j in range(100) %}{% set n = namespace(m=messages) %}{% endfor %}{% endfor %}",
                "max_total_bytes",
            )
        },
        attack(
            "splat_into_a_method_in_a_loop",
            "{% set l = [0] * 500000 %}{% for i in range(100000) %}{% for j in range(100) %}{{ loop.cycle(*l) }}{% endfor %}{% endfor %}",
            "max_total_bytes",
        ),
        Attack {
            messages: (1024 * 1024, 64),
            ..attack(
                "reading_huge_messages_in_loops",
                "{% for i in range(100000) %}{% for m in messages %}{{ m.content|length }}{% endfor %}{% endfor %}",
                "max_total_bytes",
            )
        },
    ]);
    all
}

const CHILD_VAR: &str = "WGPU_TP_CHAT_ATTACK";

/// In a child process (`CHILD_VAR` set): runs one attack and prints
/// `RESULT <ms> <peak KiB>`. Does nothing otherwise.
#[test]
fn attack_in_child_process() {
    let Ok(name) = std::env::var(CHILD_VAR) else {
        return;
    };
    let attack = attacks().into_iter().find(|a| a.name == name).unwrap();
    let text = format!(
        "{{% if attack %}}{}{{% else %}}ok {{{{ messages|length }}}}{{% endif %}}",
        attack.template
    );
    let template = ChatTemplate::new(text).unwrap();
    let (size, count) = attack.messages;
    let messages: Vec<ChatMessage> = (0..count)
        .map(|_| ChatMessage::user("y".repeat(size)))
        .collect();
    let start = Instant::now();
    let got = template.render_with(&messages, false, &json!({"attack": true}));
    let ms = start.elapsed().as_millis();
    let e = got.expect_err("the attack rendered").to_string();
    assert!(e.contains(attack.says), "{name}: {e}");
    // The same template object renders again.
    let again = template
        .render_with(&messages[..count.min(1)], false, &json!({"attack": false}))
        .unwrap();
    assert_eq!(again, format!("ok {}", count.min(1)));
    println!("RESULT {ms} {} {e}", peak_rss_kib());
}

/// How long a child may run before it counts as hung: each stops in about
/// a second here (the unbounded renders ran for hours); this only tells a
/// hang from a loaded machine.
const HANG: Duration = Duration::from_secs(60);

#[test]
fn runaway_templates_stop_at_a_limit() {
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for attack in attacks() {
        let test = "nn::chat_limits::attack_in_child_process";
        let Some(out) = run_test_in_child(test, CHILD_VAR, attack.name, HANG) else {
            failures.push(format!(
                "{}: still running after {} s (killed)",
                attack.name,
                HANG.as_secs()
            ));
            continue;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r));
        let Some(line) = line.filter(|_| out.status.success()) else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: String = stderr
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            failures.push(format!("{}: {}\n{stdout}\n{tail}", attack.name, out.status));
            continue;
        };
        let mut parts = line.splitn(3, ' ');
        let ms: u64 = parts.next().unwrap().parse().unwrap();
        let kib: u64 = parts.next().unwrap().parse().unwrap();
        let error = parts.next().unwrap_or_default();
        report.push(format!(
            "{:<36} {ms:>6} ms {:>5} MiB  {error:.150}",
            attack.name,
            kib / 1024
        ));
        if kib > 600 * 1024 {
            failures.push(format!("{}: peak memory {} MiB", attack.name, kib / 1024));
        }
    }
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

/// The real templates render byte for byte as before with a hundredth of
/// every default limit: the defaults leave them a hundredfold room.
#[test]
fn real_templates_fit_a_hundredth_of_the_limits() {
    let d = ChatLimits::default();
    let small = ChatLimits {
        fuel: d.fuel / 100,
        max_output_bytes: d.max_output_bytes / 100,
        max_value_bytes: d.max_value_bytes / 100,
        max_items: d.max_items / 100,
        max_total_bytes: d.max_total_bytes / 100,
    };
    let mut n = 0;
    for case in super::chat::cases() {
        let template = super::chat::template_of(&case.dir, case.template_name.as_deref())
            .with_limits(small.clone())
            .unwrap();
        assert_eq!(
            super::chat::render(&template, &case),
            case.expected,
            "{}",
            case.name
        );
        n += 1;
    }
    assert_eq!(n, 51);
}

/// Every real template renders a long conversation (2000 messages, 1 MB)
/// within the default limits: what a render charges grows with the
/// conversation, not with its square.
#[test]
fn real_templates_render_long_conversations() {
    let messages: Vec<ChatMessage> = (0..2000)
        .map(|i| {
            let text = format!("message {i}: {}", "words and more words ".repeat(24));
            match i % 2 {
                0 => ChatMessage::user(text),
                _ => ChatMessage::assistant(text),
            }
        })
        .collect();
    let mut dirs: Vec<(PathBuf, Option<String>)> = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        let names = ChatTemplate::names_in_dir(&dir).unwrap();
        if names.is_empty() {
            dirs.push((dir.clone(), None));
        }
        for name in names {
            dirs.push((dir.clone(), Some(name)));
        }
    }
    assert!(dirs.len() >= 10, "{dirs:?}");
    for (dir, name) in dirs {
        let template = match &name {
            Some(name) => ChatTemplate::from_dir_named(&dir, name),
            None => ChatTemplate::from_dir(&dir),
        }
        .unwrap();
        let text = template
            .render_with(&messages, true, &json!({"tools": [], "documents": []}))
            .unwrap_or_else(|e| panic!("{} {name:?}: {e}", dir.display()));
        assert!(text.len() > 1_000_000, "{}", dir.display());
    }
}

#[test]
fn limits_can_be_raised_and_lowered() {
    let dir = fixtures().join("smollm2-135m-instruct");
    let messages = [ChatMessage::user("Hello there, how are you today?")];
    let template = ChatTemplate::from_dir(&dir).unwrap();
    assert_eq!(template.limits(), &ChatLimits::default());
    let want = template.render(&messages, true).unwrap();
    for (limits, says) in [
        (
            ChatLimits {
                max_output_bytes: 20,
                ..ChatLimits::default()
            },
            "ChatLimits::max_output_bytes = 20",
        ),
        (
            ChatLimits {
                fuel: 10,
                ..ChatLimits::default()
            },
            "ChatLimits::fuel = 10",
        ),
        (
            ChatLimits {
                max_value_bytes: 10,
                ..ChatLimits::default()
            },
            "ChatLimits::max_value_bytes = 10",
        ),
        (
            ChatLimits {
                max_total_bytes: 10,
                ..ChatLimits::default()
            },
            "ChatLimits::max_total_bytes = 10",
        ),
    ] {
        let small = template.clone().with_limits(limits.clone()).unwrap();
        assert_eq!(small.limits(), &limits);
        assert_eq!(small.special_tokens(), template.special_tokens());
        let e = small.render(&messages, true).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
        assert!(e.contains("ChatTemplate::with_limits"), "{e}");
        assert!(e.contains("tokenizer_config.json"), "{e}");
    }
    // Raised, or none at all: what the defaults refuse renders.
    let big = "{% set ns = namespace(v='a') %}{% for i in range(25) %}{% set ns.v = ns.v ~ ns.v %}{% endfor %}{{ ns.v|length }}";
    let e = ChatTemplate::new(big)
        .unwrap()
        .render(&[], false)
        .unwrap_err();
    assert!(e.to_string().contains("max_value_bytes"), "{e}");
    for limits in [
        ChatLimits {
            max_value_bytes: 64 << 20,
            ..ChatLimits::default()
        },
        ChatLimits::unlimited(),
    ] {
        let t = ChatTemplate::new(big).unwrap().with_limits(limits).unwrap();
        assert_eq!(t.render(&[], false).unwrap(), (1 << 25).to_string());
        assert_eq!(
            template
                .clone()
                .with_limits(ChatLimits::unlimited())
                .unwrap()
                .render(&messages, true)
                .unwrap(),
            want
        );
    }
}

/// Compiling does no template work: `'a' * n` is not folded at compile
/// time, and chains too long for the parser's stack are refused.
#[test]
fn compiling_is_bounded() {
    // Folded, this would be 50 strings of 200 MB: 10 GB, more than a
    // test machine has.
    let fold = "{{ ('a' * 99999999) ~ ('a' * 99999999) }}".repeat(50);
    let template = ChatTemplate::new(fold).unwrap();
    let e = template.render(&[], false).unwrap_err().to_string();
    assert!(e.contains("max_value_bytes"), "{e}");
    for chain in [
        format!("{{{{ 1{} }}}}", " + 1".repeat(5000)),
        format!("{{{{ {} x }}}}", "not ".repeat(5000)),
        format!("{{{{ x{} }}}}", "|trim".repeat(5000)),
        format!("{{{{ x{} }}}}", ".y".repeat(5000)),
    ] {
        let e = ChatTemplate::new(chain).unwrap_err().to_string();
        assert!(e.contains("more than 1000 operators"), "{e}");
    }
    // 900 operators (more than any real template's 30) are fine.
    let long = format!("{{{{ 1{} }}}}", " + 1".repeat(900));
    assert_eq!(
        ChatTemplate::new(long).unwrap().render(&[], false).unwrap(),
        "901"
    );
    for (template, says) in [
        ("{% include 'chat_template' %}", "include"),
        ("{% import 'chat_template' as x %}", "import"),
        ("{% extends 'chat_template' %}", "extends"),
        ("{{ __sandbox_concat('a') }}", "keeps for itself"),
    ] {
        let e = ChatTemplate::new(template).unwrap_err().to_string();
        assert!(e.contains(says), "{template}: {e}");
    }
}

/// What the rewrite does to `~`, `+`, `*`, slices, calls and namespace
/// stores keeps minijinja's results (strings, numbers, errors).
#[test]
fn rewritten_operators_keep_their_meaning() {
    let plain = |t: &str| -> String {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Lenient);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_template_owned("t", t.to_string()).unwrap();
        let ctx = minijinja::context! { a => "A", b => "B", n => 3, x => 1.5, s => "hello world", l => vec![1, 2] };
        match env.get_template("t").unwrap().render(ctx) {
            Ok(s) => s,
            Err(e) => format!("error: {}", e.to_string().split(" (in ").next().unwrap()),
        }
    };
    let ours = |t: &str| -> String {
        let template = ChatTemplate::new(t).unwrap();
        let extra = json!({"a": "A", "b": "B", "n": 3, "x": 1.5, "s": "hello world", "l": [1, 2]});
        match template.render_with(&[], false, &extra) {
            Ok(s) => s,
            Err(e) => {
                let e = e.to_string();
                let detail = e
                    .split("could not render the chat template: ")
                    .nth(1)
                    .unwrap_or(&e);
                format!(
                    "error: {}",
                    detail.split(" (in chat_template").next().unwrap()
                )
            }
        }
    };
    for t in [
        "{{ a ~ b ~ a }}|{{ a + b + a }}|{{ a * 3 }}|{{ 3 * a }}",
        "{{ (a ~ b)|lower ~ s[1:] }}",
        "{{ a + b ~ a + b }}|{{ a ~ b + a ~ b }}|{{ n * n + n }}|{{ n + n * n }}",
        "{{ (n + n) * n }}|{{ n + (n + n) + n }}|{{ ((a ~ b)) ~ ((a)) }}",
        "{{ -n * 2 + 10 }}|{{ n - 1 + 1 }}|{{ n ** 2 * 2 }}|{{ 7 // 2 * 2 }}|{{ 2 * 3 % 4 }}",
        "{{ x + 1 }}|{{ x * 2 }}|{{ n + x }}|{{ 9223372036854775807 + 1 }}|{{ 1 + true }}",
        "{{ a+b }}{{a~b}}{{n*n}}",
        "{{ 'x + y ~ z * 2' ~ a }}|{{ \"+\" + '~' + \"*\" }}",
        "{{ s|upper ~ '!' }}|{{ s.split(' ')[0] + '?' }}|{{ s[::2] ~ s[-3:] }}",
        "{{ a if n + 1 > 3 else b ~ b }}|{{ (a if false else b) + a }}",
        "{{ [a + b, n * 2]|join(',') }}|{{ {'k': a ~ b}['k'] }}|{{ (l + [3])|length }}|{{ (l * 2)|length }}",
        "{{ range(n + 1)|list|length }}|{{ range(3)|sum + n }}",
        "{% macro m(p=a ~ b) %}{{ p ~ p }}{% endmacro %}{{ m() }}|{{ m(p=a * 2) }}|{{ m(a + a) }}",
        "{% set ns = namespace(v=a, k=0) %}{% for i in range(3) %}{% set ns.v = ns.v ~ i %}{% set ns.k = ns.k + i %}{% endfor %}{{ ns.v }}|{{ ns.k }}",
        "{% for i in range(n) %}{{ loop.index ~ '/' ~ loop.length }}{% if not loop.last %},{% endif %}{% endfor %}",
        "{% for c in s if c != ' ' %}{{ c * 2 }}{% else %}none{% endfor %}",
        "{% set t %}{% for i in range(2) %}[{{ i + 1 }}]{% endfor %}{% endset %}{{ t ~ t }}",
        "{{ a is defined ~ b }}|{{ (n + 1) is divisibleby 2 }}|{{ not a ~ b }}",
        "{% for x in [1, [2, [3]], 4] recursive %}{% if x is number %}{{ x * 2 }}{% else %}[{{ loop(x) }}]{% endif %}{% endfor %}",
        "{% for x in [1, [2, [3]], 4] recursive %}{% if x is number %}{{ x }}{% else %}<{{ loop( x , ) ~ '.' }}>{% endif %}{% endfor %}",
        "{{ a ~ none ~ undefined_thing ~ true ~ 2.5 }}",
        "{{ 1 + 'a' }}",
        "{{ a * a }}",
        "{{ l * a }}",
        // Comparisons, tests with arguments, keys and method arguments go
        // through `__sandbox_cmp`.
        "{{ l == [1, 2] }}|{{ [l, l] != [l, [1]] }}|{{ l < [1, 3] }}|{{ n >= 3 }}|{{ a <= b }}|{{ x > n }}",
        "{{ 1 < n < 4 }}|{{ 1 < n == 3 != 4 }}|{{ a in s }}|{{ 'o w' in s }}|{{ 2 in l }}|{{ 5 not in l }}",
        "{{ (l)[0] == 1 }}|{{ (a ~ b).lower() == 'ab' }}|{{ l[0] + 1 == 2 }}|{{ -n == -3 }}|{{ s.split(' ')[1] in ['world'] }}",
        "{{ n is eq(3) }}|{{ l is in([l]) }}|{{ a is ne b }}|{{ n is lt(4) }}|{{ a is sameas(a) }}|{{ (l|select) == l }}",
        "{{ {a: 1, b ~ 'x': 2}[a] }}|{{ {'k': l}['k'][n - 2] }}|{{ l[n - 2] }}|{{ {'A': 1}.get(a) }}|{{ [l, l].count(l) }}",
        "{% for i in [1, 1, 2] %}{{ loop.changed(i) }}{{ loop.cycle(a, b) }}{% endfor %}|{{ s.replace('o', a) }}|{{ s.startswith(s[:2]) }}",
        "{{ [l, [0], l]|unique|list }}|{{ [[2], l]|sort }}|{{ [l, [3]]|max }}|{{ [{'k': l}]|selectattr('k', 'equalto', l)|list|length }}",
        "{{ [l, [0]]|select('equalto', l)|list }}|{{ [l, [0]]|reject('in', [l])|list }}|{{ ({'y': l, 'x': [0]}|dictsort(by='value'))[0][1] }}",
        "{{ [{'k': 1}, {'k': 1}]|groupby('k')|length }}|{{ a == 1 + 'a' }}",
        "{% if a == 'A' and (n == 3 or b in l) and not a in [b] %}yes{% endif %}",
        // Macro and call bodies are charged by a tag after their opening
        // one, which keeps its whitespace control.
        "{% macro m(x) %}\n  <{{ x }}>\n{% endmacro %}{{ m(1) }}|{{ m(2) }}",
        "{%- macro m(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ m(1) }}|{{ m(2) }}",
        "{% macro m(x='%}') +%}\n  <{{ x }}>\n{% endmacro %}{{ m() }}",
        "{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}\n body \n{% endcall %}|{% call m() -%}\n  b\n{%- endcall %}",
        // Tests without arguments, and lazy results made lists.
        "{{ a is lower }}|{{ s is lower }}|{{ x is defined }}|{{ nothing is defined }}|{{ l is iterable }}|{{ none is none }}|{{ (l|select) is iterable }}",
        "{{ l[::-1]|join(',') }}|{{ l[1:]|length }}|{{ ({'a': 1}|chain({'b': 2})).b }}|{{ (l|chain(l))|join(',') }}|{{ (l|map('string'))[1] }}",
        "{% for c in s %}{{ c }}{% if loop.index == 3 %}{% break %}{% endif %}{% endfor %}|{{ s.strip('hd') }}|{{ s|trim('hd') }}",
        // Splitting checks its pieces before making them.
        "{{ s.split()|join(',') }}|{{ s.split(' ', 1)|join(',') }}|{{ s.split('o', -1)|length }}|{{ (s|split('o'))|join(',') }}",
        "{{ (s ~ '\n' ~ a)|lines|join(',') }}|{{ ('a\nb\n').splitlines()|length }}|{{ s|list|length }}|{{ (s|batch(4))|length }}|{{ (s|sort)|first }}",
    ] {
        assert_eq!(ours(t), plain(t), "{t}");
    }
    // Lists made with `+` and `*` are lists (jinja2's printing).
    assert_eq!(
        ours("{{ l + ['x'] }}|{{ ['y'] * 2 }}"),
        "[1, 2, 'x']|['y', 'y']"
    );
    // str.count('') ends (pycompat's loops forever).
    assert_eq!(ours("{{ 'abc'.count('') }}|{{ 'aaa'.count('a') }}"), "4|3");
}

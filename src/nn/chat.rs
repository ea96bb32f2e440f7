//! [`ChatTemplate`]: Hugging Face chat templates, rendered as `transformers`
//! renders them. Contract: for a model directory and a list of
//! [`ChatMessage`]s, [`ChatTemplate::render`] returns, byte for byte, what
//! `tokenizer.apply_chat_template(messages, tokenize=False,
//! add_generation_prompt=...)` returns in transformers 5 (checked against
//! 5.24 by `tests/nn/chat.rs`), or an [`Error::Tokenizer`] naming the file;
//! it never panics on a bad template.
//!
//! As transformers does, the template is `chat_template.jinja` (plus named
//! ones in `additional_chat_templates/*.jinja`) if the directory has it, else
//! `tokenizer_config.json`'s `chat_template`: a string, or a list of
//! `{"name", "template"}` from which "default" is taken unless another name is
//! asked for. The special tokens of `tokenizer_config.json` (`bos_token`,
//! `eos_token`, ..., plain strings or `{"content": ...}` objects) are template
//! variables, and so are `messages`, `tools` and `documents` (none unless
//! given), `add_generation_prompt` and any extra context.
//!
//! Messages are what fine-tuning sets and agents carry: content as a string
//! or a list of parts, assistant `tool_calls` (arguments as an object or a
//! JSON string), a tool result's `tool_call_id` and `name`,
//! `reasoning_content`, and any other keys; the template sees each as the
//! dict transformers hands it (null keys dropped, reasoning also under
//! `thinking`). `tools`, `documents` and tool-call arguments keep the key
//! order the user gave ([`OrderedJson`]), so `tojson` and `items()` write
//! them as transformers does.
//!
//! The Jinja environment is transformers': `trim_blocks` and `lstrip_blocks`
//! on, the final newline of the template dropped, jinja2's default (lenient)
//! undefined, loop controls, `raise_exception(msg)` (an error carrying
//! `msg`), a `tojson` that is Python's `json.dumps` (no HTML escaping,
//! `ensure_ascii`, `indent`, `separators`, `sort_keys`), `strftime_now(fmt)`
//! and Python's string, dict and list methods. Where minijinja's semantics
//! differ from jinja2's, jinja2's hold: looping over `None` (a template
//! looping over `tools` when none are given) is an error, undefined values
//! have length 0, `strip()`, `split()` and `trim` know Python's whitespace
//! (`\x1c`-`\x1f` too), values print as Python's `str`. `{% generation %}`
//! blocks render their body. One difference remains: `strftime_now` reads
//! the clock in UTC (transformers: local time).
//!
//! Templates come from downloaded model files, so they are untrusted, and
//! rendering is bounded ([`ChatLimits`]: instructions, output, the size of
//! every string and list the template builds, and their total): a template
//! that would run away stops with an error naming the limit, and a template
//! you trust can be given more with [`ChatTemplate::with_limits`]. To keep
//! the bounds, lists the template builds with `+` and `*` are lists (jinja2's
//! `list`: printed `[1, 'a']`, not minijinja's lazy sequence), `debug()`,
//! `{% include %}`, `{% import %}` and `{% extends %}` are not available (as
//! in transformers), and a namespace cannot be stored in a namespace.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use minijinja::Environment;
use minijinja::value::{Value, ValueKind};
use serde::Serialize;

use crate::error::{Error, Result};

mod bounds;
mod clock;
mod compat;
mod filters;
mod guards;
mod json;
mod limits;
mod message;
mod python;
mod sandbox;
mod source;
use compat::RAISED;
use limits::{CappedOutput, LIMIT};

pub use json::OrderedJson;
pub use limits::ChatLimits;
pub use message::{
    ChatContent, ChatMessage, ContentPart, ExtraKeys, FunctionCall, ToolArguments, ToolCall,
};

/// The special tokens transformers passes to templates
/// (`SPECIAL_TOKENS_ATTRIBUTES`).
const SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// A compiled chat template and the special tokens it is given.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    /// Where it came from, for error messages.
    source: String,
    tokens: BTreeMap<String, String>,
    /// The Jinja text as given (the environment holds a rewritten copy).
    text: Arc<str>,
    /// What one render may do.
    limits: Arc<ChatLimits>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .field("special_tokens", &self.tokens)
            .finish()
    }
}

fn err(file: impl AsRef<Path>, message: impl std::fmt::Display) -> Error {
    Error::Tokenizer {
        file: file.as_ref().display().to_string(),
        message: message.to_string(),
    }
}

/// A template file or `tokenizer_config.json`, its size checked first
/// (the limit of the other small JSON files of a model directory).
fn read(path: &Path) -> Result<String> {
    let max = crate::nn::FileLimits::current().max_json_bytes;
    crate::nn::file_limits::read_text_limited(path, max, "max_json_bytes").map_err(|m| err(path, m))
}

/// The templates of `dir` by name (`None`: the single unnamed one of a
/// `chat_template` string), each with its file; and the special tokens.
type Found = (
    Vec<(Option<String>, String, String)>,
    BTreeMap<String, String>,
);

fn find(dir: &Path) -> Result<Found> {
    let config_path = dir.join("tokenizer_config.json");
    let config: serde_json::Value = if config_path.is_file() {
        serde_json::from_str(&read(&config_path)?)
            .map_err(|e| err(&config_path, format!("is not valid JSON: {e}")))?
    } else {
        serde_json::Value::Null
    };
    let mut tokens = BTreeMap::new();
    for name in SPECIAL_TOKENS {
        let token = match &config[name] {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(o) => o
                .get("content")
                .and_then(|c| c.as_str())
                .map(str::to_string),
            _ => None,
        };
        tokens.extend(token.map(|t| (name.to_string(), t)));
    }
    let mut found = Vec::new();
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        found.push((
            Some("default".to_string()),
            read(&jinja)?,
            jinja.display().to_string(),
        ));
    }
    let extra = dir.join("additional_chat_templates");
    if let Ok(entries) = std::fs::read_dir(&extra) {
        let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
        {
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
            found.push((name, read(&path)?, path.display().to_string()));
        }
    }
    if !found.is_empty() {
        // Template files take priority over tokenizer_config.json's entries.
        if found.len() == 1 && jinja.is_file() {
            found[0].0 = None;
        }
        return Ok((found, tokens));
    }
    let file = config_path.display().to_string();
    match &config["chat_template"] {
        serde_json::Value::Null => {}
        serde_json::Value::String(s) => found.push((None, s.clone(), file)),
        serde_json::Value::Array(list) => {
            for entry in list {
                let (Some(name), Some(template)) =
                    (entry["name"].as_str(), entry["template"].as_str())
                else {
                    return Err(err(
                        &config_path,
                        "has a `chat_template` list entry that is not {\"name\": ..., \"template\": ...}",
                    ));
                };
                found.push((Some(name.to_string()), template.to_string(), file.clone()));
            }
        }
        _ => {
            return Err(err(
                &config_path,
                "has a `chat_template` that is neither a string nor a list of {\"name\", \"template\"}",
            ));
        }
    }
    Ok((found, tokens))
}

impl ChatTemplate {
    /// Compiles `template` (Jinja text), with no special tokens and the
    /// default [`ChatLimits`]. A syntax error is an [`Error::Tokenizer`]
    /// saying where; so is a template that cannot be bounded (a tag of more
    /// than 1000 operators, `{% include %}`, `{% import %}`, `{% extends %}`).
    pub fn new(template: impl Into<String>) -> Result<ChatTemplate> {
        ChatTemplate::compile(template.into(), "<chat template>".to_string())
    }

    /// The chat template of a Hugging Face model directory, as transformers
    /// picks it: `chat_template.jinja`, else `tokenizer_config.json`'s
    /// `chat_template` (its "default" when there are several), with the
    /// special tokens of `tokenizer_config.json`.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<ChatTemplate> {
        let dir = dir.as_ref();
        ChatTemplate::find_in_dir(dir, None)?.ok_or_else(|| err(dir, NO_TEMPLATE))
    }

    /// The template called `name` of a directory with several (a list in
    /// `tokenizer_config.json`, or `additional_chat_templates/<name>.jinja`),
    /// e.g. `"tool_use"`.
    pub fn from_dir_named(dir: impl AsRef<Path>, name: &str) -> Result<ChatTemplate> {
        let dir = dir.as_ref();
        ChatTemplate::find_in_dir(dir, Some(name))?.ok_or_else(|| err(dir, NO_TEMPLATE))
    }

    /// The template transformers picks for a conversation with tools: the
    /// one called `"tool_use"` when `dir` names one (Hermes 2 Pro,
    /// Command-R), else the one [`ChatTemplate::from_dir`] picks.
    pub fn from_dir_for_tools(dir: impl AsRef<Path>) -> Result<ChatTemplate> {
        let dir = dir.as_ref();
        if ChatTemplate::names_in_dir(dir)?
            .iter()
            .any(|n| n == "tool_use")
        {
            ChatTemplate::from_dir_named(dir, "tool_use")
        } else {
            ChatTemplate::from_dir(dir)
        }
    }

    /// The names of the templates of `dir` (`[]` for a single unnamed one).
    pub fn names_in_dir(dir: impl AsRef<Path>) -> Result<Vec<String>> {
        Ok(find(dir.as_ref())?
            .0
            .into_iter()
            .filter_map(|(n, _, _)| n)
            .collect())
    }

    /// The template of `dir` called `name` (or the default), `None` if the
    /// directory has no template at all.
    pub(crate) fn find_in_dir(dir: &Path, name: Option<&str>) -> Result<Option<ChatTemplate>> {
        let (mut found, tokens) = find(dir)?;
        if found.is_empty() {
            return Ok(None);
        }
        let names = || {
            found
                .iter()
                .filter_map(|(n, _, _)| n.clone())
                .collect::<Vec<_>>()
        };
        let want = name.or(if found.len() == 1 && found[0].0.is_none() {
            None
        } else {
            Some("default")
        });
        let index = match want {
            None => 0,
            Some(want) => found.iter().position(|(n, _, _)| n.as_deref() == Some(want)).ok_or_else(|| {
                let hint = match (name, names().is_empty()) {
                    (_, true) => "its one template has no name; load it with ChatTemplate::from_dir".to_string(),
                    (Some(_), false) => format!("ask for one of {:?}", names()),
                    (None, false) => format!("none is called \"default\"; ask for one by name (ChatTemplate::from_dir_named) of {:?}", names()),
                };
                err(dir, format!("has no chat template called {want:?}: {hint}"))
            })?,
        };
        let (_, text, file) = found.swap_remove(index);
        let mut template = ChatTemplate::compile(text, file)?;
        template.tokens = tokens;
        Ok(Some(template))
    }

    /// Compiles `text`; `source` names where it came from in messages.
    pub(crate) fn compile(text: String, source: String) -> Result<ChatTemplate> {
        ChatTemplate::compile_with(text.into(), source, Arc::new(ChatLimits::default()))
    }

    fn compile_with(
        text: Arc<str>,
        source: String,
        limits: Arc<ChatLimits>,
    ) -> Result<ChatTemplate> {
        let env = compat::environment(&text, &limits).map_err(|e| {
            err(&source, format!("is not a valid chat template: {}; fix the Jinja, or set another template with Tokenizer::with_chat_template", describe(&e)))
        })?;
        Ok(ChatTemplate {
            env: Arc::new(env),
            source,
            tokens: BTreeMap::new(),
            text,
            limits,
        })
    }

    /// The template, rendering within `limits` instead (see [`ChatLimits`]
    /// and docs/SETTINGS.md, "Limits on untrusted model files"): to give a
    /// template you trust more room, or none
    /// ([`ChatLimits::unlimited`]); for a [`Tokenizer`](super::Tokenizer),
    /// `tokenizer.with_chat_template(tokenizer.chat_template().unwrap().clone().with_limits(limits)?)`.
    pub fn with_limits(self, limits: ChatLimits) -> Result<ChatTemplate> {
        let tokens = self.tokens;
        let mut template = ChatTemplate::compile_with(self.text, self.source, Arc::new(limits))?;
        template.tokens = tokens;
        Ok(template)
    }

    /// The limits a render stays within.
    pub fn limits(&self) -> &ChatLimits {
        &self.limits
    }

    /// The template's Jinja text, as given.
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Sets a special token the template sees, e.g. `("bos_token", "<s>")`.
    pub fn with_special_token(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> ChatTemplate {
        self.tokens.insert(name.into(), value.into());
        self
    }

    /// The special tokens the template sees (`bos_token`, `eos_token`, ...).
    pub fn special_tokens(&self) -> &BTreeMap<String, String> {
        &self.tokens
    }

    /// The file the template came from (`"<chat template>"` for [`ChatTemplate::new`]).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `messages` as the model reads them; with `add_generation_prompt`,
    /// followed by the start of the assistant's reply.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &())
    }

    /// [`ChatTemplate::render`] with extra template variables, as
    /// `apply_chat_template(messages, tools=..., documents=..., **extra)`
    /// takes them: `extra` serialises to a map (or `()`), e.g.
    /// `serde_json::json!({"date_string": "26 Jul 2024"})`, an
    /// [`OrderedJson`] object parsed from `{"tools": [...]}`, or a struct with
    /// a `tools: Vec<OrderedJson>` field. `tools` and `documents`, when not
    /// none, must be lists of objects, as transformers checks. Objects keep
    /// the order they serialise in: an [`OrderedJson`]'s own order; a
    /// `serde_json::Value`'s sorted order unless serde_json's `preserve_order`
    /// feature is on. Its entries override the special tokens; `messages` and
    /// `add_generation_prompt` cannot be among them.
    pub fn render_with<E: Serialize + ?Sized>(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &E,
    ) -> Result<String> {
        let extra = Value::from_serialize(extra);
        let mut ctx: BTreeMap<String, Value> = self
            .tokens
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
            .collect();
        let messages: Vec<Value> = messages.iter().map(ChatMessage::template_value).collect();
        ctx.insert("messages".into(), Value::from(messages));
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        ctx.insert(
            "add_generation_prompt".into(),
            Value::from(add_generation_prompt),
        );
        match extra.kind() {
            ValueKind::None | ValueKind::Undefined => {}
            ValueKind::Map => {
                for key in extra.try_iter().map_err(|e| err(&self.source, e))? {
                    let name = key
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| key.to_string());
                    if name == "messages" || name == "add_generation_prompt" {
                        return Err(Error::invalid(
                            "ChatTemplate::render_with",
                            format!("`{name}` is an argument of its own, not an extra variable"),
                        ));
                    }
                    let value = extra.get_item(&key).map_err(|e| err(&self.source, e))?;
                    ctx.insert(name, value);
                }
            }
            kind => {
                return Err(Error::invalid(
                    "ChatTemplate::render_with",
                    format!("extra variables must serialise to a map, not a {kind}"),
                ));
            }
        }
        for name in ["tools", "documents"] {
            if let Some(value) = ctx.get(name) {
                check_list_of_objects(name, value)?;
            }
        }
        let template = self
            .env
            .get_template("chat_template")
            .map_err(|e| err(&self.source, e))?;
        let mut output = CappedOutput {
            bytes: Vec::new(),
            max: self.limits.max_output_bytes,
            overflowed: false,
        };
        let rendered = template.render_captured_to(ctx, &mut output);
        if output.overflowed {
            let what = format!(
                "{LIMIT}more than {0} bytes of output (ChatLimits::max_output_bytes = {0})",
                self.limits.max_output_bytes
            );
            return Err(self.over_limit(&what, None));
        }
        if let Err(e) = rendered {
            return Err(self.render_error(&e));
        }
        String::from_utf8(output.bytes).map_err(|e| err(&self.source, e))
    }

    fn render_error(&self, e: &minijinja::Error) -> Error {
        if e.kind() == minijinja::ErrorKind::OutOfFuel {
            let what = format!(
                "{LIMIT}more than {0} instructions (ChatLimits::fuel = {0})",
                self.limits.fuel
            );
            return self.over_limit(&what, e.line());
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            let detail = c
                .downcast_ref::<minijinja::Error>()
                .and_then(|m| m.detail());
            if let Some(d) = detail.filter(|d| d.starts_with(LIMIT)) {
                return self.over_limit(d, e.line());
            }
            cause = c.source();
        }
        match e.detail().and_then(|d| d.strip_prefix(RAISED)) {
            Some(message) => err(
                &self.source,
                format!("the chat template refused these messages: {message}"),
            ),
            None => err(
                &self.source,
                format!("could not render the chat template: {}", describe(e)),
            ),
        }
    }

    /// The error of a render stopped by a limit; `what` starts with `LIMIT`.
    fn over_limit(&self, what: &str, line: Option<usize>) -> Error {
        let what = what.strip_prefix(LIMIT).unwrap_or(what);
        let at = line.map_or(String::new(), |l| format!(" (line {l})"));
        err(
            &self.source,
            format!(
                "the chat template went past a limit on untrusted templates{at}: {what}. Model files are untrusted, so rendering is bounded; for a template you trust, raise the limit with ChatTemplate::with_limits(ChatLimits {{ .. }}) or use ChatLimits::unlimited() (docs/SETTINGS.md, \"Limits on untrusted model files\")"
            ),
        )
    }
}

/// transformers' checks of `tools` and `documents`: none, or a list of
/// dicts (JSON schemas; documents' `{"title", "text"}`).
fn check_list_of_objects(name: &str, value: &Value) -> Result<()> {
    const OP: &str = "ChatTemplate::render_with";
    let what = if name == "tools" {
        "JSON schemas like {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}"
    } else {
        "objects like {\"title\": ..., \"text\": ...}"
    };
    match value.kind() {
        ValueKind::None | ValueKind::Undefined => Ok(()),
        ValueKind::Seq => {
            let items = value
                .try_iter()
                .map_err(|e| Error::invalid(OP, e.to_string()))?;
            for (i, item) in items.enumerate() {
                if item.kind() != ValueKind::Map {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "`{name}[{i}]` is {}: `{name}` must be a list of {what}",
                            OrderedJson::describe(&item)
                        ),
                    ));
                }
            }
            Ok(())
        }
        _ => Err(Error::invalid(
            OP,
            format!(
                "`{name}` is {}: it must be a list of {what}, or none",
                OrderedJson::describe(value)
            ),
        )),
    }
}

/// What to say of a directory (or tokenizer) without a chat template.
pub(crate) const NO_TEMPLATE: &str = "has no chat template: neither chat_template.jinja nor a `chat_template` in tokenizer_config.json. Download the model's tokenizer_config.json (or chat_template.jinja) into the model directory and load it with Tokenizer::from_dir or ChatTemplate::from_dir, or set one with Tokenizer::with_chat_template(ChatTemplate::new(jinja)?)";

/// A minijinja error with its cause chain and line.
fn describe(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

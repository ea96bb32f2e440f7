//! [`ChatMessage`] and its parts: messages as fine-tuning sets and agents
//! carry them (content parts, tool calls, tool results, reasoning), read
//! from JSON with errors that name the field, and handed to templates the
//! way transformers hands them.

use minijinja::value::{Value, ValueKind};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::json::OrderedJson;
use crate::error::{Error, Result};

/// Extra keys of an object, in their order: those a type has no field for.
pub type ExtraKeys = Vec<(String, OrderedJson)>;

/// One message of a conversation, as OpenAI-style chat data and
/// transformers' `apply_chat_template` carry it:
/// `{"role": ..., "content": ..., "tool_calls": [...], ...}`.
///
/// A template sees the message as a dict with the keys that are set, in this
/// order: `role`, `content`, `reasoning_content`, `tool_calls`,
/// `tool_call_id`, `name`, then [`ChatMessage::extra`]. A key given as
/// `null` is as if absent: transformers drops such keys before rendering.
/// As transformers does, a message with reasoning under any of its names
/// (`reasoning_content`, `thinking`, `reasoning`) is shown to the template
/// with both `thinking` (first) and `reasoning_content` set to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChatMessage {
    /// `"system"`, `"user"`, `"assistant"`, `"tool"`, or what else the
    /// template knows.
    pub role: String,
    /// The text of the message, or its list of parts; `None` when absent
    /// (an assistant message that only calls tools).
    pub content: Option<ChatContent>,
    /// The assistant's reasoning before its answer (Qwen3, DeepSeek-R1 and
    /// others render it between `<think>` tags).
    pub reasoning_content: Option<String>,
    /// The tools an assistant message calls.
    pub tool_calls: Option<Vec<ToolCall>>,
    /// In a tool result: the `id` of the call it answers.
    pub tool_call_id: Option<String>,
    /// In a tool result: the name of the tool that ran (some templates, e.g.
    /// Hermes 2 Pro's, want it).
    pub name: Option<String>,
    /// Other keys of the message, in the order given, e.g. `thinking` or a
    /// dataset's own fields; templates see them as given.
    pub extra: ExtraKeys,
}

/// A message's content: a string, or a list of parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatContent {
    /// Plain text: `"content": "..."`.
    Text(String),
    /// Typed parts: `"content": [{"type": "text", "text": "..."},
    /// {"type": "image_url", "image_url": {...}}]`.
    Parts(Vec<ContentPart>),
}

/// One part of a message's content list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContentPart {
    /// The part's `type`: `"text"`, `"image"`, `"image_url"`, `"video"`, ...
    pub kind: Option<String>,
    /// The part's `text` (of a `"text"` part).
    pub text: Option<String>,
    /// The part's other keys, in order, e.g. `"image_url": {"url": ...}`.
    pub extra: ExtraKeys,
}

/// One tool call of an assistant message:
/// `{"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The call's id, which the tool result's `tool_call_id` repeats.
    pub id: Option<String>,
    /// The call's `type`, `"function"` in practice.
    pub kind: Option<String>,
    /// The function called and its arguments.
    pub function: FunctionCall,
    /// Other keys of the tool call, in order (e.g. `index`).
    pub extra: ExtraKeys,
}

/// The function a [`ToolCall`] calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCall {
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: ToolArguments,
    /// Other keys of the function, in order.
    pub extra: ExtraKeys,
}

/// A tool call's arguments, as transformers passes them on: templates test
/// `arguments is string` and print an object with `tojson`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolArguments {
    /// A JSON object, its keys in the order given: `{"city": "Paris"}`.
    Object(OrderedJson),
    /// A JSON string holding the arguments, as OpenAI's API returns them:
    /// `"{\"city\": \"Paris\"}"`.
    Text(String),
}

impl ChatMessage {
    /// A message of `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: Some(ChatContent::Text(content.into())),
            ..ChatMessage::default()
        }
    }

    /// A `"system"` message.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("system", content)
    }

    /// A `"user"` message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("user", content)
    }

    /// An `"assistant"` message.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("assistant", content)
    }

    /// A `"tool"` message: the result of a tool call (add its
    /// [`ChatMessage::with_tool_call_id`] and [`ChatMessage::with_name`] as
    /// the template wants).
    pub fn tool(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new("tool", content)
    }

    /// A message of `role` whose content is a list of parts.
    pub fn with_parts(role: impl Into<String>, parts: Vec<ContentPart>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: Some(ChatContent::Parts(parts)),
            ..ChatMessage::default()
        }
    }

    /// An `"assistant"` message that only calls tools (no content).
    pub fn tool_calls(calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage {
            role: "assistant".into(),
            tool_calls: Some(calls),
            ..ChatMessage::default()
        }
    }

    /// This message with `calls` as its tool calls.
    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> ChatMessage {
        self.tool_calls = Some(calls);
        self
    }

    /// This message with its `tool_call_id` set.
    pub fn with_tool_call_id(mut self, id: impl Into<String>) -> ChatMessage {
        self.tool_call_id = Some(id.into());
        self
    }

    /// This message with its `name` set.
    pub fn with_name(mut self, name: impl Into<String>) -> ChatMessage {
        self.name = Some(name.into());
        self
    }

    /// This message with its `reasoning_content` set.
    pub fn with_reasoning_content(mut self, reasoning: impl Into<String>) -> ChatMessage {
        self.reasoning_content = Some(reasoning.into());
        self
    }

    /// This message with one more key (replacing an extra key of that name);
    /// the keys the fields hold (`role`, `content`, ...) are set through them.
    pub fn with_extra(mut self, key: impl Into<String>, value: OrderedJson) -> ChatMessage {
        let key = key.into();
        match self.extra.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.extra.push((key, value)),
        }
        self
    }

    /// The content when it is plain text.
    pub fn text(&self) -> Option<&str> {
        match &self.content {
            Some(ChatContent::Text(text)) => Some(text),
            _ => None,
        }
    }

    /// The message of a JSON object such as a JSONL record carries:
    /// `{"role": "assistant", "content": null, "tool_calls": [...]}`. A
    /// malformed one (no `role`, `content` that is neither a string nor a
    /// list of parts, `tool_calls` that is not a list, ...) is an
    /// [`Error::InvalidArgument`] naming the field. Objects keep the order of
    /// `value` (sorted, unless serde_json's `preserve_order` feature is on;
    /// [`ChatMessage::from_json_str`] keeps the order of the text).
    pub fn from_json(value: &serde_json::Value) -> Result<ChatMessage> {
        ChatMessage::from_template_value(&Value::from_serialize(value))
            .map_err(|e| Error::invalid("ChatMessage::from_json", e))
    }

    /// [`ChatMessage::from_json`] of JSON text, objects in the order written.
    pub fn from_json_str(text: &str) -> Result<ChatMessage> {
        const OP: &str = "ChatMessage::from_json_str";
        let value = OrderedJson::parse(text)
            .map_err(|e| Error::invalid(OP, format!("a message must be JSON: {e}")))?;
        ChatMessage::from_template_value(&value.0).map_err(|e| Error::invalid(OP, e))
    }

    /// The messages of a JSON list (a record's `"messages"`); an error names
    /// the message by its index, e.g. "`messages[2]`: `tool_calls` must be a
    /// list ...".
    pub fn list_from_json(value: &serde_json::Value) -> Result<Vec<ChatMessage>> {
        list_from(&Value::from_serialize(value))
            .map_err(|e| Error::invalid("ChatMessage::list_from_json", e))
    }

    /// [`ChatMessage::list_from_json`] of JSON text, objects in the order
    /// written.
    pub fn list_from_json_str(text: &str) -> Result<Vec<ChatMessage>> {
        const OP: &str = "ChatMessage::list_from_json_str";
        let value = OrderedJson::parse(text)
            .map_err(|e| Error::invalid(OP, format!("messages must be JSON: {e}")))?;
        list_from(&value.0).map_err(|e| Error::invalid(OP, e))
    }

    /// Reads a message from a JSON-like value; the error names the field.
    pub(crate) fn from_template_value(value: &Value) -> std::result::Result<ChatMessage, String> {
        let fields = Fields::of(value, "", "a message", MESSAGE_SHAPE)?;
        if fields.get("role").is_none() {
            return Err(format!(
                "`role` is missing: each message needs one (\"system\", \"user\", \"assistant\", \"tool\", ...), as in {MESSAGE_SHAPE}"
            ));
        }
        let mut message = ChatMessage::default();
        for (key, v) in fields.0 {
            match key.as_str() {
                "role" => message.role = string(&v, "role")?,
                "content" => message.content = Some(content(&v)?),
                "reasoning_content" => {
                    message.reasoning_content = Some(string(&v, "reasoning_content")?)
                }
                "tool_calls" => message.tool_calls = Some(tool_calls(&v)?),
                "tool_call_id" => message.tool_call_id = Some(string(&v, "tool_call_id")?),
                "name" => message.name = Some(string(&v, "name")?),
                _ => message.extra.push((key, OrderedJson(v))),
            }
        }
        Ok(message)
    }

    /// The dict a template sees, keys in order, null keys left out.
    fn to_value(&self) -> Value {
        Value::from_iter(self.to_pairs())
    }

    /// The keys and values of [`ChatMessage::to_value`], in order.
    fn to_pairs(&self) -> Vec<(Value, Value)> {
        let mut pairs: Vec<(Value, Value)> = vec![("role".into(), Value::from(self.role.as_str()))];
        if let Some(content) = &self.content {
            pairs.push(("content".into(), content.to_value()));
        }
        if let Some(reasoning) = &self.reasoning_content {
            pairs.push(("reasoning_content".into(), Value::from(reasoning.as_str())));
        }
        if let Some(calls) = &self.tool_calls {
            let calls: Vec<Value> = calls.iter().map(ToolCall::to_value).collect();
            pairs.push(("tool_calls".into(), Value::from(calls)));
        }
        for (key, v) in [("tool_call_id", &self.tool_call_id), ("name", &self.name)] {
            if let Some(v) = v {
                pairs.push((key.into(), Value::from(v.as_str())));
            }
        }
        push_extra(&mut pairs, &self.extra, true);
        pairs
    }

    /// The message as transformers' `apply_chat_template` hands it to the
    /// template: null keys dropped, and reasoning under any of its names
    /// copied to `thinking` (first key) and `reasoning_content`.
    pub(crate) fn template_value(&self) -> Value {
        let pairs = self.to_pairs();
        let find = |name: &str| {
            pairs
                .iter()
                .find(|(k, v)| k.as_str() == Some(name) && !v.is_none())
                .map(|(_, v)| v.clone())
        };
        let Some(reasoning) = ["reasoning_content", "thinking", "reasoning"]
            .iter()
            .find_map(|name| find(name))
        else {
            return Value::from_iter(pairs);
        };
        // {"thinking": r, **message, "reasoning_content": r}
        let mut out: Vec<(Value, Value)> = vec![("thinking".into(), reasoning.clone())];
        for (k, v) in pairs {
            match k.as_str() {
                Some("thinking") => out[0].1 = v,
                Some("reasoning_content") => out.push((k, reasoning.clone())),
                _ => out.push((k, v)),
            }
        }
        if !out
            .iter()
            .any(|(k, _)| k.as_str() == Some("reasoning_content"))
        {
            out.push(("reasoning_content".into(), reasoning));
        }
        Value::from_iter(out)
    }
}

impl ChatContent {
    fn to_value(&self) -> Value {
        match self {
            ChatContent::Text(text) => Value::from(text.as_str()),
            ChatContent::Parts(parts) => {
                Value::from(parts.iter().map(ContentPart::to_value).collect::<Vec<_>>())
            }
        }
    }
}

impl From<&str> for ChatContent {
    /// Plain text.
    fn from(text: &str) -> ChatContent {
        ChatContent::Text(text.to_string())
    }
}

impl From<String> for ChatContent {
    /// Plain text.
    fn from(text: String) -> ChatContent {
        ChatContent::Text(text)
    }
}

impl ContentPart {
    /// A `{"type": "text", "text": ...}` part.
    pub fn text(text: impl Into<String>) -> ContentPart {
        ContentPart {
            kind: Some("text".into()),
            text: Some(text.into()),
            extra: Vec::new(),
        }
    }

    /// A part of `kind` with one more key, e.g.
    /// `ContentPart::with("image_url", "image_url", url_object)`.
    pub fn with(
        kind: impl Into<String>,
        key: impl Into<String>,
        value: OrderedJson,
    ) -> ContentPart {
        ContentPart {
            kind: Some(kind.into()),
            text: None,
            extra: vec![(key.into(), value)],
        }
    }

    fn to_value(&self) -> Value {
        let mut pairs: Vec<(Value, Value)> = Vec::new();
        for (key, v) in [("type", &self.kind), ("text", &self.text)] {
            if let Some(v) = v {
                pairs.push((key.into(), Value::from(v.as_str())));
            }
        }
        push_extra(&mut pairs, &self.extra, false);
        Value::from_iter(pairs)
    }
}

impl ToolCall {
    /// A `{"type": "function", "function": {"name": ..., "arguments": ...}}`
    /// call.
    pub fn function(name: impl Into<String>, arguments: impl Into<ToolArguments>) -> ToolCall {
        ToolCall {
            id: None,
            kind: Some("function".into()),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
                extra: Vec::new(),
            },
            extra: Vec::new(),
        }
    }

    /// This call with its `id` set.
    pub fn with_id(mut self, id: impl Into<String>) -> ToolCall {
        self.id = Some(id.into());
        self
    }

    fn to_value(&self) -> Value {
        let mut pairs: Vec<(Value, Value)> = Vec::new();
        for (key, v) in [("id", &self.id), ("type", &self.kind)] {
            if let Some(v) = v {
                pairs.push((key.into(), Value::from(v.as_str())));
            }
        }
        let f = &self.function;
        let arguments = match &f.arguments {
            ToolArguments::Object(json) => json.0.clone(),
            ToolArguments::Text(text) => Value::from(text.as_str()),
        };
        let mut function: Vec<(Value, Value)> = vec![
            ("name".into(), Value::from(f.name.as_str())),
            ("arguments".into(), arguments),
        ];
        push_extra(&mut function, &f.extra, false);
        pairs.push(("function".into(), Value::from_iter(function)));
        push_extra(&mut pairs, &self.extra, false);
        Value::from_iter(pairs)
    }
}

impl From<OrderedJson> for ToolArguments {
    /// Arguments as a JSON object (a JSON string becomes [`ToolArguments::Text`]).
    fn from(json: OrderedJson) -> ToolArguments {
        match json.as_str() {
            Some(text) => ToolArguments::Text(text.to_string()),
            None => ToolArguments::Object(json),
        }
    }
}

impl From<serde_json::Value> for ToolArguments {
    /// Arguments as a JSON object (a JSON string becomes [`ToolArguments::Text`]).
    fn from(json: serde_json::Value) -> ToolArguments {
        ToolArguments::from(OrderedJson::from(json))
    }
}

impl From<&str> for ToolArguments {
    /// Arguments as a JSON string.
    fn from(text: &str) -> ToolArguments {
        ToolArguments::Text(text.to_string())
    }
}

impl From<String> for ToolArguments {
    /// Arguments as a JSON string.
    fn from(text: String) -> ToolArguments {
        ToolArguments::Text(text)
    }
}

impl Serialize for ChatMessage {
    /// The message as JSON, keys in the order a template sees them.
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ChatMessage {
    /// Reads a message as [`ChatMessage::from_json`] does (objects in the
    /// order of the input); a malformed one is an error naming the field.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        ChatMessage::from_template_value(&value).map_err(D::Error::custom)
    }
}

/// The keys the nested types have fields for.
const TYPED: [&str; 6] = ["type", "text", "id", "function", "name", "arguments"];

const MESSAGE_SHAPE: &str = "{\"role\": \"user\", \"content\": \"...\"}";
const PART_SHAPE: &str = "{\"type\": \"text\", \"text\": \"...\"}";
const CALL_SHAPE: &str =
    "{\"type\": \"function\", \"function\": {\"name\": \"...\", \"arguments\": {...}}}";

/// The keys of an object in order; `what` and `shape` describe it when it
/// is no object. At the top of a message, keys given as null are left out,
/// as transformers drops them; deeper down, only the typed ones are (their
/// fields cannot say null), and other keys keep their nulls.
struct Fields(Vec<(String, Value)>);

impl Fields {
    fn of(
        value: &Value,
        path: &str,
        what: &str,
        shape: &str,
    ) -> std::result::Result<Fields, String> {
        let top = path.is_empty();
        if value.kind() != ValueKind::Map {
            let at = if path.is_empty() {
                String::new()
            } else {
                format!("`{path}`: ")
            };
            return Err(format!(
                "{at}{what} must be a JSON object like {shape}, not {}",
                OrderedJson::describe(value)
            ));
        }
        let mut fields = Vec::new();
        for key in value.try_iter().map_err(|e| e.to_string())? {
            let v = value.get_item(&key).map_err(|e| e.to_string())?;
            let name = match key.as_str() {
                Some(name) => name.to_string(),
                None => key.to_string(),
            };
            if (v.is_none() || v.is_undefined()) && (top || TYPED.contains(&name.as_str())) {
                continue;
            }
            fields.push((name, v));
        }
        Ok(Fields(fields))
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

fn list_from(value: &Value) -> std::result::Result<Vec<ChatMessage>, String> {
    if value.kind() != ValueKind::Seq {
        return Err(format!(
            "messages must be a JSON list of messages like [{MESSAGE_SHAPE}], not {}",
            OrderedJson::describe(value)
        ));
    }
    let items = value.try_iter().map_err(|e| e.to_string())?;
    items
        .enumerate()
        .map(|(i, m)| {
            ChatMessage::from_template_value(&m).map_err(|e| format!("messages[{i}]: {e}"))
        })
        .collect()
}

/// Appends `extra` to `pairs`; at the top of a message (`top`), null keys
/// are left out as transformers drops them.
fn push_extra(pairs: &mut Vec<(Value, Value)>, extra: &ExtraKeys, top: bool) {
    for (key, v) in extra {
        if !(top && v.is_null()) {
            pairs.push((Value::from(key.as_str()), v.0.clone()));
        }
    }
}

fn string(value: &Value, field: &str) -> std::result::Result<String, String> {
    match value.as_str() {
        Some(s) if value.kind() == ValueKind::String => Ok(s.to_string()),
        _ => Err(format!(
            "`{field}` must be a string, not {}",
            OrderedJson::describe(value)
        )),
    }
}

fn content(value: &Value) -> std::result::Result<ChatContent, String> {
    match value.kind() {
        ValueKind::String => Ok(ChatContent::Text(
            value.as_str().unwrap_or_default().to_string(),
        )),
        ValueKind::Seq => {
            let mut parts = Vec::new();
            for (i, part) in value.try_iter().map_err(|e| e.to_string())?.enumerate() {
                let path = format!("content[{i}]");
                let fields = Fields::of(&part, &path, "a content part", PART_SHAPE)?;
                let mut out = ContentPart::default();
                for (key, v) in fields.0 {
                    match key.as_str() {
                        "type" => out.kind = Some(string(&v, &format!("{path}.type"))?),
                        "text" => out.text = Some(string(&v, &format!("{path}.text"))?),
                        _ => out.extra.push((key, OrderedJson(v))),
                    }
                }
                parts.push(out);
            }
            Ok(ChatContent::Parts(parts))
        }
        _ => Err(format!(
            "`content` must be a string or a list of parts like [{PART_SHAPE}], not {}",
            OrderedJson::describe(value)
        )),
    }
}

fn tool_calls(value: &Value) -> std::result::Result<Vec<ToolCall>, String> {
    if value.kind() != ValueKind::Seq {
        return Err(format!(
            "`tool_calls` must be a list of tool calls like [{CALL_SHAPE}], not {}",
            OrderedJson::describe(value)
        ));
    }
    let mut calls = Vec::new();
    for (i, call) in value.try_iter().map_err(|e| e.to_string())?.enumerate() {
        let path = format!("tool_calls[{i}]");
        let fields = Fields::of(&call, &path, "a tool call", CALL_SHAPE)?;
        let Some(function) = fields.get("function") else {
            return Err(format!(
                "`{path}.function` is missing: a tool call is {CALL_SHAPE}"
            ));
        };
        let function = function_call(function, &format!("{path}.function"))?;
        let mut out = ToolCall {
            id: None,
            kind: None,
            function,
            extra: Vec::new(),
        };
        for (key, v) in fields.0 {
            match key.as_str() {
                "id" => out.id = Some(string(&v, &format!("{path}.id"))?),
                "type" => out.kind = Some(string(&v, &format!("{path}.type"))?),
                "function" => {}
                _ => out.extra.push((key, OrderedJson(v))),
            }
        }
        calls.push(out);
    }
    Ok(calls)
}

fn function_call(value: &Value, path: &str) -> std::result::Result<FunctionCall, String> {
    let shape = "{\"name\": \"...\", \"arguments\": {...}}";
    let fields = Fields::of(value, path, "a tool call's function", shape)?;
    let name = match fields.get("name") {
        Some(v) => string(v, &format!("{path}.name"))?,
        None => return Err(format!("`{path}.name` is missing: a function is {shape}")),
    };
    let arguments = match fields.get("arguments") {
        Some(v) if v.kind() == ValueKind::Map => ToolArguments::Object(OrderedJson(v.clone())),
        Some(v) if v.kind() == ValueKind::String => {
            ToolArguments::Text(v.as_str().unwrap_or_default().to_string())
        }
        Some(v) => {
            return Err(format!(
                "`{path}.arguments` must be an object or a JSON string, not {}",
                OrderedJson::describe(v)
            ));
        }
        None => {
            return Err(format!(
                "`{path}.arguments` is missing: give an object (or a JSON string; {{}} when there are none)"
            ));
        }
    };
    let extra = fields
        .0
        .into_iter()
        .filter(|(k, _)| k != "name" && k != "arguments")
        .map(|(k, v)| (k, OrderedJson(v)))
        .collect();
    Ok(FunctionCall {
        name,
        arguments,
        extra,
    })
}

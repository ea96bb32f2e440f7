//! The text rewrite of a chat template before minijinja parses it: its
//! parser knows neither transformers' `{% generation %}` blocks (the
//! assistant-mask tag, which renders its body unchanged) nor jinja2's
//! error for looping over `None` (transformers passes `tools=None` and
//! `documents=None`, and a template that loops over them unguarded fails),
//! so `{% generation %}` becomes `{% if true %}` and each `{% for %}`'s
//! iterable passes through a filter (`sandbox::ITERABLE`) that raises it.

use super::sandbox::ITERABLE;

/// The template as minijinja compiles it: `{% generation %}` /
/// `{% endgeneration %}` (transformers' assistant-mask tag, which renders
/// its body unchanged) as `{% if true %}` / `{% endif %}`, and each
/// `{% for x in EXPR %}` as `{% for x in (EXPR)|__jinja2_iterable("EXPR") %}`
/// so that looping over `None` fails as in jinja2. Whitespace control,
/// comments, `{{ }}` and `{% raw %}` blocks are kept as they are.
pub(super) fn rewrite(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(start) = find_open(rest) {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match &rest[start..start + 2] {
            "{#" => {
                let end = after.find("#}").map_or(after.len(), |e| e + 2);
                out.push_str(&rest[start..start + 2 + end]);
                rest = &after[end..];
            }
            "{{" => {
                let end = tag_end(after, '}').map_or(after.len(), |e| e + 2);
                out.push_str(&rest[start..start + 2 + end]);
                rest = &after[end..];
            }
            _ => {
                let Some(end) = tag_end(after, '%') else {
                    out.push_str(&rest[start..]);
                    rest = "";
                    break;
                };
                let inner = &after[..end];
                rest = &after[end + 2..];
                let left_len = inner.len() - inner.trim_start_matches(['-', '+']).len();
                let right_len = inner.len() - inner.trim_end_matches(['-', '+']).len();
                let (left, right) = (&inner[..left_len], &inner[inner.len() - right_len..]);
                let body = &inner[left_len..inner.len() - right_len];
                let word = body.split_whitespace().next().unwrap_or("");
                match word {
                    "generation" if body.trim() == "generation" => {
                        out.push_str(&format!("{{%{left} if true {right}%}}"))
                    }
                    "endgeneration" if body.trim() == "endgeneration" => {
                        out.push_str(&format!("{{%{left} endif {right}%}}"))
                    }
                    "for" => out.push_str(&format!("{{%{left}{}{right}%}}", rewrite_for(body))),
                    "raw" if body.trim() == "raw" => {
                        // Everything up to the end of `{% endraw %}` as it is.
                        out.push_str(&format!("{{%{inner}%}}"));
                        let end = find_endraw(rest).unwrap_or(rest.len());
                        out.push_str(&rest[..end]);
                        rest = &rest[end..];
                    }
                    _ => out.push_str(&format!("{{%{inner}%}}")),
                }
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where the next `{{`, `{%` or `{#` starts.
fn find_open(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(1))
        .find(|&i| bytes[i] == b'{' && matches!(bytes[i + 1], b'{' | b'%' | b'#'))
}

/// Where a scan of Jinja text is: inside a string literal (and after a
/// backslash in it) or not.
#[derive(Default)]
struct Quote {
    open: Option<char>,
    escaped: bool,
}

impl Quote {
    /// Steps over `c`; true if `c` is inside a string literal (its quotes
    /// included), where brackets and words do not count.
    fn inside(&mut self, c: char) -> bool {
        match self.open {
            Some(q) => {
                match c {
                    _ if self.escaped => self.escaped = false,
                    '\\' => self.escaped = true,
                    c if c == q => self.open = None,
                    _ => {}
                }
                true
            }
            None if c == '\'' || c == '"' => {
                self.open = Some(c);
                true
            }
            None => false,
        }
    }
}

/// Where the `X}` (X: `}` or `%`) that closes a tag starts in `text` (the
/// text after its opening), skipping string literals and brackets.
fn tag_end(text: &str, close: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote = Quote::default();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if quote.inside(c) {
            continue;
        }
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '}' if depth > 0 => depth -= 1,
            c if c == close && depth == 0 && chars.peek().map(|(_, n)| *n) == Some('}') => {
                return Some(i);
            }
            _ => {}
        }
    }
    None
}

/// Where the text after a `{% endraw %}` tag starts in `text`.
fn find_endraw(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(start) = text[from..].find("{%").map(|s| s + from) {
        let after = &text[start + 2..];
        let end = after.find("%}")?;
        if after[..end].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace())
            == "endraw"
        {
            return Some(start + 2 + end + 2);
        }
        from = start + 2;
    }
    None
}

/// `for TARGET in EXPR [if COND] [recursive]` with EXPR passed through the
/// `__jinja2_iterable` filter; anything it cannot read is left as it is.
fn rewrite_for(body: &str) -> String {
    let words = words(body);
    let Some(&(in_start, in_end)) = words.iter().find(|&&(s, e)| &body[s..e] == "in") else {
        return body.to_string();
    };
    let expr_end = words
        .iter()
        .filter(|&&(s, _)| s > in_end)
        .find(|&&(s, e)| matches!(&body[s..e], "if" | "recursive"))
        .map_or(body.trim_end().len(), |&(s, _)| s);
    let expr = body[in_end..expr_end].trim();
    if expr.is_empty() || in_start == 0 {
        return body.to_string();
    }
    let literal: String = expr
        .chars()
        .flat_map(|c| match c {
            '\\' => vec!['\\', '\\'],
            '"' => vec!['\\', '"'],
            '\n' => vec!['\\', 'n'],
            '\r' => vec!['\\', 'r'],
            '\t' => vec!['\\', 't'],
            c => vec![c],
        })
        .collect();
    format!(
        "{} ({expr})|{ITERABLE}(\"{literal}\") {}",
        &body[..in_end],
        &body[expr_end..]
    )
}

/// The (start, end) of each bare word of a tag body, outside string
/// literals and brackets.
fn words(body: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut quote = Quote::default();
    let mut start: Option<usize> = None;
    let mut prev: Option<char> = None;
    for (i, c) in body.char_indices() {
        let word_char = c.is_alphanumeric() || c == '_';
        if let Some(s) = start
            && !word_char
        {
            out.push((s, i));
            start = None;
        }
        if !quote.inside(c) {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                c if word_char && depth == 0 && start.is_none() && prev != Some('.') => {
                    let after_word = prev.is_some_and(|p| p.is_alphanumeric() || p == '_');
                    if !after_word && !c.is_ascii_digit() {
                        start = Some(i);
                    }
                }
                _ => {}
            }
        }
        prev = Some(c);
    }
    if let Some(s) = start {
        out.push((s, body.len()));
    }
    out
}

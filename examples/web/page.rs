//! The page's side of the demo: its elements by id, errors as the text it
//! shows, yielding to the browser, the address's parameters, HTML tables.

use wasm_bindgen::prelude::*;
use web_sys::Document;
use wgpu_tp::CommStats;

/// Any failure, as the text the page shows.
pub struct Fail(pub String);

impl From<wgpu_tp::Error> for Fail {
    fn from(e: wgpu_tp::Error) -> Self {
        Fail(e.to_string())
    }
}

impl From<JsValue> for Fail {
    fn from(v: JsValue) -> Self {
        Fail(v.as_string().unwrap_or_else(|| format!("{v:?}")))
    }
}

impl From<&str> for Fail {
    fn from(s: &str) -> Self {
        Fail(s.into())
    }
}

/// The page's elements, by id (see index.html).
pub struct Page {
    doc: Document,
}

impl Page {
    pub fn new() -> Result<Page, Fail> {
        let doc = web_sys::window()
            .and_then(|w| w.document())
            .ok_or("no document")?;
        Ok(Page { doc })
    }

    pub fn el(&self, id: &str) -> Result<web_sys::Element, Fail> {
        self.doc
            .get_element_by_id(id)
            .ok_or_else(|| Fail(format!("no element #{id}")))
    }

    pub fn text(&self, id: &str, s: &str) -> Result<(), Fail> {
        self.el(id)?.set_text_content(Some(s));
        Ok(())
    }

    pub fn html(&self, id: &str, s: &str) -> Result<(), Fail> {
        self.el(id)?.set_inner_html(s);
        Ok(())
    }

    pub fn status(&self, s: &str) -> Result<(), Fail> {
        log!("{s}");
        self.text("status", s)
    }

    pub fn body_attr(&self, name: &str, value: &str) {
        if let Some(b) = self.doc.body() {
            let _ = b.set_attribute(name, value);
        }
    }

    /// Show `msg` and mark the page as failed (best effort: this is the last resort).
    pub fn fail(&self, msg: &str) {
        web_sys::console::error_1(&msg.into());
        if let Some(e) = self.doc.get_element_by_id("error") {
            e.set_text_content(Some(msg));
            let _ = e.remove_attribute("hidden");
        }
        if let Some(e) = self.doc.get_element_by_id("status") {
            e.set_text_content(Some("Failed (see the error above)."));
        }
        self.body_attr("data-done", "error");
    }
}

/// Let the browser run other tasks and repaint.
pub async fn yield_to_browser() {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 0);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(p).await;
}

/// `name=value` from the page's address (`?steps=40&lr=0.003`), if given and valid.
pub fn url_param<T: std::str::FromStr>(name: &str) -> Option<T> {
    let w = web_sys::window()?;
    let loc = js_sys::Reflect::get(&w, &"location".into()).ok()?;
    let search = js_sys::Reflect::get(&loc, &"search".into())
        .ok()?
        .as_string()?;
    let v = search
        .trim_start_matches('?')
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))?;
    v.parse().ok()
}

/// `s` with the characters HTML would read as markup escaped.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `b` bytes as B / KiB / MiB.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// The rows of a communication table.
pub fn comm_rows(stats: &CommStats) -> String {
    if stats.is_empty() {
        return "<tr><td colspan=4>none</td></tr>".into();
    }
    let mut rows = String::new();
    let (mut calls, mut bytes) = (0, 0);
    for (kind, c) in stats {
        rows += &format!(
            "<tr><td>{kind:?}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.calls,
            human_bytes(c.bytes),
            human_bytes(c.bytes / c.calls.max(1))
        );
        (calls, bytes) = (calls + c.calls, bytes + c.bytes);
    }
    rows + &format!(
        "<tr class=total><td>total</td><td>{calls}</td><td>{}</td><td></td></tr>",
        human_bytes(bytes)
    )
}

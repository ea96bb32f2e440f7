//! The GGUF container (`wgpu_tp::nn::gguf`), against gguf-py, llama.cpp's
//! own Python package (`fixtures/gguf_format/make_format_fixtures.py`):
//! - its v3 file (every metadata kind, nested arrays, alignment 64, seven
//!   tensors of five types) and v2 file read as gguf-py reads them
//!   (`format_v*.json`), memory-mapped and from bytes;
//! - typed getters: conversions that fit, errors naming file, key,
//!   expected and found kinds; tensor bytes and row ranges;
//! - `writer`: its output pinned byte for byte (`written_by_wgpu_tp.gguf`,
//!   which the script's `--check` reads with gguf-py and llama.cpp's C
//!   reader), read back identically, laid out as llama.cpp requires,
//!   streamed in order, written atomically, and its refusals;
//! - `bad_files`: truncated and malformed files, each an error naming the
//!   file and the key or tensor.

mod bad_files;
mod writer;

use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};
use wgpu_tp::DType;
use wgpu_tp::nn::gguf::{Array, GgufFile, Value};
use wgpu_tp::quant::QuantType;

/// `tests/fixtures/gguf_format/<name>`.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/gguf_format")
        .join(name)
}

/// A fresh empty directory under the system's temp dir.
fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wgpu-tp-gguf-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Deterministic bytes, as the fixture script's `pattern`.
fn pattern(seed: usize, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 31 + seed * 7 + 1) % 251) as u8)
        .collect()
}

/// `seed + 0.25 i`, as the fixture script's `floats`.
fn floats(seed: f32, n: usize) -> Vec<f32> {
    (0..n).map(|i| seed + 0.25 * i as f32).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A value as the JSON the script writes for it (strings as text, or hex
/// when not UTF-8).
fn to_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => json!(f64::from(*x)),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(s) => match std::str::from_utf8(s) {
            Ok(t) => json!(t),
            Err(_) => json!({ "hex": hex(s) }),
        },
        Value::Array(a) => Json::Array(elements(a)),
    }
}

/// A flat array's elements as JSON.
fn elements(a: &Array) -> Vec<Json> {
    fn each<T: Into<Json> + Copy>(v: &[T]) -> Vec<Json> {
        v.iter().map(|&x| x.into()).collect()
    }
    match a {
        Array::U8(v) => each(v),
        Array::I8(v) => each(v),
        Array::U16(v) => each(v),
        Array::I16(v) => each(v),
        Array::U32(v) => each(v),
        Array::I32(v) => each(v),
        Array::U64(v) => each(v),
        Array::I64(v) => each(v),
        Array::F32(v) => v.iter().map(|&x| json!(f64::from(x))).collect(),
        Array::F64(v) => each(v),
        Array::Bool(v) => each(v),
        Array::String(v) => v
            .iter()
            .map(|s| to_json(&Value::String(s.clone())))
            .collect(),
        Array::Array(_) => panic!("nested arrays are compared by hand"),
    }
}

/// JSON values equal, numbers as f64 to 1e-15: serde_json's default
/// float parsing may miss the nearest f64 by an ulp (which no f32 and no
/// value written here is close enough to another to hide behind).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            x == y || (x - y).abs() <= 1e-15 * x.abs().max(y.abs())
        }
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        _ => a == b,
    }
}

/// `file` holds what gguf-py read from the same bytes (`json`).
fn matches_gguf_py(file: &GgufFile, json: &Json) {
    assert_eq!(u64::from(file.version()), json["version"]);
    assert_eq!(u64::from(file.alignment()), json["alignment"]);
    assert_eq!(file.data_start() as u64, json["data_offset"]);
    let expected = json["metadata"].as_array().unwrap();
    assert_eq!(file.metadata().len(), expected.len());
    for ((key, value), e) in file.metadata().iter().zip(expected) {
        assert_eq!(key, e["key"].as_str().unwrap());
        assert_eq!(value.value_type().name(), e["kind"], "{key}");
        if let Some(elem) = e.get("elem") {
            assert_eq!(value.as_array().unwrap().elem_type().name(), elem, "{key}");
        }
        if e.get("nested").is_some() {
            continue; // gguf-py flattens them: checked by hand below
        }
        let want = match e.get("bytes_hex") {
            Some(h) => json!({ "hex": h }),
            None => e["value"].clone(),
        };
        assert!(same(&to_json(value), &want), "{key}: {value:?} != {want}");
    }
    let tensors = json["tensors"].as_array().unwrap();
    assert_eq!(file.tensors().len(), tensors.len());
    for (t, e) in file.tensors().iter().zip(tensors) {
        assert_eq!(t.name(), e["name"].as_str().unwrap());
        let mut ne: Vec<usize> = serde_json::from_value(e["ne"].clone()).unwrap();
        ne.reverse();
        assert_eq!(t.shape(), ne, "{}", t.name());
        let ty = match t.dtype() {
            DType::F32 => "F32".to_string(),
            DType::F16 => "F16".to_string(),
            DType::BF16 => "BF16".to_string(),
            DType::Quant(q) => q.ggml_name().to_string(),
            d => panic!("{d}"),
        };
        assert_eq!(ty, e["type"].as_str().unwrap());
        assert_eq!(t.byte_range().start as u64, e["offset"]);
        assert_eq!(t.byte_range().len() as u64, e["n_bytes"]);
        assert_eq!(hex(file.tensor_bytes(t.name()).unwrap()), e["hex"]);
    }
}

fn json(name: &str) -> Json {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

#[test]
fn gguf_py_files_read_as_gguf_py_reads_them() {
    for (file, expected) in [
        ("format_v3.gguf", "format_v3.json"),
        ("format_v2.gguf", "format_v2.json"),
    ] {
        let mapped = GgufFile::open(fixture(file)).unwrap();
        matches_gguf_py(&mapped, &json(expected));
        let bytes = std::fs::read(fixture(file)).unwrap();
        let owned = GgufFile::from_bytes(file, bytes).unwrap();
        matches_gguf_py(&owned, &json(expected));
        assert_eq!(owned.name(), file);
        assert_eq!(owned.metadata(), mapped.metadata());
        assert_eq!(owned.tensors(), mapped.tensors());
    }
}

#[test]
fn nested_arrays_and_raw_strings_keep_their_kinds() {
    let f = GgufFile::open(fixture("format_v3.gguf")).unwrap();
    let nested = |key| f.get(key).unwrap().as_array().unwrap().clone();
    let s = |v: &[&str]| Array::String(v.iter().map(|s| s.as_bytes().to_vec()).collect());
    assert_eq!(
        nested("test.nested.i32"),
        Array::Array(vec![Array::I32(vec![1, 2]), Array::I32(vec![3])])
    );
    assert_eq!(
        nested("test.nested.string"),
        Array::Array(vec![s(&["x"]), s(&["y", "z"])])
    );
    assert_eq!(
        nested("test.nested.u8"),
        Array::Array(vec![Array::U8(vec![1, 2]), Array::U8(vec![3])])
    );
    assert_eq!(
        nested("test.nested.mixed"),
        Array::Array(vec![Array::I32(vec![1]), s(&["a"])])
    );
    assert_eq!(nested("test.nested.mixed").kind(), "array of array");
    let deep = nested("test.nested.deep");
    assert_eq!(
        deep,
        Array::Array(vec![
            Array::Array(vec![Array::I32(vec![1, 2])]),
            Array::Array(vec![Array::I32(vec![3])]),
        ])
    );
    assert_eq!(deep.kind(), "array of array of array of i32");
    assert_eq!(
        f.get("test.not_utf8").unwrap().as_bytes(),
        Some(&b"\xff\xfeok"[..])
    );
    let e = f.string("test.not_utf8").unwrap_err().to_string();
    assert!(
        e.contains("format_v3.gguf") && e.contains("\"test.not_utf8\"") && e.contains("not UTF-8"),
        "{e}"
    );
}

#[test]
fn typed_getters_convert_what_fits_and_name_the_rest() {
    let f = GgufFile::open(fixture("format_v3.gguf")).unwrap();
    assert_eq!(f.u32("test.u8").unwrap(), Some(200));
    assert_eq!(f.i64("test.u32").unwrap(), Some(4_000_000_000));
    assert_eq!(f.usize("general.alignment").unwrap(), Some(64));
    assert_eq!(f.u64("test.u64").unwrap(), Some((1 << 63) + 5));
    assert_eq!(f.f64("test.f32").unwrap(), Some(1.5));
    assert_eq!(f.f32("test.i32").unwrap(), Some(-2e9));
    assert_eq!(f.f64("test.f64").unwrap(), Some(-2.25e100));
    assert_eq!(f.bool("test.bool").unwrap(), Some(true));
    assert_eq!(f.string("test.string").unwrap(), Some("héllo wörld ✓"));
    assert_eq!(
        f.strings("test.arr.string").unwrap(),
        Some(vec!["a", "bc", "", "✓"])
    );
    assert_eq!(f.i32s("test.arr.u8").unwrap(), Some(vec![1, 2, 255]));
    assert_eq!(
        f.f32s("test.arr.f64").unwrap(),
        Some(vec![1e-300f64 as f32, -0.0])
    );
    assert_eq!(f.u32s("test.arr.u32").unwrap(), Some(vec![0, 1, u32::MAX]));
    assert_eq!(f.u32("no.such.key").unwrap(), None);
    assert_eq!(f.get_or("no.such.key", 7u32).unwrap(), 7);
    assert_eq!(f.get_or("test.u16", 7u32).unwrap(), 60000);
    assert_eq!(f.require::<&str>("general.architecture").unwrap(), "test");

    let err = |r: wgpu_tp::Result<_>| r.map(|_: ()| ()).unwrap_err().to_string();
    let cases = [
        (
            err(f.get_as::<u8>("test.u32").map(drop)),
            "test.u32",
            "expected u8, found u32 4000000000, which u8 cannot hold",
        ),
        (
            err(f.u64("test.i64").map(drop)),
            "test.i64",
            "expected u64, found i64 -4611686018427387904",
        ),
        (
            err(f.f32("test.f64").map(drop)),
            "test.f64",
            "expected f32, found f64 -2.25e100",
        ),
        (
            err(f.u32("test.f32").map(drop)),
            "test.f32",
            "expected u32, found f32 1.5",
        ),
        (
            err(f.bool("test.u8").map(drop)),
            "test.u8",
            "expected bool, found u8 200",
        ),
        (
            err(f.string("test.u32").map(drop)),
            "test.u32",
            "expected string, found u32",
        ),
        (
            err(f.u32("test.arr.u32").map(drop)),
            "test.arr.u32",
            "expected u32, found array of u32",
        ),
        (
            err(f.strings("test.arr.u8").map(drop)),
            "test.arr.u8",
            "expected array of string, found array of u8",
        ),
        (
            err(f.u32s("test.arr.i8").map(drop)),
            "test.arr.i8",
            "element 0: found i8 -128, which u32 cannot hold",
        ),
        (
            err(f.f32s("test.arr.string").map(drop)),
            "test.arr.string",
            "expected array of f32, found array of string",
        ),
        (
            err(f.i32s("test.nested.i32").map(drop)),
            "test.nested.i32",
            "found array of array of i32",
        ),
        (
            err(f.require::<u32>("no.such.key").map(drop)),
            "no.such.key",
            "has no key",
        ),
    ];
    for (e, key, want) in cases {
        assert!(e.contains("format_v3.gguf"), "{e}");
        assert!(e.contains(&format!("{key:?}")), "{e}");
        assert!(e.contains(want), "{e} lacks {want:?}");
    }
}

#[test]
fn tensor_rows_are_contiguous_byte_ranges() {
    let f = GgufFile::open(fixture("format_v3.gguf")).unwrap();
    let q = f.tensor("q4_k.matrix").unwrap();
    assert_eq!(
        (q.dtype(), q.rows(), q.row_bytes()),
        (DType::Quant(QuantType::Q4K), 2, 144)
    );
    assert_eq!(
        f.tensor_rows("q4_k.matrix", 1..2).unwrap(),
        &pattern(5, 288)[144..]
    );
    let cube = f.tensor("f32.cube").unwrap();
    assert_eq!(
        (cube.shape(), cube.rows(), cube.row_bytes(), cube.elements()),
        (&[2, 3, 4][..], 6, 16, 24)
    );
    let rows: Vec<f32> = f
        .tensor_rows("f32.cube", 2..5)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(rows, floats(0.0, 24)[8..20]);
    assert_eq!(f.tensor_rows("f16.vector", 0..1).unwrap().len(), 14);
    assert!(f.tensor_rows("f32.cube", 3..3).unwrap().is_empty());
    for (e, name) in [
        (f.tensor_rows("f32.cube", 5..7).unwrap_err(), "f32.cube"),
        (f.tensor_bytes("missing").unwrap_err(), "missing"),
        (f.require_tensor("missing").unwrap_err(), "missing"),
    ] {
        let e = e.to_string();
        assert!(
            e.contains("format_v3.gguf") && e.contains(&format!("{name:?}")),
            "{e}"
        );
    }
    assert!(f.tensor("missing").is_none());
}

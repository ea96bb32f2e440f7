//! The GGUF writer: its output pinned byte for byte
//! (`written_by_wgpu_tp.gguf`; `make_format_fixtures.py --check` reads
//! that file with gguf-py and with llama.cpp's C reader), read back by the
//! crate's reader with identical metadata and bytes, laid out as
//! llama.cpp requires (offsets the running sum of aligned sizes), its
//! callbacks run once each in order at write time, written through a
//! temporary file, and its refusals of bad input.

use std::cell::RefCell;

use super::{fixture, floats, pattern, temp_dir};
use wgpu_tp::DType;
use wgpu_tp::half::f16;
use wgpu_tp::nn::gguf::{Array, GgufFile, GgufWriter, Value};
use wgpu_tp::quant::QuantType;

/// The metadata of `written_by_wgpu_tp.gguf` (the script's `WRITTEN_KV`).
fn written_metadata() -> Vec<(String, Value)> {
    let strings = |v: &[&str]| {
        Value::Array(Array::String(
            v.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ))
    };
    [
        ("general.architecture", Value::from("test")),
        ("general.alignment", Value::U32(64)),
        ("test.u8", Value::U8(200)),
        ("test.i8", Value::I8(-100)),
        ("test.u16", Value::U16(60000)),
        ("test.i16", Value::I16(-30000)),
        ("test.u32", Value::U32(4_000_000_000)),
        ("test.i32", Value::I32(-2_000_000_000)),
        ("test.u64", Value::U64((1 << 63) + 5)),
        ("test.i64", Value::I64(-(1 << 62))),
        ("test.f32", Value::F32(1.5)),
        ("test.f64", Value::F64(-2.25e100)),
        ("test.bool", Value::Bool(false)),
        ("test.string", Value::from("héllo ✓")),
        ("test.arr.u8", Value::from(vec![1u8, 255])),
        ("test.arr.i8", Value::from(vec![-128i8, 127])),
        ("test.arr.u16", Value::from(vec![65535u16])),
        ("test.arr.i16", Value::from(vec![-32768i16])),
        ("test.arr.u32", Value::from(vec![7u32, 8, 9])),
        ("test.arr.i32", Value::from(vec![-1i32, 1])),
        ("test.arr.u64", Value::from(vec![u64::MAX])),
        ("test.arr.i64", Value::from(vec![i64::MIN])),
        ("test.arr.f32", Value::from(vec![0.5f32, -0.25])),
        ("test.arr.f64", Value::from(vec![1e-300f64])),
        ("test.arr.bool", Value::from(vec![true, false])),
        ("test.arr.string", strings(&["a", "", "✓"])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The tensors of `written_by_wgpu_tp.gguf` (the script's `written_tensors`).
fn written_tensors() -> Vec<(&'static str, Vec<usize>, DType, Vec<u8>)> {
    let f32s: Vec<u8> = floats(1.0, 6)
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let f16s: Vec<u8> = floats(-2.0, 5)
        .iter()
        .flat_map(|&x| f16::from_f32(x).to_le_bytes())
        .collect();
    vec![
        ("f32.matrix", vec![2, 3], DType::F32, f32s),
        ("f16.vector", vec![5], DType::F16, f16s),
        ("bf16.cube", vec![2, 2, 2], DType::BF16, pattern(1, 16)),
        (
            "q8_0.matrix",
            vec![3, 64],
            DType::Quant(QuantType::Q8_0),
            pattern(2, 3 * 2 * 34),
        ),
        (
            "q4_k.matrix",
            vec![1, 256],
            DType::Quant(QuantType::Q4K),
            pattern(3, 144),
        ),
        (
            "q6_k.matrix",
            vec![2, 256],
            DType::Quant(QuantType::Q6K),
            pattern(4, 2 * 210),
        ),
    ]
}

/// A writer holding the written fixture's content, its callbacks logging
/// their calls to `log`.
pub(super) fn written(log: &RefCell<Vec<String>>) -> GgufWriter<'_> {
    let mut w = GgufWriter::new();
    for (k, v) in written_metadata() {
        w.metadata(k, v).unwrap();
    }
    for (name, shape, dtype, bytes) in written_tensors() {
        w.tensor(name, &shape, dtype, move || {
            log.borrow_mut().push(name.to_string());
            Ok(bytes)
        })
        .unwrap();
    }
    w
}

#[test]
fn writer_output_is_pinned_and_read_by_gguf_py() {
    let log = RefCell::new(Vec::new());
    let w = written(&log);
    assert_eq!(w.alignment(), 64);
    assert!(log.borrow().is_empty(), "no callback runs before the write");
    let bytes = w.to_bytes().unwrap();
    let names: Vec<&str> = written_tensors().iter().map(|t| t.0).collect();
    assert_eq!(*log.borrow(), names, "callbacks run once each, in order");

    let pinned = fixture("written_by_wgpu_tp.gguf");
    if std::env::var_os("WGPU_TP_WRITE_FIXTURES").is_some() {
        std::fs::write(&pinned, &bytes).unwrap();
    }
    // gguf-py reads the pinned file as written: `make_format_fixtures.py --check`.
    assert!(
        std::fs::read(&pinned).unwrap() == bytes,
        "the writer's bytes changed: rewrite {} with WGPU_TP_WRITE_FIXTURES=1 and run the script's --check",
        pinned.display()
    );

    let f = GgufFile::from_bytes("written", bytes.clone()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.metadata(), written_metadata());
    // llama.cpp's layout: offsets are the running sum of 64-aligned sizes,
    // and the file ends after the last tensor's padding.
    let mut offset = f.data_start();
    assert_eq!(offset % 64, 0);
    for (t, (name, shape, dtype, data)) in f.tensors().iter().zip(written_tensors()) {
        assert_eq!((t.name(), t.shape(), t.dtype()), (name, &shape[..], dtype));
        assert_eq!(t.byte_range().start, offset, "{name}");
        assert_eq!(f.tensor_bytes(name).unwrap(), data);
        offset += data.len().next_multiple_of(64);
    }
    assert_eq!(offset, bytes.len());
}

#[test]
fn writer_round_trips_every_kind_at_the_default_alignment() {
    let mut meta = written_metadata();
    meta.remove(1); // general.alignment: the default, 32
    meta.push(("test.empty".into(), Value::from(Vec::<u32>::new())));
    meta.push((
        "test.empty_strings".into(),
        Value::Array(Array::String(vec![])),
    ));
    meta.push(("test.raw".into(), Value::String(vec![0xff, 0, 1])));
    let mut w = GgufWriter::new();
    for (k, v) in meta.clone() {
        w.metadata(k, v).unwrap();
    }
    for (name, shape, dtype, bytes) in written_tensors() {
        w.tensor(name, &shape, dtype, move || Ok(bytes)).unwrap();
    }
    assert_eq!(w.alignment(), 32);
    let dir = temp_dir("roundtrip");
    let path = dir.join("model.gguf");
    w.write(&path).unwrap();
    assert!(!dir.join("model.gguf.partial").exists());
    let f = GgufFile::open(&path).unwrap();
    assert_eq!((f.alignment(), f.metadata()), (32, &meta[..]));
    let mut offset = f.data_start();
    for (name, _, _, data) in written_tensors() {
        let t = f.tensor(name).unwrap();
        assert_eq!(
            (t.byte_range().start, f.tensor_bytes(name).unwrap()),
            (offset, &data[..])
        );
        offset += data.len().next_multiple_of(32);
    }
    assert_eq!(offset as u64, std::fs::metadata(&path).unwrap().len());
    // A file without tensors is a header and metadata alone.
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", "none").unwrap();
    let f = GgufFile::from_bytes("empty", w.to_bytes().unwrap()).unwrap();
    assert!(f.tensors().is_empty());
    assert_eq!(f.string("general.architecture").unwrap(), Some("none"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn writer_refuses_bad_input() {
    let q8 = DType::Quant(QuantType::Q8_0);
    let mut w = GgufWriter::new();
    w.metadata("a", 1u32).unwrap();
    w.tensor("t", &[2, 32], q8, || Ok(vec![0; 68])).unwrap();
    let nested = Value::Array(Array::Array(vec![Array::U8(vec![1])]));
    let errors = [
        (w.metadata("a", 2u32).map(drop), "key \"a\" is already set"),
        (w.metadata("", 2u32).map(drop), "empty"),
        (w.metadata("n", nested).map(drop), "arrays of arrays"),
        (
            w.metadata("general.alignment", 48u32).map(drop),
            "power of two",
        ),
        (
            w.metadata("general.alignment", 64u64).map(drop),
            "u32 power of two",
        ),
        (
            w.tensor("t", &[32], q8, || Ok(vec![])).map(drop),
            "\"t\": is already added",
        ),
        (
            w.tensor("r", &[2, 33], q8, || Ok(vec![])).map(drop),
            "not a multiple of Q8_0's block of 32",
        ),
        (
            w.tensor("z", &[0, 4], DType::F32, || Ok(vec![])).map(drop),
            "none 0",
        ),
        (
            w.tensor("d", &[1, 1, 1, 1, 1], DType::F32, || Ok(vec![]))
                .map(drop),
            "1 to 4",
        ),
        (
            w.tensor("s", &[], DType::F32, || Ok(vec![])).map(drop),
            "1 to 4",
        ),
        (
            w.tensor("i", &[4], DType::I32, || Ok(vec![])).map(drop),
            "i32 tensors",
        ),
        (
            w.tensor("x".repeat(64), &[4], DType::F32, || Ok(vec![]))
                .map(drop),
            "1 to 63 bytes",
        ),
        (
            w.tensor("", &[4], DType::F32, || Ok(vec![])).map(drop),
            "1 to 63 bytes",
        ),
        (
            w.tensor("o", &[usize::MAX, 2], DType::F32, || Ok(vec![]))
                .map(drop),
            "more bytes",
        ),
    ];
    for (r, want) in errors {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(want), "{e} lacks {want:?}");
    }
    // The refusals changed nothing: the file holds what was accepted.
    let f = GgufFile::from_bytes("w", w.to_bytes().unwrap()).unwrap();
    assert_eq!((f.metadata().len(), f.tensors().len()), (1, 1));
}

#[test]
fn a_failed_write_leaves_no_file() {
    let dir = temp_dir("failed");
    let path = dir.join("model.gguf");
    let short = |w: &mut GgufWriter| {
        w.tensor("ok", &[4], DType::F32, || Ok(vec![0; 16]))
            .unwrap();
        w.tensor("short", &[2, 3], DType::F16, || Ok(vec![0; 11]))
            .unwrap();
    };
    let mut w = GgufWriter::new();
    short(&mut w);
    let e = w.write(&path).unwrap_err().to_string();
    assert!(
        e.contains("\"short\"") && e.contains("gave 11 bytes") && e.contains("takes 12"),
        "{e}"
    );
    let mut w = GgufWriter::new();
    w.tensor("fails", &[4], DType::F32, || {
        Err(wgpu_tp::Error::Checkpoint("no data".into()))
    })
    .unwrap();
    assert!(w.write(&path).is_err());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no file, no .partial"
    );
    let mut w = GgufWriter::new();
    short(&mut w);
    assert!(w.to_bytes().is_err());
    std::fs::remove_dir_all(dir).unwrap();
}

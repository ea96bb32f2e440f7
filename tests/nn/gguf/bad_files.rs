//! Files no writer should make: truncated at every byte, one byte
//! corrupted anywhere, and hand-built ones breaking each rule the reader
//! checks. Each is an error (never a panic, a hang or a huge allocation)
//! naming the file and the key or tensor concerned.

use super::fixture;
use super::writer::written;
use std::cell::RefCell;
use wgpu_tp::nn::gguf::GgufFile;

/// Little-endian GGUF pieces, assembled by hand.
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw(b"GGUF".to_vec()).u32(version).u64(n_tensors).u64(n_kv)
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A `u32` (type 4) metadata entry.
    fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info: name, `ne`, ggml type id, offset.
    fn info(self, name: &str, ne: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(ne.len() as u32);
        for &d in ne {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Zeros to the next multiple of `align`, then `n` data bytes.
    fn data(mut self, align: usize, n: usize) -> Raw {
        let len = self.0.len().next_multiple_of(align) + n;
        self.0.resize(len, 0);
        self
    }
}

/// `raw` is refused with a message naming the file and holding each of `wants`.
fn fails(raw: Raw, wants: &[&str]) {
    let e = GgufFile::from_bytes("bad.gguf", raw.0)
        .expect_err(&format!("{wants:?} accepted"))
        .to_string();
    assert!(e.contains("bad.gguf: "), "{e}");
    for want in wants {
        assert!(e.contains(want), "{e}\nlacks {want:?}");
    }
}

/// A one-tensor file (F32 `[4]`) with one `u32` key: the valid base.
fn one_tensor(ne: &[u64], ty: u32, offset: u64) -> Raw {
    Raw::header(3, 1, 1)
        .kv_u32("k", 1)
        .info("t", ne, ty, offset)
}

#[test]
fn the_hand_built_base_is_valid() {
    let f = GgufFile::from_bytes("ok", one_tensor(&[4], 0, 0).data(32, 16).0).unwrap();
    assert_eq!(
        (f.u32("k").unwrap(), f.tensor("t").unwrap().shape()),
        (Some(1), &[4][..])
    );
}

#[test]
fn header_errors() {
    fails(Raw(b"GGML".to_vec()).u32(3), &["not a GGUF file"]);
    fails(Raw(b"GG".to_vec()), &["truncated", "magic"]);
    let dir = super::temp_dir("empty");
    std::fs::write(dir.join("empty.gguf"), b"").unwrap();
    let e = GgufFile::open(dir.join("empty.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("empty.gguf: truncated: the magic"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
    fails(Raw::header(1, 0, 0), &["version 1 is not supported"]);
    fails(Raw::header(0x0300_0000, 0, 0), &["big-endian"]);
    fails(Raw::header(4, 0, 0), &["unknown GGUF version 4"]);
    fails(Raw::header(0, 0, 0), &["unknown GGUF version 0"]);
    fails(
        Raw::header(3, 0, u64::MAX),
        &["18446744073709551615 metadata entries"],
    );
    fails(Raw::header(3, 1 << 40, 0), &["1099511627776 tensor infos"]);
    fails(
        Raw::header(3, u64::MAX, u64::MAX),
        &["corrupt or truncated"],
    );
    // Counts that fit the bytes left, but the entries are not there.
    fails(
        Raw::header(3, 0, 2).kv_u32("k", 1).bytes(&[0; 13]),
        &["metadata key #1 is empty"],
    );
}

#[test]
fn metadata_errors() {
    let kv = || Raw::header(3, 0, 1);
    fails(
        kv().u64(u64::MAX).bytes(&[0; 16]),
        &["metadata key #0 has length 18446744073709551615"],
    );
    fails(
        kv().u64(2).bytes(&[0xff, 0xfe]).u32(4).u32(1),
        &["metadata key #0 is not UTF-8"],
    );
    fails(kv().str("").u32(4).u32(1), &["metadata key #0 is empty"]);
    fails(
        kv().str("k").u32(13).u32(0),
        &["key \"k\"", "13, which is no GGUF value type"],
    );
    fails(
        kv().str("k").u32(7).bytes(&[2]),
        &["key \"k\"", "bool holds 2"],
    );
    fails(
        kv().str("k").u32(8).u64(1000).bytes(b"ab"),
        &["key \"k\"", "length 1000"],
    );
    let huge = kv().str("k").u32(9).u32(10).u64(1 << 61).bytes(&[0; 16]);
    fails(
        huge,
        &["key \"k\"", "array of u64 count 2305843009213693952"],
    );
    let strings = kv()
        .str("k")
        .u32(9)
        .u32(8)
        .u64(u64::MAX / 2)
        .bytes(&[0; 16]);
    fails(strings, &["key \"k\"", "array of string count"]);
    let bools = kv().str("k").u32(9).u32(7).u64(3).bytes(&[1, 0, 5]);
    fails(
        bools,
        &["key \"k\"", "element 2 of an array of bool holds 5"],
    );
    let unknown = kv().str("k").u32(9).u32(99).u64(1).u32(0);
    fails(unknown, &["key \"k\"", "element type is 99"]);
    let mut deep = kv().str("k").u32(9);
    for _ in 0..10_000 {
        deep = deep.u32(9).u64(1);
    }
    fails(deep.u32(0).u64(0), &["key \"k\"", "nest deeper than 8"]);
    fails(
        Raw::header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2),
        &["key \"k\": appears twice"],
    );
}

#[test]
fn alignment_errors() {
    let align = |ty: u32, v: u32| Raw::header(3, 0, 1).str("general.alignment").u32(ty).u32(v);
    fails(
        align(5, 64),
        &["key \"general.alignment\"", "expected u32, found i32"],
    );
    fails(
        align(4, 48),
        &[
            "key \"general.alignment\"",
            "48, which is not a power of two",
        ],
    );
    fails(
        align(4, 0),
        &[
            "key \"general.alignment\"",
            "0, which is not a power of two",
        ],
    );
    // Offsets are checked against the file's own alignment.
    let raw = Raw::header(3, 1, 1)
        .kv_u32("general.alignment", 64)
        .info("t", &[4], 0, 32);
    fails(
        raw.data(64, 64),
        &[
            "tensor \"t\"",
            "offset 32 is not a multiple of the alignment 64",
        ],
    );
}

#[test]
fn tensor_info_errors() {
    let t = &["tensor \"t\""];
    let with = |extra: &'static str| [t[0], extra];
    fails(one_tensor(&[], 0, 0).data(32, 16), &with("0 dimensions"));
    fails(
        one_tensor(&[1; 5], 0, 0).data(32, 16),
        &with("5 dimensions; GGUF (ggml) allows 1 to 4"),
    );
    fails(
        one_tensor(&[4, 0], 0, 0).data(32, 16),
        &with("dimension ne[1] is 0"),
    );
    fails(
        one_tensor(&[32], 99, 0).data(32, 64),
        &with("ggml type 99 is unknown"),
    );
    fails(
        one_tensor(&[256], 16, 0).data(32, 66),
        &with(
            "IQ2_XXS (ggml type 16) is not supported: supported are F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K",
        ),
    );
    fails(
        one_tensor(&[4], 26, 0).data(32, 16),
        &with("I32 (ggml type 26) is not supported"),
    );
    fails(
        one_tensor(&[4], 28, 0).data(32, 32),
        &with("F64 (ggml type 28) is not supported"),
    );
    fails(
        one_tensor(&[32], 4, 0).data(32, 64),
        &with("ggml type 4 was removed"),
    );
    fails(
        one_tensor(&[33, 2], 8, 0).data(32, 200),
        &with("ne[0] = 33 elements, not a multiple of Q8_0's block of 32"),
    );
    fails(
        one_tensor(&[256], 12, 0).data(32, 18),
        &with("(144 bytes at offset 0 from the data start at 96)"),
    );
    fails(
        one_tensor(&[4], 0, 1 << 20).data(32, 16),
        &with("past the end of the file"),
    );
    fails(
        one_tensor(&[4], 0, u64::MAX - 31).data(32, 16),
        &with("past the end of the file"),
    );
    fails(
        one_tensor(&[4], 0, 0).data(32, 15),
        &with("(16 bytes at offset 0"),
    );
    fails(
        one_tensor(&[1 << 32, 1 << 32], 0, 0).data(32, 16),
        &with("more elements than ggml can count"),
    );
    fails(
        one_tensor(&[1 << 62, 2], 0, 0).data(32, 16),
        &with("more elements than ggml can count"),
    );
    fails(
        one_tensor(&[1 << 62], 0, 0).data(32, 16),
        &with("more bytes than fit in 64 bits"),
    );
    let name = Raw::header(3, 1, 0).u64(1 << 40).bytes(&[0; 40]);
    fails(name, &["the name of tensor #0 has length 1099511627776"]);
    let name = Raw::header(3, 1, 0)
        .u64(1)
        .bytes(&[0xff])
        .u32(1)
        .u64(4)
        .u32(0)
        .u64(0);
    fails(name.data(32, 16), &["the name of tensor #0 is not UTF-8"]);
    let two = |a: &str, b: &str, off: u64| {
        Raw::header(3, 2, 0)
            .info(a, &[4], 0, 0)
            .info(b, &[4], 0, off)
    };
    fails(
        two("t", "t", 32).data(32, 64),
        &["tensor \"t\" appears twice"],
    );
    fails(
        two("a", "b", 0).data(32, 32),
        &["tensor \"b\"'s data (bytes 96..112) overlaps tensor \"a\"'s"],
    );
    fails(
        two("a", "b", 16).data(32, 32),
        &[
            "tensor \"b\"",
            "offset 16 is not a multiple of the alignment 32",
        ],
    );
    // Not overlapping, aligned, out of order: accepted (llama.cpp wants the
    // running order; gguf-py and this reader do not).
    GgufFile::from_bytes("ok", two("a", "b", 32).data(32, 64).0).unwrap();
    let e = GgufFile::open(fixture("no_such_file.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no_such_file.gguf: cannot open it"), "{e}");
}

/// Every prefix of `bytes`: an error naming the file while a tensor's data
/// is cut, a valid file once only trailing padding is missing.
fn every_prefix(bytes: &[u8]) {
    let whole = GgufFile::from_bytes("whole", bytes.to_vec()).unwrap();
    let data_end = whole
        .tensors()
        .iter()
        .map(|t| t.byte_range().end)
        .max()
        .unwrap();
    for n in 0..=bytes.len() {
        match GgufFile::from_bytes("cut.gguf", bytes[..n].to_vec()) {
            Ok(f) => {
                assert!(
                    n >= data_end,
                    "a prefix of {n} bytes, cutting tensor data, was accepted"
                );
                assert_eq!(f.tensors(), whole.tensors());
            }
            Err(e) => {
                assert!(
                    n < data_end,
                    "a prefix of {n} bytes, all data there, was refused: {e}"
                );
                assert!(e.to_string().contains("cut.gguf: "), "{e}");
            }
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    every_prefix(&std::fs::read(fixture("format_v3.gguf")).unwrap());
    every_prefix(&std::fs::read(fixture("format_v2.gguf")).unwrap());
    every_prefix(&written(&RefCell::new(Vec::new())).to_bytes().unwrap());
}

#[test]
fn no_corrupted_byte_panics() {
    let bytes = std::fs::read(fixture("format_v3.gguf")).unwrap();
    let head = GgufFile::from_bytes("whole", bytes.clone())
        .unwrap()
        .data_start();
    for i in 0..head {
        for v in [0x00, 0x01, 0x7f, 0xff] {
            let mut b = bytes.clone();
            b[i] = v;
            if let Err(e) = GgufFile::from_bytes("flip.gguf", b) {
                assert!(e.to_string().contains("flip.gguf: "), "{e}");
            }
        }
    }
}

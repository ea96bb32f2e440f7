//! [`Fixture`]: what a reference tool (transformers, PEFT, llama.cpp's
//! converter) computed for a fixture directory: `reference.safetensors`
//! (tensors by key) and `reference.json` (its `seq`). One reader for every
//! module that checks against such a directory.

use std::path::Path;

use safetensors::SafeTensors;

/// A fixture's reference tensors and sequence length.
pub struct Fixture {
    bytes: Vec<u8>,
    /// Tokens per sequence of its `ids`.
    pub seq: usize,
}

impl Fixture {
    /// `dir/reference.safetensors` and `dir/reference.json`.
    pub fn read(dir: &Path) -> Fixture {
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
                .unwrap();
        Fixture {
            bytes: std::fs::read(dir.join("reference.safetensors")).unwrap(),
            seq: meta["seq"].as_u64().unwrap() as usize,
        }
    }

    /// Tensor `key` as `T`s (a missing key is a test failure naming it).
    pub fn get<T: bytemuck::Pod>(&self, key: &str) -> Vec<T> {
        let st = SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st
            .tensor(key)
            .unwrap_or_else(|_| panic!("the fixture has no {key}"));
        bytemuck::pod_collect_to_vec(t.data())
    }

    /// Tensor `key` as f64s.
    pub fn f64s(&self, key: &str) -> Vec<f64> {
        self.get(key)
    }

    /// Tensor `key` as i32s.
    pub fn i32s(&self, key: &str) -> Vec<i32> {
        self.get(key)
    }

    /// Whether the fixture has tensor `key`.
    pub fn has(&self, key: &str) -> bool {
        SafeTensors::deserialize(&self.bytes)
            .unwrap()
            .tensor(key)
            .is_ok()
    }
}

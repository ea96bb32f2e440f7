//! Bad Hugging Face directories (missing files, a config that disagrees
//! with the weights, truncated or corrupt files, another model type, an
//! untied head, ...): each is an `Error::Checkpoint` naming the file and
//! tensor, changes no model, and the mesh works afterwards.

use std::path::{Path, PathBuf};

use super::{Reference, fixture, scratch};
use crate::util::{masters, mesh, meshes};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use wgpu_tp::Error;
use wgpu_tp::models::CausalLm;

/// Copy fixture `variant` into a fresh scratch directory `name`.
fn copy_fixture(variant: &str, name: &str) -> PathBuf {
    let dir = scratch(name);
    for entry in std::fs::read_dir(fixture(variant)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir
}

/// Change `dir/config.json`.
fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(&mut json);
    std::fs::write(path, json.to_string()).unwrap();
}

/// A tensor of a safetensors file, owned.
type Owned = (String, Dtype, Vec<usize>, Vec<u8>);

/// Rewrite `dir/model.safetensors` through `f`.
fn edit_weights(dir: &Path, f: impl FnOnce(&mut Vec<Owned>)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<Owned> = st
        .tensors()
        .into_iter()
        .map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec()))
        .collect();
    f(&mut tensors);
    let views = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()));
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// Every kind of bad directory, with what its message must name.
fn bad_directories() -> Vec<(&'static str, PathBuf, Vec<&'static str>)> {
    let mut v = Vec::new();
    let mut case =
        |what: &'static str, variant: &str, setup: &dyn Fn(&Path), needles: Vec<&'static str>| {
            let dir = copy_fixture(variant, &format!("bad_{}", what.replace(' ', "_")));
            setup(&dir);
            v.push((what, dir, needles));
        };
    let rm = |file: &'static str| move |d: &Path| std::fs::remove_file(d.join(file)).unwrap();
    case(
        "missing config",
        "f32",
        &rm("config.json"),
        vec!["config.json"],
    );
    case(
        "missing weights",
        "f32",
        &rm("model.safetensors"),
        vec!["model.safetensors", "model.safetensors.index.json"],
    );
    case(
        "missing shard",
        "bf16_sharded",
        &rm("model-00002-of-00002.safetensors"),
        vec!["model-00002-of-00002.safetensors"],
    );
    let set = |key: &'static str, value: serde_json::Value| {
        move |d: &Path| edit_config(d, |j| j[key] = value.clone())
    };
    case(
        "other model type",
        "f32",
        &set("model_type", "bert".into()),
        vec!["config.json", "\"bert\""],
    );
    case(
        "erf gelu",
        "f32",
        &set("activation_function", "gelu".into()),
        vec!["config.json", "\"gelu\"", "tanh"],
    );
    case(
        "wider config",
        "f32",
        &set("n_embd", 30.into()),
        vec![
            "model.safetensors",
            "\"wte.weight\"",
            "[37, 24]",
            "[37, 30]",
        ],
    );
    case(
        "other n_inner",
        "f32",
        &set("n_inner", 64.into()),
        vec!["\"h.0.mlp.c_fc.weight\"", "[24, 96]", "[24, 64]"],
    );
    case(
        "more layers",
        "f16_prefixed",
        &set("n_layer", 3.into()),
        vec!["model.safetensors", "\"h.2.ln_1.weight\"", "missing"],
    );
    case(
        "fewer layers",
        "f32",
        &set("n_layer", 1.into()),
        vec!["model.safetensors", "\"h.1.", "matches no parameter"],
    );
    case(
        "truncated",
        "f32",
        &|d: &Path| {
            let path = d.join("model.safetensors");
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
        },
        vec!["model.safetensors", "truncated"],
    );
    case(
        "corrupt header",
        "f32",
        &|d: &Path| {
            let path = d.join("model.safetensors");
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[8..40].fill(b'#');
            std::fs::write(&path, bytes).unwrap();
        },
        vec!["model.safetensors", "not a valid safetensors file"],
    );
    case(
        "missing tensor",
        "f32",
        &|d: &Path| edit_weights(d, |t| t.retain(|(n, ..)| n != "h.1.ln_2.bias")),
        vec!["model.safetensors", "\"h.1.ln_2.bias\"", "missing"],
    );
    case(
        "integer tensor",
        "f32",
        &|d: &Path| {
            edit_weights(d, |t| {
                let ln = t.iter_mut().find(|(n, ..)| n == "ln_f.bias").unwrap();
                ln.1 = Dtype::I32;
            })
        },
        vec!["model.safetensors", "\"ln_f.bias\"", "I32"],
    );
    case(
        "untied head",
        "f32",
        &|d: &Path| {
            edit_weights(d, |t| {
                let wte = t.iter().find(|(n, ..)| n == "wte.weight").unwrap().clone();
                let mut head = ("lm_head.weight".to_string(), wte.1, wte.2, wte.3);
                // Element [1, 2] (row-major, width 24) changed.
                let at = 4 * (24 + 2);
                head.3[at..at + 4].copy_from_slice(&0.125f32.to_le_bytes());
                t.push(head);
            })
        },
        vec![
            "model.safetensors",
            "\"lm_head.weight\"",
            "[1, 2]",
            "untied",
        ],
    );
    v
}

#[test]
fn bad_directories_are_clear_errors_and_change_nothing() {
    let reference = Reference::read();
    let cases = bad_directories();
    for (transport, m) in meshes(2) {
        let mut good = CausalLm::from_pretrained(&m, fixture("f32")).unwrap();
        let before = masters(&good);
        for (what, dir, needles) in &cases {
            let err = CausalLm::from_pretrained(&m, dir).unwrap_err();
            assert!(matches!(err, Error::Checkpoint(_)), "{what}: {err:?}");
            let msg = err.to_string();
            for n in needles {
                assert!(
                    msg.contains(n),
                    "{what} ({transport}): {msg:?} does not name {n}"
                );
            }
            assert!(
                good.load_pretrained(dir).is_err(),
                "{what}: load_pretrained accepted it"
            );
            assert_eq!(
                masters(&good),
                before,
                "{what}: a refused load changed the model"
            );
        }
        // The mesh and the model still work after every error.
        reference.check(&format!("after the errors, {transport}"), &mut good, "f32");
        let mut again = CausalLm::from_pretrained(&m, fixture("f32")).unwrap();
        reference.check(
            &format!("loaded after the errors, {transport}"),
            &mut again,
            "f32",
        );
    }
    let err = CausalLm::from_pretrained(&mesh(1), fixture("no_such_model")).unwrap_err();
    assert!(err.to_string().contains("no_such_model"), "{err}");
}

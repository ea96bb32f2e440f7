//! safetensors checkpoints: the file holds the master tensors by name; one
//! saved on P = 4 loads on P = 3 and P = 1 (from bytes and from a file); F16 and BF16
//! files hold the masters rounded to f16 / bf16 and load widened; bad files are
//! `Error::Checkpoint` and leave the model unchanged.

use crate::util::{Rng, masters, mesh, round_bf16, token_batch};
use safetensors::{Dtype, tensor::TensorView};
use wgpu_tp::Error;
use wgpu_tp::nn::{
    MlpLanguageModel, MlpLmConfig, Params, Sgd, from_safetensors_bytes, load_safetensors,
    save_safetensors, to_safetensors_bytes, to_safetensors_bytes_as,
};
use wgpu_tp::{DType, half::f16};

const LM: MlpLmConfig = MlpLmConfig {
    vocab: 50,
    hidden: 12,
    ffn: 20,
};

const NAMES: &[&str] = &[
    "embed.weight",
    "fc1.weight",
    "fc1.bias",
    "fc2.weight",
    "fc2.bias",
    "head.weight",
];

/// A P = 4 model whose biases are non-zero too (one SGD step on random data).
fn trained_p4(rng: &mut Rng) -> MlpLanguageModel {
    let m = mesh(4);
    let mut model = MlpLanguageModel::new(&m, LM, rng.next_u64()).unwrap();
    let (ids, tg) = token_batch(rng, LM.vocab, 9);
    model.loss(&ids, &tg).unwrap().backward().unwrap();
    Sgd::new(1.0).step(&mut model).unwrap();
    model.zero_grad();
    model
}

#[test]
fn checkpoint_saved_on_p4_loads_on_p3_and_p1() {
    let mut rng = Rng::fresh("ckpt_reshard");
    let src = trained_p4(&mut rng);
    let want = masters(&src);
    let names: Vec<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, NAMES);
    assert!(
        want.iter().all(|(_, v)| v.iter().any(|&x| x != 0.0)),
        "every parameter moved"
    );
    let bytes = to_safetensors_bytes(&src).unwrap();
    // The file holds the master tensors under those names, F32, logical shapes.
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for ((name, p), (_, v)) in src.named_parameters().iter().zip(&want) {
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::F32);
        assert_eq!(t.shape(), p.shape());
        assert_eq!(bytemuck::pod_collect_to_vec::<u8, f32>(t.data()), *v);
    }
    for &p in &[3, 1] {
        let mut dst = MlpLanguageModel::new(&mesh(p), LM, 12345).unwrap();
        from_safetensors_bytes(&mut dst, &bytes).unwrap();
        assert_eq!(masters(&dst), want, "bytes loaded onto P={p}");
    }
    // Through a file as well.
    let path = std::env::temp_dir().join(format!(
        "wgpu-tp-ckpt-{}-{}.safetensors",
        std::process::id(),
        rng.next_u64()
    ));
    save_safetensors(&src, &path).unwrap();
    let mut dst = MlpLanguageModel::new(&mesh(3), LM, 777).unwrap();
    let loaded = load_safetensors(&mut dst, &path);
    let _ = std::fs::remove_file(&path);
    loaded.unwrap();
    assert_eq!(masters(&dst), want, "file loaded onto P=3");
    assert!(matches!(
        load_safetensors(&mut dst, std::env::temp_dir().join("wgpu-tp-no-such-file")),
        Err(Error::Io(_))
    ));
}

#[test]
fn f16_checkpoint_saved_on_p4_loads_rounded_on_p3() {
    let mut rng = Rng::fresh("ckpt_f16");
    let src = trained_p4(&mut rng);
    let f32_bytes = to_safetensors_bytes(&src).unwrap();
    let bytes = to_safetensors_bytes_as(&src, DType::F16).unwrap();
    // Each master rounded to nearest f16 on the host; the header aside, half the size.
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let rounded: Vec<(String, Vec<f32>)> = masters(&src)
        .into_iter()
        .map(|(n, v)| (n, v.iter().map(|&x| f16::from_f32(x).to_f32()).collect()))
        .collect();
    for (name, v) in &rounded {
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::F16, "{name}");
        let h: Vec<f16> = bytemuck::pod_collect_to_vec(t.data());
        let widened: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        assert_eq!(&widened, v, "{name}");
    }
    assert!(
        bytes.len() < f32_bytes.len() * 6 / 10,
        "F16 file is about half"
    );
    // Loading widens exactly, onto another world size; the model trains on.
    let mut dst = MlpLanguageModel::new(&mesh(3), LM, 4321).unwrap();
    from_safetensors_bytes(&mut dst, &bytes).unwrap();
    assert_eq!(masters(&dst), rounded);
    assert!(matches!(
        to_safetensors_bytes_as(&src, DType::I32),
        Err(Error::Checkpoint(_))
    ));
}

/// BF16 files round trip like F16 ones: rounded on the host, widened
/// exactly on another world size.
#[test]
fn bf16_checkpoint_saved_on_p4_loads_rounded_on_p2() {
    let mut rng = Rng::fresh("ckpt_bf16");
    let src = trained_p4(&mut rng);
    let bytes = to_safetensors_bytes_as(&src, DType::BF16).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let rounded: Vec<(String, Vec<f32>)> = masters(&src)
        .into_iter()
        .map(|(n, v)| (n, round_bf16(&v)))
        .collect();
    for (name, _) in &rounded {
        assert_eq!(st.tensor(name).unwrap().dtype(), Dtype::BF16, "{name}");
    }
    let mut dst = MlpLanguageModel::new(&mesh(2), LM, 4321).unwrap();
    from_safetensors_bytes(&mut dst, &bytes).unwrap();
    assert_eq!(masters(&dst), rounded);
}

/// Serialise `(name, dtype, shape, bytes)` with the safetensors crate directly.
fn write(tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

#[test]
fn bad_checkpoints_are_errors_and_leave_the_model_unchanged_p3() {
    let mut rng = Rng::fresh("ckpt_bad");
    let src = trained_p4(&mut rng);
    let good: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = src
        .named_parameters()
        .into_iter()
        .map(|(n, p)| {
            let v = p.master().unwrap();
            (
                n,
                Dtype::F32,
                p.shape().to_vec(),
                bytemuck::cast_slice(&v).to_vec(),
            )
        })
        .collect();
    let mut dst = MlpLanguageModel::new(&mesh(3), LM, 99).unwrap();
    let before = masters(&dst);
    // Sanity: the good file loads (on a scratch model).
    let mut scratch = MlpLanguageModel::new(&mesh(3), LM, 98).unwrap();
    from_safetensors_bytes(&mut scratch, &write(&good)).unwrap();

    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    // Missing: drop the last tensor (after others that would load fine).
    cases.push(("missing head.weight".into(), write(&good[..5])));
    // Wrong shape: fc2.weight transposed.
    let mut t = good.clone();
    t[3].2 = vec![t[3].2[1], t[3].2[0]];
    cases.push(("wrong shape".into(), write(&t)));
    // Wrong dtypes: fc1.bias as F64 (same element count), head.weight as I16.
    let mut t = good.clone();
    let b: Vec<f64> = bytemuck::pod_collect_to_vec::<u8, f32>(&t[2].3)
        .iter()
        .map(|&v| v as f64)
        .collect();
    t[2].1 = Dtype::F64;
    t[2].3 = bytemuck::cast_slice(&b).to_vec();
    cases.push(("F64 tensor".into(), write(&t)));
    let mut t = good.clone();
    let n = t[5].3.len() / 4;
    t[5].1 = Dtype::I16;
    t[5].3 = vec![0u8; n * 2];
    cases.push(("I16 tensor".into(), write(&t)));
    // An extra tensor.
    let mut t = good.clone();
    t.push(("fc3.weight".into(), Dtype::F32, vec![2], vec![0u8; 8]));
    cases.push(("extra tensor".into(), write(&t)));
    // Not a safetensors file at all.
    cases.push(("garbage".into(), b"not a checkpoint".to_vec()));

    for (what, bytes) in cases {
        match from_safetensors_bytes(&mut dst, &bytes) {
            Err(Error::Checkpoint(msg)) => eprintln!("{what}: {msg}"),
            other => panic!("{what}: expected Error::Checkpoint, got {other:?}"),
        }
        assert_eq!(masters(&dst), before, "{what}: the model changed");
    }
}

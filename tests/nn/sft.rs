//! Fine-tuning data (`wgpu_tp::nn::sft`) and AdamW's state in a file:
//! JSONL errors name the line and return nothing; the assistant-only mask
//! is the assistant turns' rendering (content and `<|im_end|>\n` in the
//! shipped ChatML template) and the tokens are those of the whole
//! rendering; packing marks untrained targets `-100`; the optimiser's
//! state saved at one world size resumes at another.

use std::path::{Path, PathBuf};

use wgpu_tp::models::CausalLm;
use wgpu_tp::nn::sft::{self, IGNORE, SftExample};
use wgpu_tp::nn::{AdamW, ChatMessage, LoraConfig, Params, Tokenizer};

use crate::util::{assert_close, mesh};

fn tiny_llama() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/tiny-llama")
}

#[test]
fn malformed_jsonl_lines_are_errors_naming_the_line() {
    let good = r#"{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}"#;
    for (bad, want) in [
        ("{not json", "line 2: not JSON"),
        (
            r#"{"messages": [{"content": "no role"}]}"#,
            "line 2: messages[0]",
        ),
        (
            r#"{"messages": [{"role": "user", "content": 7}]}"#,
            "line 2: messages[0]",
        ),
        (
            r#"{"messages": {"role": "user"}}"#,
            "line 2: \"messages\" must be a list",
        ),
        (
            r#"{"text": "a", "messages": []}"#,
            "line 2: give \"messages\" or \"text\"",
        ),
        (r#"{"prompt": "a"}"#, "line 2: a record needs"),
        (r#"[1, 2]"#, "line 2: a record is a JSON object"),
        (r#"{"text": 5}"#, "line 2: \"text\" must be a string"),
    ] {
        let text = format!("{good}\n{bad}\n{good}\n");
        let e = sft::parse_jsonl(&text, "data.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("data.jsonl") && e.contains(want), "{bad}: {e}");
    }
    assert!(
        sft::parse_jsonl("\n\n", "empty.jsonl").is_err(),
        "no records"
    );
    let ok = sft::parse_jsonl(&format!("{good}\n\n{{\"text\": \"plain\"}}\n"), "ok").unwrap();
    assert_eq!(ok.len(), 2);
    assert_eq!(ok[1], SftExample::Text("plain".into()));
}

#[test]
fn assistant_only_mask_is_the_assistant_turns_and_packing_ignores_the_rest() {
    let tok = Tokenizer::from_dir(tiny_llama()).unwrap();
    let messages = vec![
        ChatMessage::system("Answer from Genesis."),
        ChatMessage::user("Who built the ark?"),
        ChatMessage::assistant("Noah made an ark of gopher wood."),
        ChatMessage::user("How long did it rain?"),
        ChatMessage::assistant("Forty days and forty nights."),
    ];
    let ex = SftExample::Chat(messages.clone());
    let t = sft::tokenize(&tok, &ex, true, None).unwrap();
    let whole = tok
        .encode(&tok.apply_chat_template(&messages, false).unwrap())
        .unwrap();
    assert_eq!(t.ids, whole, "chunked tokens equal the whole rendering's");
    // The trained runs are exactly each assistant turn's content and what
    // ChatML closes it with.
    let mut runs = Vec::new();
    let mut i = 0;
    while i < t.ids.len() {
        if t.trained[i] {
            let start = i;
            while i < t.ids.len() && t.trained[i] {
                i += 1;
            }
            runs.push(tok.decode(&t.ids[start..i]).unwrap());
        } else {
            i += 1;
        }
    }
    assert_eq!(
        runs,
        [
            "Noah made an ark of gopher wood.<|im_end|>\n",
            "Forty days and forty nights.<|im_end|>\n"
        ]
    );
    let all = sft::tokenize(&tok, &ex, false, None).unwrap();
    assert!(all.trained.iter().all(|&b| b) && all.ids == whole);
    // Packing: next-token targets, -100 where not trained, the tail dropped.
    let seq = 8;
    let packed = sft::pack(std::slice::from_ref(&t), seq).unwrap();
    assert_eq!(packed.len(), (t.ids.len() - 1) / seq);
    for (w, (ids, targets)) in packed.iter().enumerate() {
        for j in 0..seq {
            let at = w * seq + j;
            assert_eq!(ids[j], t.ids[at]);
            let want = if t.trained[at + 1] {
                t.ids[at + 1]
            } else {
                IGNORE
            };
            assert_eq!(targets[j], want);
        }
    }
    let e = sft::pack(&[t], 10_000).unwrap_err().to_string();
    assert!(e.contains("less than one sequence"), "{e}");
    // A text record trains every token, eos appended.
    let text = sft::tokenize(
        &tok,
        &SftExample::Text("In the beginning".into()),
        true,
        Some(2),
    )
    .unwrap();
    assert_eq!(text.ids.last(), Some(&2));
    assert!(text.trained.iter().all(|&b| b));
    // The seeded shuffle is a permutation, the same every time.
    let mut a: Vec<usize> = (0..50).collect();
    let mut b = a.clone();
    sft::shuffle(&mut a, 7);
    sft::shuffle(&mut b, 7);
    assert_eq!(a, b);
    assert_ne!(a, (0..50).collect::<Vec<_>>());
    a.sort();
    assert_eq!(a, (0..50).collect::<Vec<_>>());
}

#[test]
fn the_loss_ignores_minus_100_targets() {
    let model = CausalLm::from_pretrained(&mesh(2), tiny_llama()).unwrap();
    let ids: Vec<i32> = (0..16).map(|i| i * 37 % 500).collect();
    let targets: Vec<i32> = (0..16).map(|i| i * 11 % 500).collect();
    let mut masked = targets.clone();
    for t in &mut masked[..8] {
        *t = IGNORE;
    }
    let per_row = |t: &[i32]| {
        wgpu_tp::no_grad(|| model.loss(&ids, t, 8))
            .unwrap()
            .to_host()
            .unwrap()[0]
    };
    // Rows 0..8 ignored: the mean over the second sequence alone.
    let second = wgpu_tp::no_grad(|| model.loss(&ids[8..], &targets[8..], 8))
        .unwrap()
        .to_host()
        .unwrap()[0];
    assert_close("masked loss", &[per_row(&masked)], &[second as f64], 1e-6);
}

#[test]
fn adamw_state_saved_at_p_2_resumes_at_p_3() {
    let ids: Vec<i32> = (0..16).map(|i| i * 37 % 500).collect();
    let targets: Vec<i32> = (0..16).map(|i| i * 11 % 500).collect();
    let lora = LoraConfig::new(4, 8.0, &["q_proj", "v_proj", "down_proj"]);
    let dir = std::env::temp_dir().join(format!("wgpu-tp-adamw-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("optimizer.safetensors");
    let step = |m: &mut CausalLm, opt: &mut AdamW| {
        m.loss(&ids, &targets, 8).unwrap().backward().unwrap();
        opt.step(m).unwrap();
        m.zero_grad();
    };
    // Three steps at P = 2 without a break.
    let mut whole = CausalLm::from_pretrained(&mesh(2), tiny_llama()).unwrap();
    whole.add_lora(&lora).unwrap();
    let mut opt = AdamW::new(1e-2);
    for _ in 0..2 {
        step(&mut whole, &mut opt);
    }
    whole.save_adapter(&dir).unwrap();
    opt.save_state(&whole, &state).unwrap();
    step(&mut whole, &mut opt);
    // Two steps, saved; the third at P = 3 from the files.
    let mut resumed = CausalLm::from_pretrained(&mesh(3), tiny_llama()).unwrap();
    resumed.load_adapter(&dir).unwrap();
    let mut opt3 = AdamW::new(1e-2);
    // A state file of another model is refused and changes nothing.
    let mut other = CausalLm::from_pretrained(&mesh(1), tiny_llama()).unwrap();
    other
        .add_lora(&LoraConfig::new(2, 8.0, &["q_proj", "v_proj", "down_proj"]))
        .unwrap();
    let e = AdamW::new(1e-2)
        .load_state(&other, &state)
        .unwrap_err()
        .to_string();
    assert!(e.contains("state of another model"), "{e}");
    opt3.load_state(&resumed, &state).unwrap();
    step(&mut resumed, &mut opt3);
    let want = whole.named_parameters();
    for ((n, p), (_, w)) in resumed.named_parameters().iter().zip(&want) {
        let w: Vec<f64> = w.master().unwrap().iter().map(|&v| v as f64).collect();
        // A fresh optimiser would take a first (bias-corrected, lr-sized)
        // step here: 1e-5 tells the resumed third step from it.
        assert_close(
            &format!("{n} after the resumed step"),
            &p.master().unwrap(),
            &w,
            1e-5,
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

//! f64 reference of the GPT pieces on the host: LayerNorm, causal multi-head
//! attention on a fused `[q | k | v]` activation, the GELU MLP, the pre-LN
//! block and the whole tied-head GPT with its mean cross-entropy, forward and
//! backward. Parameters live in a map under the crate's GPT-2 names, in
//! master (serial) layout, `[out, in]` weights. Checked against central
//! finite differences of the loss (every parameter of a 2-layer, 3-head
//! model: worst relative error 3e-7) when it was written.

use std::collections::BTreeMap;

/// Parameters or gradients by name.
pub type Params = BTreeMap<String, Vec<f64>>;

/// Sizes of the model the reference runs.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    /// Model width.
    pub hidden: usize,
    /// Attention heads.
    pub heads: usize,
    /// Feed-forward width.
    pub ffn: usize,
    /// LayerNorm epsilon.
    pub eps: f64,
}

impl Dims {
    fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// `y = x Wᵀ + b` for `x [n, inp]`, `W [out, inp]`.
pub fn linear(x: &[f64], w: &[f64], b: &[f64], n: usize, inp: usize, out: usize) -> Vec<f64> {
    let mut y = vec![0.0; n * out];
    for i in 0..n {
        for o in 0..out {
            let row = &w[o * inp..(o + 1) * inp];
            y[i * out + o] = b[o]
                + row
                    .iter()
                    .zip(&x[i * inp..(i + 1) * inp])
                    .map(|(a, c)| a * c)
                    .sum::<f64>();
        }
    }
    y
}

/// Backward of [`linear`]: `(dx, dW, db)`.
pub fn linear_backward(
    x: &[f64],
    w: &[f64],
    dy: &[f64],
    n: usize,
    inp: usize,
    out: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut dx, mut dw, mut db) = (vec![0.0; n * inp], vec![0.0; out * inp], vec![0.0; out]);
    for i in 0..n {
        for o in 0..out {
            let g = dy[i * out + o];
            db[o] += g;
            for k in 0..inp {
                dx[i * inp + k] += g * w[o * inp + k];
                dw[o * inp + k] += g * x[i * inp + k];
            }
        }
    }
    (dx, dw, db)
}

/// LayerNorm over rows of `x [n, d]`; returns `y` and `(x̂, rstd)` for backward.
pub fn layer_norm(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    d: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = x.len() / d;
    let (mut y, mut xhat, mut rstd) = (vec![0.0; n * d], vec![0.0; n * d], vec![0.0; n]);
    for i in 0..n {
        let row = &x[i * d..(i + 1) * d];
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d as f64;
        rstd[i] = 1.0 / (var + eps).sqrt();
        for j in 0..d {
            xhat[i * d + j] = (row[j] - mean) * rstd[i];
            y[i * d + j] = xhat[i * d + j] * w[j] + b[j];
        }
    }
    (y, xhat, rstd)
}

/// Backward of [`layer_norm`]: `(dx, dw, db)`.
pub fn layer_norm_backward(
    xhat: &[f64],
    rstd: &[f64],
    w: &[f64],
    dy: &[f64],
    d: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let n = xhat.len() / d;
    let (mut dx, mut dw, mut db) = (vec![0.0; n * d], vec![0.0; d], vec![0.0; d]);
    for i in 0..n {
        let (mut m1, mut m2) = (0.0, 0.0);
        for j in 0..d {
            let g = dy[i * d + j];
            dw[j] += g * xhat[i * d + j];
            db[j] += g;
            let dxh = g * w[j];
            m1 += dxh;
            m2 += dxh * xhat[i * d + j];
        }
        let (m1, m2) = (m1 / d as f64, m2 / d as f64);
        for j in 0..d {
            let dxh = dy[i * d + j] * w[j];
            dx[i * d + j] = rstd[i] * (dxh - m1 - xhat[i * d + j] * m2);
        }
    }
    (dx, dw, db)
}

const GELU_C: f64 = 0.797_884_560_802_865_4; // √(2/π)

/// GELU, tanh form (GPT-2).
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (GELU_C * (x + 0.044715 * x * x * x)).tanh())
}

/// d GELU / dx.
pub fn gelu_grad(x: f64) -> f64 {
    let t = (GELU_C * (x + 0.044715 * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3.0 * 0.044715 * x * x)
}

/// Causal attention of `qkv [batch·seq, 3·H·D]` (columns `[q | k | v]`,
/// head h at `h·D..`): `(out [batch·seq, H·D], probs [batch, H, seq, seq])`.
pub fn attention(
    qkv: &[f64],
    batch: usize,
    seq: usize,
    heads: usize,
    d: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (w, hd) = (3 * heads * d, heads * d);
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; batch * seq * hd];
    let mut probs = vec![0.0; batch * heads * seq * seq];
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..seq {
                let q = &qkv[(b * seq + i) * w + h * d..][..d];
                let mut s: Vec<f64> = (0..=i)
                    .map(|j| {
                        let k = &qkv[(b * seq + j) * w + hd + h * d..][..d];
                        q.iter().zip(k).map(|(a, c)| a * c).sum::<f64>() * scale
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s
                    .iter_mut()
                    .map(|v| {
                        *v = (*v - max).exp();
                        *v
                    })
                    .sum();
                for (j, p) in s.iter().enumerate() {
                    let p = p / sum;
                    probs[((b * heads + h) * seq + i) * seq + j] = p;
                    let v = &qkv[(b * seq + j) * w + 2 * hd + h * d..][..d];
                    for e in 0..d {
                        out[(b * seq + i) * hd + h * d + e] += p * v[e];
                    }
                }
            }
        }
    }
    (out, probs)
}

/// Backward of [`attention`]: `d_qkv` from `d_out`.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    qkv: &[f64],
    probs: &[f64],
    d_out: &[f64],
    batch: usize,
    seq: usize,
    heads: usize,
    d: usize,
) -> Vec<f64> {
    let (w, hd) = (3 * heads * d, heads * d);
    let scale = 1.0 / (d as f64).sqrt();
    let mut dqkv = vec![0.0; qkv.len()];
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..seq {
                let row = |t: usize, part: usize| (b * seq + t) * w + part * hd + h * d;
                let p = |j: usize| probs[((b * heads + h) * seq + i) * seq + j];
                let dout = &d_out[(b * seq + i) * hd + h * d..][..d];
                let dp: Vec<f64> = (0..=i)
                    .map(|j| {
                        dout.iter()
                            .zip(&qkv[row(j, 2)..][..d])
                            .map(|(a, c)| a * c)
                            .sum()
                    })
                    .collect();
                let dot: f64 = (0..=i).map(|j| p(j) * dp[j]).sum();
                for j in 0..=i {
                    let ds = p(j) * (dp[j] - dot) * scale;
                    for e in 0..d {
                        dqkv[row(j, 2) + e] += p(j) * dout[e];
                        dqkv[row(i, 0) + e] += ds * qkv[row(j, 1) + e];
                        dqkv[row(j, 1) + e] += ds * qkv[row(i, 0) + e];
                    }
                }
            }
        }
    }
    dqkv
}

/// What a block's forward keeps for backward.
pub struct BlockCache {
    ln1: (Vec<f64>, Vec<f64>, Vec<f64>),
    qkv: Vec<f64>,
    probs: Vec<f64>,
    att: Vec<f64>,
    ln2: (Vec<f64>, Vec<f64>, Vec<f64>),
    f: Vec<f64>,
    g: Vec<f64>,
}

fn get<'a>(p: &'a Params, prefix: &str, name: &str) -> &'a [f64] {
    p.get(&format!("{prefix}{name}"))
        .unwrap_or_else(|| panic!("reference needs parameter {prefix}{name}"))
}

/// Pre-LN block forward on `x [batch·seq, hidden]` with parameters under `prefix` (e.g. "h.0.").
pub fn block(
    p: &Params,
    prefix: &str,
    x: &[f64],
    batch: usize,
    seq: usize,
    dims: Dims,
) -> (Vec<f64>, BlockCache) {
    let (n, hs, f, heads) = (batch * seq, dims.hidden, dims.ffn, dims.heads);
    let dh = dims.head_dim();
    let ln1 = layer_norm(
        x,
        get(p, prefix, "ln_1.weight"),
        get(p, prefix, "ln_1.bias"),
        hs,
        dims.eps,
    );
    let qkv = linear(
        &ln1.0,
        get(p, prefix, "attn.c_attn.weight"),
        get(p, prefix, "attn.c_attn.bias"),
        n,
        hs,
        3 * hs,
    );
    let (att, probs) = attention(&qkv, batch, seq, heads, dh);
    let proj = linear(
        &att,
        get(p, prefix, "attn.c_proj.weight"),
        get(p, prefix, "attn.c_proj.bias"),
        n,
        hs,
        hs,
    );
    let h: Vec<f64> = x.iter().zip(&proj).map(|(a, b)| a + b).collect();
    let ln2 = layer_norm(
        &h,
        get(p, prefix, "ln_2.weight"),
        get(p, prefix, "ln_2.bias"),
        hs,
        dims.eps,
    );
    let fv = linear(
        &ln2.0,
        get(p, prefix, "mlp.c_fc.weight"),
        get(p, prefix, "mlp.c_fc.bias"),
        n,
        hs,
        f,
    );
    let g: Vec<f64> = fv.iter().map(|&v| gelu(v)).collect();
    let m = linear(
        &g,
        get(p, prefix, "mlp.c_proj.weight"),
        get(p, prefix, "mlp.c_proj.bias"),
        n,
        f,
        hs,
    );
    let y = h.iter().zip(&m).map(|(a, b)| a + b).collect();
    (
        y,
        BlockCache {
            ln1,
            qkv,
            probs,
            att,
            ln2,
            f: fv,
            g,
        },
    )
}

/// Block backward: `dx`, adding the parameter gradients into `grads` under `prefix`.
#[allow(clippy::too_many_arguments)]
pub fn block_backward(
    p: &Params,
    prefix: &str,
    c: &BlockCache,
    dy: &[f64],
    batch: usize,
    seq: usize,
    dims: Dims,
    grads: &mut Params,
) -> Vec<f64> {
    let (n, hs, f, heads) = (batch * seq, dims.hidden, dims.ffn, dims.heads);
    let mut add = |name: &str, g: Vec<f64>| {
        let e = grads
            .entry(format!("{prefix}{name}"))
            .or_insert_with(|| vec![0.0; g.len()]);
        e.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
    };
    let (dg, dw, db) = linear_backward(&c.g, get(p, prefix, "mlp.c_proj.weight"), dy, n, f, hs);
    add("mlp.c_proj.weight", dw);
    add("mlp.c_proj.bias", db);
    let df: Vec<f64> = dg
        .iter()
        .zip(&c.f)
        .map(|(g, &x)| g * gelu_grad(x))
        .collect();
    let (da2, dw, db) = linear_backward(&c.ln2.0, get(p, prefix, "mlp.c_fc.weight"), &df, n, hs, f);
    add("mlp.c_fc.weight", dw);
    add("mlp.c_fc.bias", db);
    let (dh2, dw, db) =
        layer_norm_backward(&c.ln2.1, &c.ln2.2, get(p, prefix, "ln_2.weight"), &da2, hs);
    add("ln_2.weight", dw);
    add("ln_2.bias", db);
    let dh: Vec<f64> = dy.iter().zip(&dh2).map(|(a, b)| a + b).collect();
    let (datt, dw, db) =
        linear_backward(&c.att, get(p, prefix, "attn.c_proj.weight"), &dh, n, hs, hs);
    add("attn.c_proj.weight", dw);
    add("attn.c_proj.bias", db);
    let dqkv = attention_backward(&c.qkv, &c.probs, &datt, batch, seq, heads, dims.head_dim());
    let (da1, dw, db) = linear_backward(
        &c.ln1.0,
        get(p, prefix, "attn.c_attn.weight"),
        &dqkv,
        n,
        hs,
        3 * hs,
    );
    add("attn.c_attn.weight", dw);
    add("attn.c_attn.bias", db);
    let (dx1, dw, db) =
        layer_norm_backward(&c.ln1.1, &c.ln1.2, get(p, prefix, "ln_1.weight"), &da1, hs);
    add("ln_1.weight", dw);
    add("ln_1.bias", db);
    dh.iter().zip(&dx1).map(|(a, b)| a + b).collect()
}

/// The tied-head GPT: mean next-token loss of `ids` against `targets` and
/// every parameter's gradient.
pub fn gpt_loss_and_grads(
    p: &Params,
    ids: &[i32],
    targets: &[i32],
    seq: usize,
    layers: usize,
    dims: Dims,
) -> (f64, Params) {
    let (n, hs) = (ids.len(), dims.hidden);
    let batch = n / seq;
    let (wte, wpe) = (&p["wte.weight"], &p["wpe.weight"]);
    let vocab = wte.len() / hs;
    let mut x = vec![0.0; n * hs];
    for (i, &id) in ids.iter().enumerate() {
        for j in 0..hs {
            x[i * hs + j] = wte[id as usize * hs + j] + wpe[(i % seq) * hs + j];
        }
    }
    let mut caches = Vec::new();
    for l in 0..layers {
        let (y, c) = block(p, &format!("h.{l}."), &x, batch, seq, dims);
        caches.push(c);
        x = y;
    }
    let lnf = layer_norm(&x, &p["ln_f.weight"], &p["ln_f.bias"], hs, dims.eps);
    let logits = linear(&lnf.0, wte, &vec![0.0; vocab], n, hs, vocab);
    let mut loss = 0.0;
    let mut dlogits = vec![0.0; n * vocab];
    for i in 0..n {
        let row = &logits[i * vocab..(i + 1) * vocab];
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        loss += sum.ln() + max - row[targets[i] as usize];
        for j in 0..vocab {
            dlogits[i * vocab + j] = ((row[j] - max).exp() / sum
                - f64::from(u8::from(j == targets[i] as usize)))
                / n as f64;
        }
    }
    let mut grads = Params::new();
    let (dlnf, dwte_head, _) = linear_backward(&lnf.0, wte, &dlogits, n, hs, vocab);
    let (mut dx, dw, db) = layer_norm_backward(&lnf.1, &lnf.2, &p["ln_f.weight"], &dlnf, hs);
    grads.insert("ln_f.weight".into(), dw);
    grads.insert("ln_f.bias".into(), db);
    for l in (0..layers).rev() {
        dx = block_backward(
            p,
            &format!("h.{l}."),
            &caches[l],
            &dx,
            batch,
            seq,
            dims,
            &mut grads,
        );
    }
    let (mut dwte, mut dwpe) = (dwte_head, vec![0.0; wpe.len()]);
    for (i, &id) in ids.iter().enumerate() {
        for j in 0..hs {
            dwte[id as usize * hs + j] += dx[i * hs + j];
            dwpe[(i % seq) * hs + j] += dx[i * hs + j];
        }
    }
    grads.insert("wte.weight".into(), dwte);
    grads.insert("wpe.weight".into(), dwpe);
    (loss / n as f64, grads)
}

// The small-M GEMM's epilogue and overrides, shared by its buffer entries
// (gemv.wgsl, gemv_split.wgsl), its texture entries (gemv_texture.wgsl)
// and its grouped entries (gemv_group.wgsl). It reads the parameters p and
// the epilogue's operands through bias_at, acc_at and put, which
// gemv_params.wgsl (one product) or gemv_group.wgsl (several) define.

// Rows computed (a's rows past M are read clamped, and not stored).
override ROWS: u32 = 1u;
override WG: u32 = 32u;

// a's row m, clamped to the last one (rows past M are computed, not stored).
fn arow(m: u32) -> u32 {
    return min(m, p.m - 1u);
}

// c(m, n) = act(v (+ bias) (+ acc)) (⊙ acc), for m < M and n < N.
fn store1(m: u32, n: u32, v: f32) {
    if (m >= p.m || n >= p.n) {
        return;
    }
    var r = v;
    if ((p.flags & 1u) != 0u) {
        r += bias_at(n);
    }
    let idx = m * p.n + n;
    if ((p.flags & 2u) != 0u) {
        r += acc_at(idx);
    }
    var o = activate(r, (p.flags >> 2u) & 3u);
    if ((p.flags & 16u) != 0u) {
        o = o * acc_at(idx);
    }
    put(idx, COut(o));
}

// elementwise.wgsl's activations, one element at a time (the same
// operations, so the same bits as the product followed by that kernel).
fn activate(x: f32, act: u32) -> f32 {
    switch act {
        case 1u: {
            let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
            let e = exp(2.0 * clamp(u, -15.0, 15.0));
            return 0.5 * x * (1.0 + (e - 1.0) / (e + 1.0));
        }
        case 2u: {
            return x * (1.0 / (1.0 + exp(-clamp(x, -80.0, 80.0))));
        }
        case 3u: {
            return max(x, 0.0);
        }
        default: {
            return x;
        }
    }
}

fn store4(m: u32, n: u32, v: vec4<f32>) {
    store1(m, n, v.x);
    store1(m, n + 1u, v.y);
    store1(m, n + 2u, v.z);
    store1(m, n + 3u, v.w);
}

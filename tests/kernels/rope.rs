//! The rotary kernel (`kernels::rotary`, Hugging Face's `rotate_half`
//! layout) against f64 on ragged sizes: tables from `nn::RopeConfig` and
//! arbitrary ones, its inverse (the VJP) against the f64 inverse rotation
//! and as the forward's inverse, decoding steps (tables of positions
//! `past..past + n`) equal to the whole sequence's rows, and bad operands
//! as errors. `rotary_pair` (query and key in one dispatch) gives two calls'
//! bits.

use crate::util::{Rng, assert_close, mesh, rel_err};
use wgpu_tp::kernels;
use wgpu_tp::nn::RopeConfig;
use wgpu_tp::{DType, Error, LocalTensor, Rank};

/// f64 rotation of `x` `[rows, cols]` (heads of width `d`): row `r` by
/// table row `r mod seq` (`cos`, `sin` `[seq, d/2]`), `sign` −1 rotating back.
fn rotate(x: &[f32], cols: usize, (cos, sin): (&[f32], &[f32]), d: usize, sign: f64) -> Vec<f64> {
    let half = d / 2;
    let seq = cos.len() / half;
    let mut y = vec![0.0; x.len()];
    for (r, row) in x.chunks(cols.max(1)).enumerate() {
        let t = (r % seq) * half;
        for h in 0..cols / d {
            for i in 0..half {
                let (c, s) = (cos[t + i] as f64, sign * sin[t + i] as f64);
                let (x1, x2) = (row[h * d + i] as f64, row[h * d + half + i] as f64);
                y[r * cols + h * d + i] = x1 * c - x2 * s;
                y[r * cols + h * d + half + i] = x2 * c + x1 * s;
            }
        }
    }
    y
}

fn up(r: &Rank, shape: &[usize], v: &[f32]) -> LocalTensor {
    r.upload(shape, v).unwrap()
}

/// Forward and inverse of `x` `[b·seq, heads·d]` on `r` against f64.
fn check(
    r: &Rank,
    (b, seq, heads, d): (usize, usize, usize, usize),
    tables: (&[f32], &[f32]),
    rng: &mut Rng,
) {
    let what = format!("b={b} seq={seq} heads={heads} d={d}");
    let (rows, cols) = (b * seq, heads * d);
    let x = rng.vec(rows * cols);
    let (cos, sin) = tables;
    let (tc, ts) = (up(r, &[seq, d / 2], cos), up(r, &[seq, d / 2], sin));
    let tx = up(r, &[rows, cols], &x);
    let y = kernels::rotary(&tx, &tc, &ts, d, false).unwrap();
    assert_eq!(y.shape(), [rows, cols], "{what}");
    let got = y.to_vec().unwrap();
    assert_close(
        &format!("{what}: forward"),
        &got,
        &rotate(&x, cols, (cos, sin), d, 1.0),
        1e-5,
    );
    let back = kernels::rotary(&tx, &tc, &ts, d, true)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_close(
        &format!("{what}: inverse"),
        &back,
        &rotate(&x, cols, (cos, sin), d, -1.0),
        1e-5,
    );
}

#[test]
fn rotary_matches_f64_with_rope_config_tables_on_ragged_sizes() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("rope_kernel");
    // (batch, seq, heads, head_dim)
    for shape in [
        (1, 7, 3, 6),
        (2, 13, 1, 12),
        (3, 1, 5, 2),
        (2, 17, 2, 8),
        (1, 5, 0, 6),
    ] {
        let (cos, sin) = RopeConfig::new(10000.0, shape.3, 64).tables(0..shape.1);
        check(r, shape, (&cos, &sin), &mut rng);
    }
    // Arbitrary tables (not rotations): the kernel is the formula, whatever they hold.
    for shape in [(2, 7, 3, 6), (1, 13, 2, 4)] {
        let n = shape.1 * shape.3 / 2;
        let (cos, sin) = (rng.vec(n), rng.vec(n));
        check(r, shape, (&cos, &sin), &mut rng);
    }
}

/// With true rotation tables the inverse undoes the forward (to f32 rounding).
#[test]
fn rotary_inverse_undoes_the_forward() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("rope_inverse");
    let (b, seq, heads, d) = (2, 13, 3, 6);
    let (cos, sin) = RopeConfig::new(500.0, d, 64).tables(0..seq);
    let (tc, ts) = (up(r, &[seq, d / 2], &cos), up(r, &[seq, d / 2], &sin));
    let x = rng.vec(b * seq * heads * d);
    let tx = up(r, &[b * seq, heads * d], &x);
    let y = kernels::rotary(&tx, &tc, &ts, d, false).unwrap();
    let back = kernels::rotary(&y, &tc, &ts, d, true)
        .unwrap()
        .to_vec()
        .unwrap();
    let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let e = rel_err(&back, &x64);
    assert!(e <= 1e-6, "inverse(forward(x)) differs from x by {e:.3e}");
}

/// Decoding rotates each step's rows with the tables of its positions
/// `past..past + n` (`seq` = n): the same bits as the whole sequence's rows.
#[test]
fn rotary_of_decoding_steps_equals_the_whole_sequence_rows() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("rope_decode");
    let (heads, d, steps) = (3, 6, [4, 1, 2, 1]);
    let total: usize = steps.iter().sum();
    let cfg = RopeConfig::new(10000.0, d, 64);
    let cols = heads * d;
    let x = rng.vec(total * cols);
    let (cos, sin) = cfg.tables(0..total);
    let whole = kernels::rotary(
        &up(r, &[total, cols], &x),
        &up(r, &[total, d / 2], &cos),
        &up(r, &[total, d / 2], &sin),
        d,
        false,
    )
    .unwrap()
    .to_vec()
    .unwrap();
    let mut past = 0;
    for n in steps {
        let (c, s) = cfg.tables(past..past + n);
        assert_eq!(
            c,
            cos[past * d / 2..(past + n) * d / 2],
            "cos rows {past}.."
        );
        let y = kernels::rotary(
            &up(r, &[n, cols], &x[past * cols..(past + n) * cols]),
            &up(r, &[n, d / 2], &c),
            &up(r, &[n, d / 2], &s),
            d,
            false,
        )
        .unwrap()
        .to_vec()
        .unwrap();
        assert_eq!(
            y,
            whole[past * cols..(past + n) * cols],
            "positions {past}..{}",
            past + n
        );
        past += n;
    }
}

#[test]
fn rotary_bad_inputs_are_errors() {
    let m = mesh(2);
    let (r0, r1) = (&m.ranks()[0], &m.ranks()[1]);
    let (seq, d) = (3, 6);
    let x = up(r0, &[6, 12], &[0.5; 72]);
    let (cos, sin) = RopeConfig::new(10000.0, d, 64).tables(0..seq);
    let (tc, ts) = (up(r0, &[seq, 3], &cos), up(r0, &[seq, 3], &sin));
    let rot = |x: &LocalTensor, c: &LocalTensor, s: &LocalTensor, d: usize| {
        kernels::rotary(x, c, s, d, false)
    };
    assert!(rot(&x, &tc, &ts, d).is_ok());
    // head_dim odd, 0, or not dividing the columns.
    for bad in [0, 3, 5, 8] {
        assert!(rot(&x, &tc, &ts, bad).is_err(), "head_dim {bad}");
    }
    // Tables of the wrong width, mismatched, or 1-D.
    let wide = up(r0, &[seq, 4], &[0.5; 12]);
    assert!(matches!(
        rot(&x, &wide, &ts, d),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        rot(&x, &tc, &wide, d),
        Err(Error::ShapeMismatch { .. })
    ));
    let short = up(r0, &[2, 3], &[0.5; 6]);
    assert!(
        rot(&x, &tc, &short, d).is_err(),
        "sin with fewer rows than cos"
    );
    let flat = up(r0, &[9], &cos);
    assert!(rot(&x, &flat, &ts, d).is_err(), "1-D cos");
    // Rows that are not whole sequences of the tables, 1-D x.
    let x5 = up(r0, &[5, 12], &[0.5; 60]);
    assert!(
        rot(&x5, &tc, &ts, d).is_err(),
        "5 rows of 3-position tables"
    );
    let x1 = up(r0, &[72], &[0.5; 72]);
    assert!(matches!(
        rot(&x1, &tc, &ts, d),
        Err(Error::ShapeMismatch { .. })
    ));
    // dtype and rank.
    let xi = r0.upload_i32(&[6, 12], &[1; 72]).unwrap();
    assert!(matches!(
        rot(&xi, &tc, &ts, d),
        Err(Error::DTypeMismatch { .. })
    ));
    let c1 = up(r1, &[seq, 3], &cos);
    assert!(matches!(
        rot(&x, &c1, &ts, d),
        Err(Error::RankMismatch { .. })
    ));
    let ci = r0.zeros(&[seq, 3], DType::I32).unwrap();
    assert!(matches!(
        rot(&x, &ci, &ts, d),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(rot(&x, &tc, &ts, d).is_ok(), "usable after the errors");
}

#[test]
fn rotary_pair_gives_two_calls_bits_and_f64() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let mut rng = Rng::fresh("rotary_pair kernel");
    // (rows, seq, q heads, k heads, head_dim): decoding steps and prefills.
    for (rows, seq, hq, hk, d) in [
        (1, 1, 9, 3, 64),
        (3, 3, 3, 1, 6),
        (7, 7, 2, 2, 2),
        (26, 13, 5, 1, 12),
        (4, 2, 1, 0, 4),
    ] {
        let what = format!("rows={rows} seq={seq} hq={hq} hk={hk} d={d}");
        let (cos, sin) = (rng.vec(seq * d / 2), rng.vec(seq * d / 2));
        let (tc, ts) = (up(r, &[seq, d / 2], &cos), up(r, &[seq, d / 2], &sin));
        let (q, k) = (rng.vec(rows * hq * d), rng.vec(rows * hk * d));
        let (tq, tk) = (up(r, &[rows, hq * d], &q), up(r, &[rows, hk * d], &k));
        let (gq, gk) = kernels::rotary_pair(&tq, &tk, &tc, &ts, d).unwrap();
        let (gq, gk) = (gq.to_vec().unwrap(), gk.to_vec().unwrap());
        let one = |x: &LocalTensor| {
            kernels::rotary(x, &tc, &ts, d, false)
                .unwrap()
                .to_vec()
                .unwrap()
        };
        assert!(gq == one(&tq) && gk == one(&tk), "{what}: two calls' bits");
        assert_close(
            &format!("{what}: q"),
            &gq,
            &rotate(&q, hq * d, (&cos, &sin), d, 1.0),
            1e-5,
        );
        if hk > 0 {
            assert_close(
                &format!("{what}: k"),
                &gk,
                &rotate(&k, hk * d, (&cos, &sin), d, 1.0),
                1e-5,
            );
        }
    }
    // Bad operands: other rows, an odd head width.
    let t = up(r, &[2, 8], &[0.5; 16]);
    let (c, s) = (up(r, &[1, 2], &[1.0; 2]), up(r, &[1, 2], &[0.0; 2]));
    let e = kernels::rotary_pair(&t, &up(r, &[3, 4], &[0.5; 12]), &c, &s, 4).unwrap_err();
    assert!(e.to_string().contains("rows"), "{e}");
    let e = kernels::rotary_pair(&t, &t, &c, &s, 3).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

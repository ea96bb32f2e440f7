//! The counter-based random kernel (`kernels::random`): every shard of a
//! logical tensor holds exactly the host's draws for its logical indices
//! (f64 reference, `draw_host`), whatever the split (plain, sections of a
//! fused projection, row blocks), identical bits at every world size, and
//! the draws have their distribution's mean and spread.

use crate::util::{Rng, WORLD_SIZES, assert_close, limited_mesh, mesh};
use wgpu_tp::kernels::random::{Draw, Sections, draw_host, random};
use wgpu_tp::shard::{split_range_in_units, with_dim};

const DRAWS: &[Draw] = &[
    Draw::Constant(0.75),
    Draw::Normal {
        mean: 0.1,
        std: 0.5,
    },
    Draw::Uniform {
        low: -0.3,
        high: 0.7,
    },
    Draw::TruncNormal {
        mean: 0.0,
        std: 1.0,
        low: -0.5,
        high: 1.5,
    },
];

/// (norm-wise, element-wise absolute) tolerance of a draw against f64.
/// Uniform and constant draws are f32 arithmetic: the f32 bound. Normal
/// draws (Box-Muller) carry the driver's `cos` / `log` error times the
/// radius (≤ 6.7 for 32-bit uniforms); WGSL allows `cos` an absolute error
/// of 2⁻¹¹, and lavapipe's worst over 8 M draws was 5.2e-5 absolute next to
/// a zero of the normal value (7.8e-6 of `cos` times the radius). So 1e-4
/// norm-wise and 2e-4 absolute; a wrong index or section is off by the
/// draw's spread (≥ 0.5 here) and still fails both. (1e-5 failed in CI and
/// locally, once each in about 20 runs.)
fn tolerance(draw: Draw) -> (f64, f64) {
    match draw {
        Draw::Normal { .. } | Draw::TruncNormal { .. } => (1e-4, 2e-4),
        _ => (1e-5, 1e-5),
    }
}

/// The host's values of the logical tensor `shape`.
fn host(draw: Draw, key: u64, shape: &[usize]) -> Vec<f64> {
    let n: usize = shape.iter().product();
    (0..n).map(|g| draw_host(draw, key, g as u32)).collect()
}

/// The host's values of rank `r`'s part: along `dim`, `stride` sections of
/// `unit`-aligned ranges, each section split as `split_range_in_units`.
fn host_part(
    all: &[f64],
    shape: &[usize],
    (dim, stride, unit): (usize, usize, usize),
    (p, r): (usize, usize),
) -> (Vec<usize>, Vec<f64>, Sections) {
    let n = shape[dim];
    let block = n / stride;
    let range = split_range_in_units(block, p, r, unit);
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let mut part = Vec::new();
    for o in 0..outer {
        for s in 0..stride {
            for j in range.clone() {
                let at = (o * n + s * block + j) * inner;
                part.extend_from_slice(&all[at..at + inner]);
            }
        }
    }
    let sections = Sections {
        dim,
        per: range.len(),
        section: block,
        first: range.start,
        total: n,
    };
    (with_dim(shape, dim, stride * range.len()), part, sections)
}

#[test]
fn shards_hold_the_host_draws_of_their_logical_indices_p1_2_3_4_8() {
    let mut rng = Rng::fresh("random_kernel");
    // (shape, dim, stride, unit): plain splits of ragged dims, a 3-D middle
    // dim, and a fused projection's three sections in units of 2.
    let cases: &[(&[usize], usize, usize, usize)] = &[
        (&[17, 13], 0, 1, 1),
        (&[7, 13], 1, 1, 1),
        (&[5, 13, 3], 1, 1, 1),
        (&[24, 7], 0, 3, 2),
    ];
    for &draw in DRAWS {
        for &(shape, dim, stride, unit) in cases {
            let key = rng.next_u64();
            let all = host(draw, key, shape);
            for &p in WORLD_SIZES {
                let m = mesh(p);
                for r in m.ranks() {
                    let what = format!(
                        "{draw:?} {shape:?} dim {dim} stride {stride} P={p} r={}",
                        r.index()
                    );
                    let (local, want, sections) =
                        host_part(&all, shape, (dim, stride, unit), (p, r.index()));
                    let got = random(r, &local, draw, key, sections).unwrap();
                    assert_eq!(got.shape(), &local[..], "{what}");
                    let got = got.to_vec().unwrap();
                    if want.is_empty() {
                        assert!(got.is_empty(), "{what}");
                        continue;
                    }
                    let (tol, floor) = tolerance(draw);
                    assert_close(&what, &got, &want, tol);
                    for (g, w) in got.iter().zip(&want) {
                        assert!(
                            (*g as f64 - w).abs() <= floor + 1e-5 * w.abs(),
                            "{what}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_world_size_draws_the_same_bits_and_row_blocks_too() {
    let mut rng = Rng::fresh("random_bits");
    let draw = Draw::Normal {
        mean: 0.0,
        std: 1.0,
    };
    let shape = [67usize, 48];
    let key = rng.next_u64();
    let whole = random(
        &mesh(1).ranks()[0],
        &shape,
        draw,
        key,
        Sections::whole(&shape),
    )
    .unwrap()
    .to_vec()
    .unwrap();
    for &p in WORLD_SIZES {
        let m = mesh(p);
        let mut joined = Vec::new();
        for r in m.ranks() {
            let (local, _, sections) =
                host_part(&vec![0.0; 67 * 48], &shape, (0, 1, 1), (p, r.index()));
            joined.extend(
                random(r, &local, draw, key, sections)
                    .unwrap()
                    .to_vec()
                    .unwrap(),
            );
        }
        assert_eq!(joined, whole, "P={p}: the shards joined differ from P = 1");
    }
    // Stored in row blocks (bindings of 4 KiB: 21 rows each): the same values.
    let small = limited_mesh(1, 4096, false);
    let blocked = random(
        &small.ranks()[0],
        &shape,
        draw,
        key,
        Sections::whole(&shape),
    )
    .unwrap();
    assert!(
        blocked.is_blocked(),
        "expected row blocks under a 4 KiB binding"
    );
    assert_eq!(blocked.to_vec().unwrap(), whole, "row blocks");
}

#[test]
fn device_draws_have_their_distributions_moments() {
    let mut rng = Rng::fresh("random_moments");
    let m = mesh(1);
    let r = &m.ranks()[0];
    let n = 1usize << 18;
    let mut moments = |draw: Draw| {
        let x = random(r, &[n], draw, rng.next_u64(), Sections::whole(&[n]))
            .unwrap()
            .to_vec()
            .unwrap();
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        (x, mean, var.sqrt())
    };
    // 2^18 draws: the mean within 6σ/512, the std within 1 %.
    let (_, mean, std) = moments(Draw::Normal {
        mean: 0.25,
        std: 2.0,
    });
    assert!(
        (mean - 0.25).abs() < 6.0 * 2.0 / 512.0,
        "normal mean {mean}"
    );
    assert!((std / 2.0 - 1.0).abs() < 0.01, "normal std {std}");
    let (x, mean, std) = moments(Draw::Uniform {
        low: -0.5,
        high: 1.5,
    });
    assert!(x.iter().all(|v| (-0.5..1.5).contains(v)), "uniform bounds");
    assert!(
        (mean - 0.5).abs() < 6.0 * 0.578 / 512.0,
        "uniform mean {mean}"
    );
    assert!(
        (std / (2.0 / 12f64.sqrt()) - 1.0).abs() < 0.01,
        "uniform std {std}"
    );
    let (x, _, _) = moments(Draw::TruncNormal {
        mean: 0.2,
        std: 1.0,
        low: -0.5,
        high: 1.0,
    });
    assert!(
        x.iter().all(|v| (-0.5..=1.0).contains(v)),
        "truncated bounds"
    );
}

#[test]
fn bad_sections_and_huge_tensors_are_errors() {
    let m = mesh(1);
    let r = &m.ranks()[0];
    let draw = Draw::Constant(1.0);
    let bad = Sections {
        dim: 0,
        per: 3,
        section: 4,
        first: 2,
        total: 8,
    };
    let e = random(r, &[6, 2], draw, 1, bad).unwrap_err().to_string();
    assert!(e.contains("do not fit"), "{e}");
    let huge = Sections::whole(&[1 << 20, 1 << 12]);
    let e = random(r, &[1, 1 << 12], draw, 1, Sections { per: 1, ..huge })
        .unwrap_err()
        .to_string();
    assert!(e.contains("2^32"), "{e}");
    // The rank still works.
    let ok = random(r, &[3], draw, 1, Sections::whole(&[3])).unwrap();
    assert_eq!(ok.to_vec().unwrap(), vec![1.0; 3]);
}

//! GEMM on the default adapter (honours `WGPU_BACKEND`, e.g. `gl`) against
//! `matrixmultiply::sgemm` on one thread and on two (each thread a band of
//! C's rows; the adapter uses both cores too) on the same shapes in the
//! same run.
//! Square 1024³, 2048³ and ragged 1021³ (operands packed first; compared
//! with 1024³ per FLOP), and the layer shapes M×N×K = 512×512×2048,
//! 512×2048×512, 512×512×4096 in each product's layout: `fwd` = x·Wᵀ
//! (trans_b), `dW` = dyᵀ·x (trans_a), `dx` = dy·W (no transposes).
//!
//! One wgpu sample = record + submit + wait; the first call (pipeline
//! compilation) is excluded by criterion's warm-up. Prints, per shape,
//! `gemm MxNxK op: wgpu X GFLOP/s, sgemm Y GFLOP/s, ratio X/Y` from the best
//! sample of each (the machine may be shared). Where the adapter has
//! `SHADER_F16`, also the f16 GEMM (f32 accumulation) against the f32 one on
//! 1024³ and the 512×512×2048 forward. `cargo bench --bench gemm`.
//!
//! The baseline's speed depends on the CPU's vector ISA: matrixmultiply
//! (default features) runs its AVX-512 kernel where the CPU has `avx512f`,
//! ~1.8× its AVX2+FMA one, while lavapipe compiles 256-bit code with the
//! multiply and add split. The bench prints which kernel ran;
//! `MMTEST_FEATURE=fma,avx2,avx cargo bench --bench gemm` (read when
//! matrixmultiply is compiled) takes the AVX2+FMA kernel on such a CPU, the
//! baseline of the machines without AVX-512 that the figures in
//! BENCHMARKS.md were first taken on. (matrixmultiply builds its AVX-512
//! kernel only with rustc ≥ 1.89; the label assumes such a compiler.)

use std::cell::Cell;
use std::time::{Duration, Instant};

use criterion::Criterion;
use wgpu_tp::kernels::{self, GemmOptions};
use wgpu_tp::{DType, Mesh};

/// The f16 cases, each timed against f32 in the same run.
const F16_CASES: &[(usize, usize, usize, &str, bool, bool)] = &[
    (1024, 1024, 1024, "nn", false, false),
    (512, 512, 2048, "fwd", false, true),
];

/// (M, N, K, op name, trans_a, trans_b)
const CASES: &[(usize, usize, usize, &str, bool, bool)] = &[
    (1024, 1024, 1024, "nn", false, false),
    // Ragged (1021 is no multiple of 4): every operand packed first, vs 1024³
    // above.
    (1021, 1021, 1021, "nn ragged", false, false),
    (2048, 2048, 2048, "nn", false, false),
    (512, 512, 2048, "fwd", false, true),
    (512, 512, 2048, "dW", true, false),
    (512, 512, 2048, "dx", false, false),
    (512, 2048, 512, "fwd", false, true),
    (512, 2048, 512, "dW", true, false),
    (512, 2048, 512, "dx", false, false),
    (512, 512, 4096, "fwd", false, true),
    (512, 512, 4096, "dW", true, false),
    (512, 512, 4096, "dx", false, false),
];

fn data(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7 + seed) % 17) as f32 - 8.0) / 8.0)
        .collect()
}

/// Time `f` under criterion and return the best time per iteration seen.
fn best_time(c: &mut Criterion, id: &str, mut f: impl FnMut()) -> f64 {
    let best = Cell::new(f64::INFINITY);
    c.bench_function(id, |bch| {
        bch.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            let dt = t.elapsed();
            best.set(best.get().min(dt.as_secs_f64() / iters.max(1) as f64));
            dt
        })
    });
    best.get()
}

/// Which of matrixmultiply's sgemm kernels runs here: it picks the widest
/// the CPU has, among those `MMTEST_FEATURE` allows (a compile-time
/// variable of matrixmultiply's, seen here because cargo compiles this
/// bench in the same environment).
fn sgemm_kernel() -> String {
    let allowed = option_env!("MMTEST_FEATURE").filter(|f| !f.is_empty());
    let allows = |f: &str| allowed.is_none_or(|list| list.split(',').any(|x| x == f));
    #[cfg(target_arch = "x86_64")]
    let kernel = if allows("avx512f") && std::arch::is_x86_feature_detected!("avx512f") {
        "AVX-512 kernel"
    } else if allows("fma")
        && allows("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("avx2")
    {
        "AVX2+FMA kernel"
    } else {
        "a pre-AVX2 kernel"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let kernel = "its kernel for this architecture";
    match allowed {
        Some(list) => format!("matrixmultiply, one thread, {kernel} (MMTEST_FEATURE={list})"),
        None => format!("matrixmultiply, one thread, {kernel}"),
    }
}

/// `out = op(a)·op(b)` by `matrixmultiply::sgemm` on `threads` scoped
/// threads, each taking a contiguous band of C's rows (the two-thread
/// baseline: the adapter runs on both cores too).
fn sgemm_rows(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    (m, n, k): (usize, usize, usize),
    (rsa, csa, rsb, csb): (isize, isize, isize, isize),
    threads: usize,
) {
    let band = m.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, c) in out.chunks_mut(band * n).enumerate() {
            let rows = c.len() / n;
            // Row `t·band` of op(a) starts at element t·band·rsa.
            let a = &a[t * band * rsa as usize..];
            s.spawn(move || unsafe {
                // SAFETY: `a` from this band's first row, `b` and this band
                // of C hold every element these strides address.
                matrixmultiply::sgemm(
                    rows,
                    k,
                    n,
                    1.0,
                    a.as_ptr(),
                    rsa,
                    csa,
                    b.as_ptr(),
                    rsb,
                    csb,
                    0.0,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                );
            });
        }
    });
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let mesh = Mesh::simulated(1).expect("a wgpu adapter");
    let r = &mesh.ranks()[0];
    println!("adapter: {}", mesh.adapter_summary());
    let baseline = sgemm_kernel();
    println!("sgemm baseline: {baseline}");
    let mut lines = Vec::new();
    let mut rates = Vec::new();
    for &(m, n, k, op, ta, tb) in CASES {
        let flops = 2.0 * (m * n * k) as f64;
        let a = data(m * k, 1);
        let b = data(k * n, 2);
        let a_shape = if ta { [k, m] } else { [m, k] };
        let b_shape = if tb { [n, k] } else { [k, n] };
        let at = r.upload(&a_shape, &a).unwrap();
        let bt = r.upload(&b_shape, &b).unwrap();
        let opts = GemmOptions::new().trans_a(ta).trans_b(tb);
        let name = format!("gemm {m}x{n}x{k} {op}");
        let wgpu = best_time(&mut c, &format!("{name} wgpu"), || {
            kernels::gemm(&at, &bt, opts).unwrap();
            mesh.synchronize().unwrap();
        });
        // Row/column strides of the stored layouts.
        let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
        let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
        let mut out = vec![0.0f32; m * n];
        let strides = (rsa, csa, rsb, csb);
        let sgemm = best_time(&mut c, &format!("{name} sgemm"), || {
            sgemm_rows(&a, &b, &mut out, (m, n, k), strides, 1)
        });
        let sgemm2 = best_time(&mut c, &format!("{name} sgemm 2 threads"), || {
            sgemm_rows(&a, &b, &mut out, (m, n, k), strides, 2)
        });
        if !(wgpu.is_finite() && sgemm.is_finite() && sgemm2.is_finite()) {
            continue; // filtered out by the command line's criterion filter
        }
        let (x, y, y2) = (
            flops / wgpu / 1e9,
            flops / sgemm / 1e9,
            flops / sgemm2 / 1e9,
        );
        rates.push((op, m, x));
        let line = format!(
            "{name}: wgpu {x:.1} GFLOP/s, sgemm {y:.1} GFLOP/s (ratio {:.2}), \
             2 threads {y2:.1} GFLOP/s (ratio {:.2})",
            x / y,
            x / y2
        );
        println!("{line}");
        lines.push(line);
    }
    if r.device().has_f16() {
        for &(m, n, k, op, ta, tb) in F16_CASES {
            let flops = 2.0 * (m * n * k) as f64;
            let a_shape = if ta { [k, m] } else { [m, k] };
            let b_shape = if tb { [n, k] } else { [k, n] };
            let a32 = r.upload(&a_shape, &data(m * k, 1)).unwrap();
            let b32 = r.upload(&b_shape, &data(k * n, 2)).unwrap();
            let (a16, b16) = (
                kernels::cast(&a32, DType::F16).unwrap(),
                kernels::cast(&b32, DType::F16).unwrap(),
            );
            let opts = GemmOptions::new().trans_a(ta).trans_b(tb);
            let name = format!("gemm {m}x{n}x{k} {op}");
            let t16 = best_time(&mut c, &format!("{name} f16"), || {
                kernels::gemm(&a16, &b16, opts).unwrap();
                mesh.synchronize().unwrap();
            });
            let t32 = best_time(&mut c, &format!("{name} f32"), || {
                kernels::gemm(&a32, &b32, opts).unwrap();
                mesh.synchronize().unwrap();
            });
            if !(t16.is_finite() && t32.is_finite()) {
                continue; // filtered out
            }
            let (x, y) = (flops / t16 / 1e9, flops / t32 / 1e9);
            let line = format!(
                "{name} f16 (f32 accumulation): {x:.1} GFLOP/s, f32 {y:.1} GFLOP/s, ratio {:.2}",
                x / y
            );
            println!("{line}");
            lines.push(line);
        }
    } else {
        lines.push("f16: skipped, the adapter has no SHADER_F16".into());
    }
    let rate = |op: &str, m: usize| rates.iter().find(|r| r.0 == op && r.1 == m).map(|r| r.2);
    if let (Some(aligned), Some(ragged)) = (rate("nn", 1024), rate("nn ragged", 1021)) {
        lines.push(format!(
            "ragged 1021³ vs aligned 1024³: {:.2}× the time per FLOP (target ≤ 2)",
            aligned / ragged
        ));
    }
    println!("\nsummary ({}; sgemm: {baseline}):", mesh.adapter_summary());
    for l in lines {
        println!("{l}");
    }
    c.final_summary();
}

//! On ranks that share one device, a sharded product of a few rows (a
//! decoding step) records one dispatch for every four ranks
//! (`kernels::gemv::group`): column parallel with its bias and GELU,
//! SwiGLU's gate times its up projection, row parallel's partial sums;
//! f32 and bf16 weights, 1 to 8 rows. Each rank's shard is the bits a
//! device per rank gives, and the product is the f64 one.

use crate::util::reference::{gelu, gemm};
use crate::util::{Rng, assert_close_cancelling, gemv_calls, mesh, mesh_env, shared_mesh};
use wgpu_tp::kernels::Activation;
use wgpu_tp::{DTensor, DType, MatmulOptions, Mesh, MeshBuilder, Placement};

/// Which layer's product.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Column parallel `gelu(x·wᵀ + b)`.
    Column,
    /// Column parallel `silu(x·wᵀ) ⊙ up`.
    Gate,
    /// Row parallel `x·wᵀ` (partial sums).
    Row,
}

/// The operands: x `[t, k]`, w `[n, k]`, b `[n]`, up `[t, n]`.
type Ops<'a> = (&'a [f32], &'a [f32], &'a [f32], &'a [f32]);

/// The product of `kind` on `m` with weights in `wd`, and each rank's
/// shard as bits.
fn product(
    m: &Mesh,
    kind: Kind,
    wd: DType,
    (x, w, b, u): Ops,
    (t, k, n): (usize, usize, usize),
) -> (DTensor, Vec<Vec<u32>>) {
    let (xp, wp) = match kind {
        Kind::Row => (Placement::Shard(1), Placement::Shard(1)),
        _ => (Placement::Replicate, Placement::Shard(0)),
    };
    let xd = DTensor::from_host(m, &[t, k], x, xp).unwrap();
    let wd = DTensor::from_host(m, &[n, k], w, wp)
        .unwrap()
        .cast(wd)
        .unwrap();
    let opts = MatmulOptions::default();
    let y = match kind {
        Kind::Column => {
            let bd = DTensor::from_host(m, &[n], b, Placement::Shard(0)).unwrap();
            xd.linear_activation(&wd, Some(&bd), Activation::Gelu, opts)
        }
        Kind::Gate => {
            let ud = DTensor::from_host(m, &[t, n], u, Placement::Shard(1)).unwrap();
            xd.linear_activation_mul(&wd, None, Activation::Silu, &ud, opts)
        }
        Kind::Row => xd.matmul(&wd, true),
    }
    .unwrap();
    let bits = |s: &wgpu_tp::LocalTensor| s.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
    let shards = y.shards().iter().map(bits).collect();
    (y, shards)
}

/// The f64 result of [`product`] over the weights as `wd` holds them, and
/// the scale bounding its rounding.
fn reference(kind: Kind, (x, w, b, u): Ops, (t, k, n): (usize, usize, usize)) -> [Vec<f64>; 2] {
    let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<f32>>();
    let mut want = gemm(x, w, t, n, k, false, true);
    let scale = gemm(&abs(x), &abs(w), t, n, k, false, true);
    for (i, y) in want.iter_mut().enumerate() {
        *y = match kind {
            Kind::Column => gelu(*y + b[i % n] as f64),
            Kind::Gate => *y / (1.0 + (-*y).exp()) * u[i] as f64,
            Kind::Row => *y,
        };
    }
    [want, scale]
}

/// `v` rounded to bf16 (round to nearest even), as the cast stores it.
fn bf16(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|x| half::bf16::from_f32(*x).to_f32())
        .collect()
}

#[test]
fn grouped_products_give_each_ranks_bits_p2_3_4_8() {
    let mut rng = Rng::fresh("grouped_products");
    // Rows 1 and 8: the kernel's two row counts a decoding step takes.
    let cases = [
        (1, Kind::Column),
        (8, Kind::Row),
        (1, Kind::Gate),
        (8, Kind::Column),
        (1, Kind::Row),
    ];
    for p in [2, 3, 4, 8] {
        for wd in [DType::F32, DType::BF16] {
            for (t, kind) in cases {
                // Every rank's K whole vec8s (row parallel), N ragged.
                let (k, n) = (16 * p, 13 * p - 5);
                let (x, b, u) = (rng.vec(t * k), rng.vec(n), rng.vec(t * n));
                let w = rng.vec(n * k);
                let w = if wd == DType::BF16 { bf16(&w) } else { w };
                let ops = (&x[..], &w[..], &b[..], &u[..]);
                let what = format!("P={p} {wd} t={t} {kind:?}");
                let (y, shared) = product(&shared_mesh(p), kind, wd, ops, (t, k, n));
                let (_, each) = product(&mesh(p), kind, wd, ops, (t, k, n));
                assert_eq!(
                    shared, each,
                    "{what}: shards, shared device and a device each"
                );
                let got = y
                    .redistribute(Placement::Replicate)
                    .unwrap()
                    .to_host()
                    .unwrap();
                let [want, scale] = reference(kind, ops, (t, k, n));
                assert_close_cancelling(&what, &got, &want, &scale, 1e-5);
            }
        }
    }
}

#[test]
fn five_ranks_on_one_device_take_two_grouped_dispatches() {
    mesh_env();
    let mut rng = Rng::fresh("grouped_dispatches");
    // A private mesh: a trace counts every kernel on the device.
    let m = MeshBuilder::new().ranks(5).shared_device().build().unwrap();
    m.set_poison(true);
    let (t, k, n) = (2, 40, 37);
    let (x, w, b, u) = (rng.vec(t * k), rng.vec(n * k), rng.vec(n), rng.vec(t * n));
    for kind in [Kind::Column, Kind::Gate, Kind::Row] {
        m.synchronize().unwrap();
        m.start_trace().unwrap();
        product(&m, kind, DType::F32, (&x, &w, &b, &u), (t, k, n));
        m.synchronize().unwrap();
        let trace = m.stop_trace().unwrap();
        // Not under WebGPU's limits (8 storage buffers a stage), nor on a
        // GPU (its products alone take the split-K entry): no group there.
        let dev = m.ranks()[0].device();
        let limits = dev.limits();
        let grouped = !dev.is_gpu() && limits.max_storage_buffers_per_shader_stage >= 16;
        let want = if grouped { (2, 0) } else { (0, 5) };
        let kernels = trace.top_kernels(usize::MAX);
        assert_eq!(
            gemv_calls(&trace),
            want,
            "{kind:?}: grouped, per rank: {kernels:?}"
        );
    }
}

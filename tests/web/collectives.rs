//! Collectives on the page's one device (the shared-device transport: every
//! byte moves by on-device copies and folds) at P = 1, 2, 3, 4 and 8 with
//! ragged sizes, against host references: sums within 1e-5 of f64, max and
//! data movement exact, and the bytes counted per collective.

use wasm_bindgen_test::wasm_bindgen_test;
use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::shard::split_range;
use wgpu_tp::{Collective, LocalTensor, Mesh};

use crate::{Rng, TOL, limit_sets, log, mesh, rel_err};

async fn read(ts: &[LocalTensor]) -> Vec<Vec<f32>> {
    let mut out = Vec::with_capacity(ts.len());
    for t in ts {
        out.push(t.to_vec_async().await.unwrap());
    }
    out
}

fn upload(m: &Mesh, shape: &[usize], data: &[Vec<f32>]) -> Vec<LocalTensor> {
    m.ranks()
        .iter()
        .zip(data)
        .map(|(r, d)| r.upload(shape, d).unwrap())
        .collect()
}

async fn check_mesh(m: &Mesh, rng: &mut Rng, label: &str) {
    let p = m.size();
    let (rows, cols) = (13, 17);
    let data: Vec<Vec<f32>> = (0..p).map(|_| rng.vec(rows * cols)).collect();
    let shards = upload(m, &[rows, cols], &data);

    // All-reduce, sum and max.
    let sum: Vec<f64> = (0..rows * cols)
        .map(|i| data.iter().map(|d| d[i] as f64).sum())
        .collect();
    for got in read(&comm::all_reduce(m, &shards, ReduceOp::Sum).unwrap()).await {
        let e = rel_err(&got, &sum);
        assert!(e <= TOL, "{label} P={p}: all_reduce sum rel {e:.2e}");
    }
    let max: Vec<f32> = (0..rows * cols)
        .map(|i| data.iter().map(|d| d[i]).fold(f32::MIN, f32::max))
        .collect();
    for got in read(&comm::all_reduce(m, &shards, ReduceOp::Max).unwrap()).await {
        assert_eq!(got, max, "{label} P={p}: all_reduce max");
    }

    // Reduce-scatter over rows: rank r gets its (uneven) slice of the sum.
    let rs = read(&comm::reduce_scatter(m, &shards, 0, ReduceOp::Sum).unwrap()).await;
    for (r, got) in rs.iter().enumerate() {
        let range = split_range(rows, p, r);
        let e = rel_err(got, &sum[range.start * cols..range.end * cols]);
        assert!(
            e <= TOL,
            "{label} P={p}: reduce_scatter rank {r} rel {e:.2e}"
        );
    }

    // All-gather of uneven row slices gives the whole on every rank.
    let whole = rng.vec(rows * cols);
    let parts: Vec<LocalTensor> = m
        .ranks()
        .iter()
        .enumerate()
        .map(|(r, rank)| {
            let range = split_range(rows, p, r);
            let slice = &whole[range.start * cols..range.end * cols];
            rank.upload(&[range.len(), cols], slice).unwrap()
        })
        .collect();
    for got in read(&comm::all_gather(m, &parts, 0).unwrap()).await {
        assert_eq!(got, whole, "{label} P={p}: all_gather");
    }

    // All-to-all: rank r's output row-block s is rank s's row-block r.
    let a2a = read(&comm::all_to_all(m, &shards, 0, 0).unwrap()).await;
    for (r, got) in a2a.iter().enumerate() {
        let want: Vec<f32> = (0..p)
            .flat_map(|s| {
                let range = split_range(rows, p, r);
                data[s][range.start * cols..range.end * cols].to_vec()
            })
            .collect();
        assert_eq!(got, &want, "{label} P={p}: all_to_all rank {r}");
    }

    // Broadcast from the last rank.
    for got in read(&comm::broadcast_from(m, &shards, p - 1).unwrap()).await {
        assert_eq!(got, data[p - 1], "{label} P={p}: broadcast_from");
    }
}

#[wasm_bindgen_test]
async fn collectives_on_the_shared_device_p1_2_3_4_8() {
    let mut rng = Rng::fresh("collectives");
    for (label, limits) in limit_sets() {
        for p in [1, 2, 3, 4, 8] {
            let m = mesh(p, limits.clone()).await;
            m.reset_comm_stats();
            check_mesh(&m, &mut rng, label).await;
            let calls = m.comm_calls(Collective::AllReduce);
            assert_eq!(calls, 2, "{label} P={p}: all-reduces counted");
        }
        log!("{label}: collectives at P = 1, 2, 3, 4, 8 match");
    }
}

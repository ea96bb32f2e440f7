//! The `collectives` and `fault` scenarios.

use wgpu_tp::comm::{self, Collective};
use wgpu_tp::{DType, Error, LocalTensor, Mesh, MeshBuilder, ReduceOp};

/// Deterministic data for rank `r` of case `case` (every process can make
/// every rank's, so each checks against the rank-order reference).
pub fn data(case: u64, r: usize, n: usize) -> Vec<f32> {
    let mut s = case.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (r as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// One case: each rank's input shape and the collective.
struct Case {
    name: &'static str,
    shape: fn(usize) -> Vec<usize>,
    call: fn(&Mesh, &[LocalTensor]) -> wgpu_tp::Result<Vec<LocalTensor>>,
}

const CASES: &[Case] = &[
    Case {
        name: "all_reduce sum",
        shape: |_| vec![7, 13],
        call: |m, s| comm::all_reduce(m, s, ReduceOp::Sum),
    },
    Case {
        name: "all_reduce max",
        shape: |_| vec![17],
        call: |m, s| comm::all_reduce(m, s, ReduceOp::Max),
    },
    // Rank 1 holds no rows.
    Case {
        name: "all_gather dim 0 uneven",
        shape: |r| vec![[3, 0, 5, 1][r % 4], 13],
        call: |m, s| comm::all_gather(m, s, 0),
    },
    Case {
        name: "all_gather dim 1 uneven",
        shape: |r| vec![7, r + 1],
        call: |m, s| comm::all_gather(m, s, 1),
    },
    Case {
        name: "reduce_scatter dim 0 uneven",
        shape: |_| vec![17, 5],
        call: |m, s| comm::reduce_scatter(m, s, 0, ReduceOp::Sum),
    },
    Case {
        name: "reduce_scatter dim 1",
        shape: |_| vec![3, 13],
        call: |m, s| comm::reduce_scatter(m, s, 1, ReduceOp::Sum),
    },
    Case {
        name: "all_to_all",
        shape: |r| vec![r + 2, 13],
        call: |m, s| comm::all_to_all(m, s, 1, 0),
    },
    Case {
        name: "broadcast_from last",
        shape: |_| vec![5, 7],
        call: |m, s| comm::broadcast_from(m, s, m.size() - 1),
    },
    Case {
        name: "ring_shift ragged",
        shape: |r| vec![r % 3, 3],
        call: |m, s| comm::ring_shift(m, s),
    },
];

/// This process's result of `case`, and the single-process mesh's result
/// on every rank (rank 0 only).
fn run_case(mesh: &Mesh, reference: Option<&Mesh>, k: usize, case: &Case) -> Result<(), String> {
    let p = mesh.size();
    let me = mesh.process_index();
    let rank = &mesh.ranks()[0];
    let input = |r: usize| data(k as u64, r, (case.shape)(r).iter().product());
    let x = rank
        .upload(&(case.shape)(me), &input(me))
        .map_err(|e| e.to_string())?;
    let got = (case.call)(mesh, &[x]).map_err(|e| format!("{}: {e}", case.name))?;
    let got_bits = bits(&got[0].to_vec().map_err(|e| e.to_string())?);
    let got_shape = got[0].shape().to_vec();
    let counted = mesh.comm_stats();
    // Every rank's result gathered on every process, to compare with the
    // single-process mesh rank by rank.
    let all = gather(mesh, &got_bits)?;
    if let Some(single) = reference {
        let shards = single
            .ranks()
            .iter()
            .map(|r| r.upload(&(case.shape)(r.index()), &input(r.index())))
            .collect::<wgpu_tp::Result<Vec<_>>>()
            .map_err(|e| e.to_string())?;
        let want = (case.call)(single, &shards).map_err(|e| e.to_string())?;
        for (r, w) in want.iter().enumerate().take(p) {
            let wb = bits(&w.to_vec().map_err(|e| e.to_string())?);
            if all[r] != wb {
                return Err(format!(
                    "{}: rank {r} differs from the single-process mesh",
                    case.name
                ));
            }
        }
        if want[0].shape() != got_shape.as_slice() {
            return Err(format!(
                "{}: shape {:?} vs {:?}",
                case.name,
                got_shape,
                want[0].shape()
            ));
        }
        let (a, b) = (counted, single.comm_stats());
        if a != b {
            return Err(format!(
                "{}: counters differ: {a:?} vs single-process {b:?}",
                case.name
            ));
        }
    }
    Ok(())
}

/// Every rank's words, through an all-gather of equal-length rows (the
/// lengths first).
fn gather(mesh: &Mesh, words: &[u32]) -> Result<Vec<Vec<u32>>, String> {
    let rank = &mesh.ranks()[0];
    let e = |e: Error| e.to_string();
    let len = rank.upload_i32(&[1, 1], &[words.len() as i32]).map_err(e)?;
    let lens = comm::all_gather(mesh, &[len], 0).map_err(e)?[0]
        .to_vec_i32()
        .map_err(e)?;
    let max = lens.iter().copied().max().unwrap_or(0).max(1) as usize;
    let mut row: Vec<i32> = words.iter().map(|&w| w as i32).collect();
    row.resize(max, 0);
    let t = rank.upload_i32(&[1, max], &row).map_err(e)?;
    let rows = comm::all_gather(mesh, &[t], 0).map_err(e)?[0]
        .to_vec_i32()
        .map_err(e)?;
    mesh.reset_comm_stats();
    Ok(lens
        .iter()
        .enumerate()
        .map(|(r, &n)| {
            rows[r * max..r * max + n as usize]
                .iter()
                .map(|&v| v as u32)
                .collect()
        })
        .collect())
}

pub fn run(mesh: &Mesh) -> Result<usize, String> {
    let (me, p) = (mesh.process_index(), mesh.size());
    if mesh.ranks().len() != 1 || mesh.ranks()[0].index() != me || !mesh.is_multi_process() {
        return Err(format!("rank layout: {:?}", mesh.ranks()));
    }
    let single = if me == 0 {
        Some(
            MeshBuilder::new()
                .ranks(p)
                .build()
                .map_err(|e| e.to_string())?,
        )
    } else {
        None
    };
    for (k, case) in CASES.iter().enumerate() {
        mesh.reset_comm_stats();
        if let Some(s) = &single {
            s.reset_comm_stats();
        }
        run_case(mesh, single.as_ref(), k, case)?;
    }
    // i32 sums too.
    let t = mesh.ranks()[0]
        .upload_i32(&[3], &[me as i32, 1, -(me as i32)])
        .map_err(|e| e.to_string())?;
    let s = comm::all_reduce(mesh, &[t], ReduceOp::Sum).map_err(|e| e.to_string())?;
    let want = [
        (p * (p - 1) / 2) as i32,
        p as i32,
        -((p * (p - 1) / 2) as i32),
    ];
    if s[0].to_vec_i32().map_err(|e| e.to_string())? != want {
        return Err("i32 all_reduce".into());
    }
    // A bad call (the last rank passes another shape) is an error on every
    // rank, before data moves; the mesh keeps working.
    let shape = if me == p - 1 { vec![4] } else { vec![5] };
    let t = mesh.ranks()[0]
        .zeros(&shape, DType::F32)
        .map_err(|e| e.to_string())?;
    match comm::all_reduce(mesh, &[t], ReduceOp::Sum) {
        Err(Error::ShapeMismatch { .. }) => {}
        other => return Err(format!("mismatched shapes gave {other:?}")),
    }
    let t = mesh.ranks()[0]
        .upload(&[2], &[1.0, 2.0])
        .map_err(|e| e.to_string())?;
    let s = comm::all_reduce(mesh, &[t], ReduceOp::Sum).map_err(|e| e.to_string())?;
    if s[0].to_vec().map_err(|e| e.to_string())? != [p as f32, 2.0 * p as f32] {
        return Err("all_reduce after a refused call".into());
    }
    // Rooted forms that need the root's tensor alone say what to use.
    match comm::broadcast(mesh, &s[0], mesh.ranks()) {
        Err(e) if e.to_string().contains("broadcast_from") => {}
        other => return Err(format!("broadcast on a multi-process mesh gave {other:?}")),
    }
    let calls = mesh.comm_calls(Collective::AllReduce);
    if calls == 0 {
        return Err("no all-reduce counted".into());
    }
    Ok(me)
}

/// The last rank fails before an all-reduce; the others must get
/// `Error::Timeout` naming it.
pub fn fault(mesh: &Mesh) -> Result<usize, String> {
    let (me, p) = (mesh.process_index(), mesh.size());
    let t = mesh.ranks()[0]
        .upload(&[4], &[1.0; 4])
        .map_err(|e| e.to_string())?;
    comm::all_reduce(mesh, std::slice::from_ref(&t), ReduceOp::Sum).map_err(|e| e.to_string())?;
    if me == p - 1 {
        // Fails as a program does: returns an error and exits non-zero
        // (after finalising MPI, which waits for the others).
        println!("FAILED on purpose rank {me}");
        return Err("failed on purpose".into());
    }
    match comm::all_reduce(mesh, &[t], ReduceOp::Sum) {
        Err(Error::Timeout { op, missing, .. }) if op == "all_reduce" && missing == vec![p - 1] => {
            Ok(me)
        }
        other => Err(format!(
            "expected a time-out naming rank {}, got {other:?}",
            p - 1
        )),
    }
}

//! Named axes (`Mesh::with_axes`, `MeshBuilder::axes`): ranks laid out
//! row-major, sub-meshes per axis that are the same mesh each time they are
//! asked for, collectives on a sub-mesh among its ranks only (and counted
//! there), on both transports; bad axes are errors.

use crate::util::{Rng, count_lock, counting_mesh, counting_shared_mesh, mesh, mesh_env};
use wgpu_tp::comm::{all_gather, all_reduce};
use wgpu_tp::{Collective, Mesh, MeshBuilder, ReduceOp};

/// Row-major coordinates, the last axis fastest.
fn coords(sizes: &[usize], mut i: usize) -> Vec<usize> {
    let mut c = vec![0; sizes.len()];
    for d in (0..sizes.len()).rev() {
        c[d] = i % sizes[d];
        i /= sizes[d];
    }
    c
}

const LAYOUTS: &[&[(&str, usize)]] = &[
    &[("dp", 2), ("tp", 2)],
    &[("dp", 4), ("tp", 1)],
    &[("dp", 3), ("tp", 2)],
    &[("pp", 2), ("dp", 2), ("tp", 2)],
    &[("tp", 2), ("pp", 2), ("dp", 2)],
    &[("tp", 4)],
];

#[test]
fn ranks_lie_row_major_and_each_axis_group_is_one_sub_mesh() {
    for axes in LAYOUTS {
        let sizes: Vec<usize> = axes.iter().map(|a| a.1).collect();
        let world: usize = sizes.iter().product();
        let m = mesh(world).with_axes(axes).unwrap();
        let what = format!("{axes:?}");
        assert_eq!(m.axes().len(), axes.len(), "{what}");
        for r in 0..world {
            assert_eq!(
                m.coords_of(r).unwrap(),
                coords(&sizes, r),
                "{what} rank {r}"
            );
            let info = m.parallel_group_info(r).unwrap();
            for (d, g) in info.iter().enumerate() {
                assert_eq!((g.axis.as_str(), g.size), axes[d], "{what}");
                assert_eq!(g.index, coords(&sizes, r)[d], "{what}");
                // The peers differ from r only along axis d, in order.
                assert_eq!(g.peers.len(), sizes[d]);
                for (i, &q) in g.peers.iter().enumerate() {
                    let (mut cq, mut cr) = (coords(&sizes, q), coords(&sizes, r));
                    assert_eq!(cq[d], i, "{what}: peer {i} of rank {r} along {}", g.axis);
                    (cq[d], cr[d]) = (0, 0);
                    assert_eq!(cq, cr, "{what}: peer {q} of rank {r} along {}", g.axis);
                }
                assert!(!g.to_string().is_empty());
            }
        }
        for (d, (name, size)) in axes.iter().enumerate() {
            let groups = m.axis_groups(name).unwrap();
            assert_eq!(groups.len(), world / size, "{what} {name}");
            for (k, g) in groups.iter().enumerate() {
                assert_eq!(g.size(), *size);
                assert_eq!(g.ranks().len(), *size);
                assert_eq!(g.axes(), vec![(name.to_string(), *size)]);
                for r in 0..*size {
                    let root = g.root_rank(r).unwrap();
                    assert_eq!(coords(&sizes, root)[d], r, "{what} {name} group {k}");
                    // The same object, however it is asked for.
                    assert!(m.group_of(&[name], root).unwrap().same_as(g));
                    assert_eq!(g.ranks()[r].index(), r);
                    assert_eq!(
                        g.ranks()[r].device().id(),
                        m.ranks()[root].device().id(),
                        "a sub-mesh rank runs on its root rank's device"
                    );
                }
            }
        }
        // A group over every axis is the mesh itself; a sub-mesh's own groups
        // are the root's.
        let all: Vec<&str> = axes.iter().map(|a| a.0).collect();
        assert!(m.sub(&all).unwrap().same_as(&m));
        if axes.len() == 3 {
            for stage in m.sub_groups(&["dp", "tp"]).unwrap() {
                assert_eq!(stage.size(), 4);
                for tp in stage.axis_groups("tp").unwrap() {
                    let root = tp.root_rank(0).unwrap();
                    assert!(m.group_of(&["tp"], root).unwrap().same_as(&tp));
                }
            }
        }
    }
}

#[test]
fn bad_axes_are_errors_that_say_what_to_do() {
    mesh_env();
    let m = mesh(4);
    let err = |r: wgpu_tp::Result<Mesh>| r.expect_err("an error").to_string();
    let msg = err(m.with_axes(&[("dp", 2), ("tp", 3)]));
    assert!(
        msg.contains("multiply to 6") && msg.contains("4 ranks"),
        "{msg}"
    );
    assert!(err(m.with_axes(&[("tp", 2), ("tp", 2)])).contains("named twice"));
    assert!(err(m.with_axes(&[("dp", 0), ("tp", 4)])).contains("at least one rank"));
    assert!(err(m.with_axes(&[])).contains("between 1 and 16"));
    assert!(err(m.axis("tp")).contains("no named axes"));
    assert!(m.coords_of(0).is_err() && m.parallel_group_info(0).is_err());
    let a = m.with_axes(&[("dp", 2), ("tp", 2)]).unwrap();
    let msg = err(a.axis("pp"));
    assert!(msg.contains("\"pp\"") && msg.contains("dp"), "{msg}");
    assert!(err(a.with_axes(&[("x", 4)])).contains("already"));
    // One process drives both tp groups: `axis` cannot pick one.
    assert!(err(a.axis("tp")).contains("axis_groups"));
    assert!(err(a.group_of(&["tp"], 4)).contains("rank"));
    assert!(a.coords().is_err(), "four ranks in this process");
    let msg = MeshBuilder::new()
        .axes(&[("dp", 2), ("tp", 2)])
        .ranks(3)
        .build()
        .expect_err("3 ranks for a 2 × 2 mesh")
        .to_string();
    assert!(msg.contains("multiply to 4"), "{msg}");
}

#[test]
fn builder_axes_set_the_world_size() {
    mesh_env();
    let m = MeshBuilder::new()
        .shared_device()
        .axes(&[("dp", 3), ("tp", 2)])
        .build()
        .unwrap();
    assert_eq!(m.size(), 6);
    assert_eq!(m.axis_size("dp").unwrap(), 3);
    assert_eq!(m.axis_groups("tp").unwrap().len(), 3);
}

/// Each group's all-reduce sums that group's shards only and counts once on
/// that group's mesh, never on the root or the other groups; an all-gather
/// along the other axis likewise.
#[test]
fn collectives_on_an_axis_run_among_its_ranks_on_both_transports() {
    let _counting = count_lock();
    let mut rng = Rng::fresh("axes collectives");
    for axes in [
        &[("dp", 2), ("tp", 2)][..],
        &[("dp", 3), ("tp", 2)],
        &[("pp", 2), ("dp", 2), ("tp", 2)],
    ] {
        let world: usize = axes.iter().map(|a| a.1).product();
        for (kind, base) in [
            ("host-staged", counting_mesh(world)),
            ("shared-device", counting_shared_mesh(world)),
        ] {
            let m = base.with_axes(axes).unwrap();
            let what = format!("{kind} {axes:?}");
            let n = 13;
            let data: Vec<Vec<f32>> = (0..world).map(|_| rng.vec(n)).collect();
            for name in ["tp", "dp"] {
                let groups = m.axis_groups(name).unwrap();
                for g in &groups {
                    g.reset_comm_stats();
                }
                m.reset_comm_stats();
                for g in &groups {
                    let shards: Vec<_> = (0..g.size())
                        .map(|r| {
                            let root = g.root_rank(r).unwrap();
                            g.ranks()[r].upload(&[n], &data[root]).unwrap()
                        })
                        .collect();
                    let out = all_reduce(g, &shards, ReduceOp::Sum).unwrap();
                    let mut want = vec![0f64; n];
                    for r in 0..g.size() {
                        let root = g.root_rank(r).unwrap();
                        for (w, &x) in want.iter_mut().zip(&data[root]) {
                            *w += x as f64;
                        }
                    }
                    for (r, o) in out.iter().enumerate() {
                        assert_eq!(o.rank_index(), r, "{what} {name}");
                        crate::util::assert_close(
                            &format!("{what} {name} all-reduce"),
                            &o.to_vec().unwrap(),
                            &want,
                            1e-6,
                        );
                    }
                    let gathered = all_gather(g, &shards, 0).unwrap();
                    let mut want = Vec::new();
                    for r in 0..g.size() {
                        want.extend(data[g.root_rank(r).unwrap()].iter().map(|&x| x as f64));
                    }
                    crate::util::assert_close(
                        &format!("{what} {name} all-gather"),
                        &gathered[0].to_vec().unwrap(),
                        &want,
                        0.0,
                    );
                }
                for g in &groups {
                    assert_eq!(g.comm_calls(Collective::AllReduce), 1, "{what} {name}");
                    assert_eq!(g.comm_calls(Collective::AllGather), 1, "{what} {name}");
                }
                let on_root: u64 = m.comm_stats().values().map(|c| c.calls).sum();
                assert_eq!(on_root, 0, "{what}: nothing counted on the root");
                let per_axis = m.axis_comm_stats(name).unwrap();
                let calls = |k| per_axis.get(&k).map_or(0, |c| c.calls);
                assert_eq!(
                    calls(Collective::AllReduce),
                    groups.len() as u64,
                    "{what} {name}"
                );
                assert_eq!(
                    calls(Collective::AllGather),
                    groups.len() as u64,
                    "{what} {name}"
                );
            }
        }
    }
}

//! Communication statistics: every collective counts its calls and payload
//! bytes exactly on both transports (world size 1 included), errors count
//! nothing, and a reset empties the counters.

use crate::util::mesh_env;
use wgpu_tp::comm::{self, ReduceOp};
use wgpu_tp::{Collective, CommCount, DeviceLayout, LocalTensor, MeshBuilder, Transport};

#[test]
fn counters_count_calls_and_bytes_exactly() {
    mesh_env();
    // Private meshes: the shared ones are used by tests running in parallel.
    let host = MeshBuilder::new()
        .ranks(3)
        .layout(DeviceLayout::Simulated)
        .build()
        .unwrap();
    let shared = MeshBuilder::new().ranks(3).shared_device().build().unwrap();
    assert_eq!(shared.transport(), Transport::SharedDevice);
    assert_eq!(host.transport(), Transport::HostStaged);
    for m in [host, shared] {
        let r = m.ranks();
        let full: Vec<LocalTensor> = (0..3)
            .map(|k| r[k].upload(&[5, 2], &[1.0; 10]).unwrap())
            .collect();
        let uneven: Vec<LocalTensor> = (0..3)
            .map(|k| {
                r[k].upload(&[2 - k.min(2), 4], &vec![0.0; (2 - k.min(2)) * 4])
                    .unwrap()
            })
            .collect(); // 2, 1, 0 rows of 4: 32 + 16 + 0 bytes
        comm::all_reduce(&m, &full, ReduceOp::Sum).unwrap();
        comm::all_reduce(&m, &full[2..], ReduceOp::Max).unwrap(); // world size 1 counts
        comm::all_gather(&m, &uneven, 0).unwrap();
        comm::reduce_scatter(&m, &full, 1, ReduceOp::Sum).unwrap();
        comm::broadcast(&m, &full[1], r).unwrap();
        comm::scatter(&m, &full[0], &r[..2], 0).unwrap();
        comm::all_to_all(&m, &full, 0, 1).unwrap();
        // Errors count nothing.
        assert!(comm::all_reduce(&m, &uneven, ReduceOp::Sum).is_err());
        assert!(comm::all_gather(&m, &full, 3).is_err());
        let stats = m.comm_stats();
        let c = |calls, bytes| CommCount { calls, bytes };
        assert_eq!(stats[&Collective::AllReduce], c(2, 3 * 40 + 40));
        assert_eq!(stats[&Collective::AllGather], c(1, 48));
        assert_eq!(stats[&Collective::ReduceScatter], c(1, 120));
        assert_eq!(stats[&Collective::Broadcast], c(1, 40));
        assert_eq!(stats[&Collective::Scatter], c(1, 40));
        assert_eq!(stats[&Collective::AllToAll], c(1, 120));
        assert_eq!(stats.len(), 6, "{stats:?}");
        assert_eq!(m.comm_calls(Collective::AllReduce), 2);
        m.reset_comm_stats();
        assert!(m.comm_stats().is_empty());
        eprintln!("[comm] counters exact on {:?}", m.transport());
    }
}

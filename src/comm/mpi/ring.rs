//! A ring step over MPI: every rank sends its tensor to rank `(r + 1) mod P`
//! and receives rank `(r − 1) mod P`'s. The shapes are agreed first (so a
//! ragged chunk's size is known and a missing rank is named), then the
//! transfer is posted and left in flight until `finish`.

use super::header::{Header, agree};
use super::p2p::{Traffic, tag};
use super::peers::Peers;
use crate::device::{LocalTensor, Mesh, download_many};
use crate::error::{Error, Result};

/// A ring step in flight over MPI.
pub(crate) struct MpiShift {
    traffic: Traffic,
    like: LocalTensor,
    shape: Vec<usize>,
}

impl MpiShift {
    /// Post this rank's send and receive; returns the step and the bytes all
    /// ranks send.
    pub(crate) fn start(mesh: &Mesh, shards: &[LocalTensor]) -> Result<(MpiShift, u64)> {
        const OP: &str = "ring_shift";
        let [x] = shards else {
            return Err(Error::invalid(
                OP,
                "a multi-process mesh shifts over all its ranks: pass this process's one shard",
            ));
        };
        let (peers, seq) = Peers::of(mesh, OP)?;
        let (me, p) = (peers.me, peers.p());
        let all = agree(&peers, OP, seq, &Header::new(OP, x.dtype(), x.shape()))?;
        let prev = (me + p - 1) % p;
        let raw = download_many(&[x])?;
        let words: Vec<u32> = raw
            .first()
            .map(|b| bytemuck::pod_collect_to_vec(b))
            .unwrap_or_default();
        let mut traffic = peers.traffic(OP)?;
        traffic.recv(peers.world(prev), tag(seq, 1), all[prev].words())?;
        traffic.send(peers.world((me + 1) % p), tag(seq, 1), words.into())?;
        let total = all.iter().map(Header::bytes).sum();
        let shift = MpiShift {
            traffic,
            like: x.clone(),
            shape: all[prev].shape.clone(),
        };
        Ok((shift, total))
    }

    /// Wait for the step; the previous rank's tensor, now on this rank.
    pub(crate) fn finish(self) -> Result<Vec<LocalTensor>> {
        let got = self.traffic.wait()?;
        let words = got.first().map(Vec::as_slice).unwrap_or_default();
        let t = self.like.rank().upload_bytes(
            "ring_shift",
            &self.shape,
            self.like.dtype(),
            bytemuck::cast_slice(words),
        )?;
        Ok(vec![t])
    }
}

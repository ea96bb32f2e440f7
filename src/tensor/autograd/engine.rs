//! The backward pass: from a tensor's node, every reachable node in reverse
//! creation order (an operation runs after everything that used its output),
//! each VJP once, gradients summed where a value fans out. Leaves' gradients
//! are added to their slots only once every VJP has succeeded, so a failed
//! pass leaves the parameters' gradients as they were.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::accumulate;
use super::mode::NoGradGuard;
use super::tape::{GradSlot, Node};
use crate::element::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::tensor::{DTensor, Placement};

const OP: &str = "DTensor::backward";

/// Every node reachable from `root`, latest first.
fn reachable(root: &Arc<Node>) -> Vec<Arc<Node>> {
    let mut seen = HashSet::new();
    let mut stack = vec![root.clone()];
    let mut out = Vec::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(n.seq) {
            continue;
        }
        stack.extend(n.parents.iter().flatten().cloned());
        out.push(n);
    }
    out.sort_by_key(|n| std::cmp::Reverse(n.seq));
    out
}

/// A gradient as its node keeps it: in the node's dtype, except partial sums,
/// which stay as computed (f32) until a reduction rounds them once, and a
/// cast's, which its input rounds. A leaf
/// (a parameter) keeps its gradient placed like its value, so a partial
/// gradient of a replicated parameter is reduced there, once.
fn as_node_keeps(node: &Node, g: DTensor) -> Result<DTensor> {
    let partial = matches!(g.placement(), Placement::Partial(_));
    if node.slot.is_some() && g.placement() != node.placement {
        // Exactly the value's placement (a Partial leaf's gradient too), so
        // later passes add into it shard by shard.
        let g = if g.mesh().size() == 1 {
            g.with_shards(g.shards().to_vec(), g.shape().to_vec(), node.placement)
        } else {
            g.move_to(node.placement, 1)?
        };
        return as_node_keeps(node, g);
    }
    // A cast hands its gradient on as it came: its input keeps it in its own
    // dtype, so an f32 master's dW (computed in f32) passes the per-call f16
    // copy of the weight unrounded, as the layers' backward kept it.
    let cast = node.op == "DTensor::cast";
    if g.dtype() == node.dtype || partial || cast || node.dtype == DType::I32 {
        return Ok(g);
    }
    g.cast(node.dtype)
}

fn add_to(pending: &mut HashMap<u64, DTensor>, node: &Node, g: DTensor) -> Result<()> {
    let g = as_node_keeps(node, g)?;
    let sum = match pending.remove(&node.seq) {
        None => g,
        Some(old) if accumulate::add_in_place(&old, &g)? => old,
        Some(old) => accumulate::sum(&old, &g)?,
    };
    pending.insert(node.seq, sum);
    Ok(())
}

/// Runs the backward pass from `root` (tracked) with `seed` as its gradient.
pub(crate) fn run(root: &Arc<Node>, seed: DTensor) -> Result<()> {
    let _off = NoGradGuard::new();
    let order = reachable(root);
    if root.slot.is_none() && root.vjp.lock().map(|v| v.is_none()).unwrap_or(true) {
        return Err(Error::invalid(
            OP,
            "backward already ran through this graph (its saved tensors are freed): run the \
             forward again, then backward once",
        ));
    }
    let mut pending: HashMap<u64, DTensor> = HashMap::new();
    add_to(&mut pending, root, seed)?;
    let mut leaves: Vec<(GradSlot, DTensor)> = Vec::new();
    for node in &order {
        let Some(g) = pending.remove(&node.seq) else {
            continue;
        };
        if let Some(slot) = &node.slot {
            leaves.push((slot.clone(), g));
            continue;
        }
        let vjp = node.take_vjp().ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "backward already ran through `{}` (its saved tensors are freed): run the \
                     forward again",
                    node.op
                ),
            )
        })?;
        let grads = vjp(&g)?;
        if grads.len() != node.parents.len() {
            return Err(Error::invalid(
                OP,
                format!(
                    "`{}` gave {} gradients for {} inputs",
                    node.op,
                    grads.len(),
                    node.parents.len()
                ),
            ));
        }
        for (parent, g) in node.parents.iter().zip(grads) {
            if let (Some(parent), Some(g)) = (parent, g) {
                add_to(&mut pending, parent, g)?;
            }
        }
    }
    for (slot, g) in leaves {
        slot.accumulate(g)?;
    }
    Ok(())
}

/// Ones shaped and placed like `t` (the seed of a scalar loss). A `Partial`
/// tensor's gradient is the same on every rank, so `Replicate`.
pub(crate) fn ones_like(t: &DTensor) -> Result<DTensor> {
    let placement = match t.placement() {
        Placement::Partial(ReduceOp::Sum) => Placement::Replicate,
        Placement::Partial(ReduceOp::Max) => {
            return Err(Error::invalid(
                OP,
                "the loss is a Partial(Max) tensor: redistribute it to Replicate first",
            ));
        }
        p => p,
    };
    let n: usize = t.shape().iter().product();
    let x = DTensor::from_host(t.mesh(), t.shape(), &vec![1.0; n], placement)?;
    x.cast(t.dtype())
}

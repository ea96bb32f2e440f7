#!/usr/bin/env bash
# Two "hosts" on this machine, for the MPI collectives bench: network
# namespaces wtp-a and wtp-b joined by a veth pair (10.77.0.1 / 10.77.0.2),
# rate-limited with tc token buckets, MPI over TCP between them. mpirun runs
# inside wtp-a and starts one daemon per "host" through `ip netns exec`
# (its rsh agent), so every byte between ranks crosses the veth; nothing
# leaves the namespaces. The script removes them when it ends, however it
# ends, and each run has a time limit. Ranks yield the core while they wait
# (mpi_yield_when_idle): on 2 cores, busy-polling ranks and their daemons
# turned a 15 us veth round trip into 8 ms collectives.
#
# Needs root (ip netns, tc), Open MPI, and the bench built with --features
# mpi. Usage: sudo benches/netns.sh [NP]   (NP = 2 or 4 ranks, half per host)
# RATES (default "100mbit 1gbit 10gbit") are the tc tbf rates; a run without a limit
# comes first; WGPU_TP_BENCH_GPT2=1 adds GPT-2 124M's step to every run (the
# projection needs it). Outputs go to target/netns/, then the α–β projection
# (`mpi_collectives --project`) prints from them.
set -euo pipefail
cd "$(dirname "$0")/.."

np="${1:-2}"
rates="${RATES:-100mbit 1gbit 10gbit}"
limit_s="${LIMIT_S:-900}"
a=wtp-a
b=wtp-b
out=target/netns
agent="$(mktemp)"

cleanup() {
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
    rm -rf "/etc/netns/$a" "/etc/netns/$b" "$agent"
}
trap cleanup EXIT INT TERM

if [ "$(id -u)" -ne 0 ]; then
    echo "needs root: ip netns and tc" >&2
    exit 1
fi
cleanup # leftovers of an interrupted run

exe="$(cargo bench --features mpi --bench mpi_collectives --no-run 2>&1 \
    | grep -o 'target/release/deps/mpi_collectives-[0-9a-f]*' | head -n 1)"
[ -x "$exe" ] || { echo "could not build the bench" >&2; exit 1; }

ip netns add "$a"
ip netns add "$b"
ip link add veth-wtp-a netns "$a" type veth peer name veth-wtp-b netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev veth-wtp-a
ip -n "$b" addr add 10.77.0.2/24 dev veth-wtp-b
for ns in "$a" "$b"; do
    ip -n "$ns" link set lo up
    mkdir -p "/etc/netns/$ns" # ip netns exec binds it over /etc/hosts
    printf '127.0.0.1 localhost\n10.77.0.1 %s\n10.77.0.2 %s\n' "$a" "$b" > "/etc/netns/$ns/hosts"
done
ip -n "$a" link set veth-wtp-a up
ip -n "$b" link set veth-wtp-b up

# mpirun's rsh agent: start the command inside the namespace named as host.
printf '#!/bin/sh\nhost="$1"; shift\nexec ip netns exec "$host" sh -c "$*"\n' > "$agent"
chmod +x "$agent"

shape() {
    local rate="$1"
    for pair in "$a veth-wtp-a" "$b veth-wtp-b"; do
        set -- $pair
        if [ "$rate" = unlimited ]; then
            tc -n "$1" qdisc del dev "$2" root 2>/dev/null || true
        else
            # A bucket of about one kernel tick of the rate (tbf's minimum at
            # HZ = 250): bigger ones let whole messages through unthrottled.
            local burst
            case "$rate" in
                *mbit) burst=64kb ;;
                1gbit) burst=640kb ;;
                *) burst=6mb ;;
            esac
            tc -n "$1" qdisc replace dev "$2" root tbf rate "$rate" burst "$burst" latency 100ms
        fi
    done
}

mkdir -p "$out"
per_host=$((np / 2))
files=()
for rate in unlimited $rates; do
    shape "$rate"
    before="$(ip -n "$a" -s link show veth-wtp-a | awk '/TX:/ { getline; print $1 }')"
    echo "==> np=$np across $a and $b, link $rate"
    gpt2=()
    [ -n "${WGPU_TP_BENCH_GPT2:-}" ] && gpt2=(-x WGPU_TP_BENCH_GPT2)
    timeout "$limit_s" ip netns exec "$a" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        LP_NUM_THREADS=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" \
        mpirun -np "$np" --host "${HOSTS:-$a:$per_host,$b:$per_host}" ${MPI_EXTRA:-} \
        --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 --mca mpi_yield_when_idle 1 \
        --mca oob_tcp_if_include 10.77.0.0/24 \
        --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include 10.77.0.0/24 \
        -x LP_NUM_THREADS -x XDG_RUNTIME_DIR -x OMPI_ALLOW_RUN_AS_ROOT -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
        -x WGPU_TP_BENCH_MAX_MIB "${gpt2[@]}" \
        "$PWD/$exe" | tee "$out/np$np-$rate.txt"
    after="$(ip -n "$a" -s link show veth-wtp-a | awk '/TX:/ { getline; print $1 }')"
    echo "    veth-wtp-a sent $((after - before)) bytes"
    files+=("$rate=$out/np$np-$rate.txt")
done
"$exe" --project "${files[@]}" | tee "$out/np$np-projection.txt"

#!/usr/bin/env bash
# Builds the browser demo into examples/web/pkg: the example for wasm32, then
# wasm-bindgen's JS glue. Run from anywhere: `examples/web/build.sh`.
# Serve it with `python3 examples/web/serve.py` and open http://localhost:8000.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

# The CLI must speak the same protocol as the wasm-bindgen crate in Cargo.lock.
want="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
if ! command -v wasm-bindgen >/dev/null; then
    echo "wasm-bindgen CLI not found: cargo install wasm-bindgen-cli --version $want" >&2
    exit 1
fi
have="$(wasm-bindgen --version | awk '{ print $2 }')"
if [ "$have" != "$want" ]; then
    echo "wasm-bindgen CLI is $have but Cargo.lock has $want: cargo install wasm-bindgen-cli --version $want" >&2
    exit 1
fi
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    echo "missing target: rustup target add wasm32-unknown-unknown" >&2
    exit 1
fi

cargo build --release --example web --target wasm32-unknown-unknown
target_dir="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}"
wasm-bindgen --target web --no-typescript --out-dir "$here/pkg" \
    "$target_dir/wasm32-unknown-unknown/release/examples/web.wasm"
echo "built $here/pkg ($(du -sh "$here/pkg" | cut -f1)); serve with: python3 examples/web/serve.py"

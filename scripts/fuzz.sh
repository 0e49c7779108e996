#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, through cargo fuzz) of every decoder a
# peer, a client or the disk can reach: the targets of crates/coterie-fuzz.
#
# Each target starts from its committed corpus (fuzz/corpus/<target>/) plus
# the seeds crates/coterie-fuzz writes, runs for SECONDS, and the corpus is
# minimised again afterwards (cargo fuzz cmin), so that what the run found
# can be committed. A crash stops the script: the input is copied to
# fuzz/regressions/<target>/, where `cargo test -p coterie-fuzz` replays it
# from then on, and the replay command is printed.
#
# Needs the nightly toolchain (libFuzzer's instrumentation) and cargo-fuzz;
# the script installs cargo-fuzz if it is missing. The tests in CI run every
# target over the same corpus without either.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#        (default: 60 seconds, every target)
# Environment:
#   FUZZ_JOBS   parallel fuzzing processes per target (default 1)
#   NO_CMIN=1   keep the corpus as the run left it
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(peer handshake client witness state_file)
JOBS="${FUZZ_JOBS:-1}"

say() { printf '[fuzz] %s\n' "$*"; }
die() { printf '[fuzz] error: %s\n' "$*" >&2; exit 1; }

rustup toolchain list 2>/dev/null | grep -q '^nightly' \
    || { say "installing the nightly toolchain"; rustup toolchain install nightly --profile minimal; }
command -v cargo-fuzz >/dev/null || { say "installing cargo-fuzz"; cargo install cargo-fuzz; }

say "writing the seeds"
cargo run -q -p coterie-fuzz --bin fuzz-seeds -- "$ROOT/fuzz/corpus"

say "building the targets (nightly, libFuzzer, debug assertions on)"
cargo +nightly fuzz build -O --debug-assertions >/dev/null

summary=()
TMPDIR_FUZZ="$(mktemp -d)"
trap 'rm -rf "$TMPDIR_FUZZ"' EXIT
for t in "${TARGETS[@]}"; do
    mkdir -p "$ROOT/fuzz/artifacts/$t"
    corpus="$ROOT/fuzz/corpus/$t"
    log="$(mktemp)"
    say "$t: ${SECONDS_PER_TARGET}s from $(find "$corpus" -type f | wc -l) inputs"
    rc=0
    parallel=()
    [ "$JOBS" -gt 1 ] && parallel=(-jobs="$JOBS" -workers="$JOBS")
    (cd "$TMPDIR_FUZZ" && cargo +nightly fuzz run --fuzz-dir "$ROOT/fuzz" -O --debug-assertions \
        "$t" "$corpus" -- -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
        -artifact_prefix="$ROOT/fuzz/artifacts/$t/" -close_fd_mask=3 "${parallel[@]}") \
        >"$log" 2>&1 || rc=$?
    # With -jobs, each worker logs to fuzz-N.log in the working directory.
    cat "$TMPDIR_FUZZ"/fuzz-*.log >>"$log" 2>/dev/null || true
    rm -f "$TMPDIR_FUZZ"/fuzz-*.log
    # A run cut short (a crash, an out-of-memory) prints no final stats:
    # a grep that finds nothing must not end the script before it says so.
    execs="$({ grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" || true; } | awk '{s += $2} END {print s + 0}')"
    rate="$({ grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" || true; } | awk '{s += $2} END {print s + 0}')"
    cov="$({ grep -oE 'cov: [0-9]+' "$log" || true; } | tail -n 1 | awk '{print $2}')"
    if [ "$rc" -ne 0 ]; then
        tail -n 40 "$log" >&2
        mkdir -p "$ROOT/fuzz/regressions/$t"
        for a in "$ROOT"/fuzz/artifacts/"$t"/*; do
            [ -f "$a" ] || continue
            cp "$a" "$ROOT/fuzz/regressions/$t/"
            say "saved $(basename "$a") to fuzz/regressions/$t/; replay: cargo +nightly fuzz run $t $a"
        done
        die "$t failed after $execs executions"
    fi
    rm -f "$log"
    if [ "${NO_CMIN:-0}" != 1 ]; then
        cargo +nightly fuzz cmin -O --debug-assertions "$t" "$corpus" >/dev/null 2>&1 \
            || say "$t: cmin failed; the corpus is left as the run grew it"
    fi
    line="$(printf '%-11s %12s executions  %8s/s  coverage %6s  corpus %5s' \
        "$t" "$execs" "$rate" "${cov:-?}" "$(find "$corpus" -type f | wc -l)")"
    say "$line"
    summary+=("$line")
done

echo
echo "fuzzing: ${SECONDS_PER_TARGET}s per target, no crash"
printf '  %s\n' "${summary[@]}"

#!/bin/sh
# The fault suite's SIGKILL test at soak length: more kills than CI affords, several seeds.
# usage: bench/faults_soak.sh [ROUNDS_PER_KIND] [SEEDS...]   (defaults: 100 rounds, seeds 23 24 25)
# Each seed runs tests/store/test_sigkill.py with FAULT_ROUNDS kills during ingest and as many
# during builds seen running, and prints its figures; the script fails on the first lost write.
set -eu
cd "$(dirname "$0")/.."
rounds="${1:-100}"
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- 23 24 25
for seed in "$@"; do
  FAULT_ROUNDS="$rounds" FAULT_SEED="$seed" .venv/bin/pytest -q -s tests/store/test_sigkill.py | grep -E "sigkill:|passed|failed"
done

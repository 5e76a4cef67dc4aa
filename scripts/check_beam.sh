#!/usr/bin/env bash
# The [beam] extra in a venv of its own, and its test (tests/beam): what CI cannot run.
#
#   bash scripts/check_beam.sh              # venv .venv-beam (made if missing), then the test
#   BEAM_VENV=/tmp/vb bash scripts/check_beam.sh
#   bash scripts/check_beam.sh --bench ROWS # also: rows/s of beam_predict (DirectRunner, 2
#                                           # workers) and of tfapp predict, one after the other
#
# Why its own venv: apache-beam 2.77 (the newest) needs protobuf<7 and pyarrow<26, and the
# main venv (`pip install -e ".[cpu,test]"`) holds protobuf 7.36 and pyarrow 26; pip
# cannot put both in one venv. Here pip picks protobuf 6.33 and pyarrow 25 and leaves
# TensorFlow, tf-keras, tensorflow-text and numpy at the main venv's versions; the script
# prints those versions and `pip check`. docs/scale_out.md has the numbers it printed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${BEAM_VENV:-.venv-beam}"
bench=""
if [ "${1:-}" = "--bench" ]; then bench="${2:?--bench ROWS}"; fi

if [ ! -x "$venv/bin/python" ]; then
    start=$(date +%s)
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -e ".[cpu,test,beam]"
    echo "check_beam: installed .[cpu,test,beam] into $venv in $(( $(date +%s) - start )) s"
fi
"$venv/bin/pip" check
"$venv/bin/python" - <<'EOF'
import importlib.metadata as md
print("check_beam:", ", ".join(f"{d} {md.version(d)}" for d in (
    "apache-beam", "tensorflow", "tf-keras", "tensorflow-text", "numpy", "protobuf", "pyarrow")))
EOF
# tests/beam, and the tests of what reads and writes through pyarrow (25 here, 26 in the
# main venv: pyproject allows both for this venv's sake).
TFAPP_BEAM_TESTS=1 "$venv/bin/pytest" -q -n 0 -p no:cacheprovider tests/beam \
    tests/test_parquet.py tests/test_scoring.py tests/test_beam_extra.py

[ -z "$bench" ] && exit 0
# rows/s of the same file through both commands, one after the other (not side by side:
# on a small machine they would share its cores). A run of configs/classifier_local.yaml
# (the tiny BERT) scores the demo reviews repeated to ROWS rows.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/python" -m tfapp.train --config configs/classifier_local.yaml -q \
    output_dir="$work/runs" >/dev/null
run=$(ls -d "$work"/runs/*/ | head -1)
"$venv/bin/python" - "$work/in.csv" "$bench" <<'EOF'
import csv, itertools, sys
from tfapp.demo import DEMO_DIR
with (DEMO_DIR / "reviews_train.csv").open() as fh:
    texts = [r["text"] for r in csv.DictReader(fh)]
with open(sys.argv[1], "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["id", "text"])
    w.writerows((i, t) for i, t in zip(range(int(sys.argv[2])), itertools.cycle(texts)))
EOF
timed() {  # seconds of a command, its output kept in $work/last.log
    local s e; s=$(date +%s.%N); "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log"; exit 1; }
    e=$(date +%s.%N); python3 -c "print(f'{$e - $s:.1f}')"
}
t_beam=$(timed "$venv/bin/python" -m tfapp.beam_predict --model "$run" --data "$work/in.csv" \
    --keep id --output "$work/beam/preds" --direct_num_workers 2 \
    --direct_running_mode multi_processing)
t_pred=$(timed "$venv/bin/python" -m tfapp.predict --model "$run" --data "$work/in.csv" \
    --keep id --output "$work/predict.jsonl" -q)
python3 -c "r=$bench; print(f'check_beam: {r} rows: beam_predict (DirectRunner, 2 workers, "\
"multi_processing) $t_beam s = {r/$t_beam:.0f} rows/s; tfapp predict $t_pred s = "\
"{r/$t_pred:.0f} rows/s (wall time, process start-up and model load included)')"

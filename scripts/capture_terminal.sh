#!/bin/sh
# Capture what a person sees: audit, audit --steps, diff, check, chips and audit --group-by source
# in a real terminal (tmux) at 80 and 200 columns, written to tests/terminal/<command>-<columns>.txt
# (tests/test_terminal.py reads them).
# Needs tmux (apt-get install tmux) and the project's .venv.
# Output longer than the pane is taken from its scrollback (capture-pane -S -).
set -e
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=tests/terminal
mkdir -p "$OUT"
CHIP=$(mktemp --suffix=.toml)
printf 'name = "testcpu"\n[peak_flops]\nf32 = 1.0e11\nbf16 = 1.0e11\n[memory]\nhbm_bw = 2.0e10\n' > "$CHIP"
BASE=$(mktemp --suffix=.json)
# An empty cache: no calibrated `cpu` chip of this machine in `chips`.
CACHE=$(mktemp -d)
PYTHONPATH=$ROOT .venv/bin/hlogap audit tests/fixtures/mlp --chip "$CHIP" --format json --top 0 -o "$BASE"
for cols in 80 200; do
  for cmd in audit steps diff check chips groups; do
    case $cmd in
      audit) args="audit tests/fixtures/mlp_train --chip $CHIP --top 8" ;;
      chips) args="chips" ;;
      groups) args="audit tests/fixtures/mlp_train --chip $CHIP --top 4 --group-by source" ;;
      steps) args="audit tests/fixtures/sharded_train --chip $CHIP --top 4 --steps" ;;
      diff) args="diff tests/fixtures/mlp tests/fixtures/mlp_shifted --chip $CHIP" ;;
      check) args="check tests/fixtures/mlp_rerun --baseline $BASE --chip $CHIP" ;;
    esac
    tmux kill-session -t capture 2>/dev/null || true
    # This checkout's code, whichever checkout the .venv installed.
    tmux new-session -d -s capture -x "$cols" -y 60 \
      "cd $ROOT && HLOGAP_CACHE_DIR=$CACHE PYTHONPATH=$ROOT .venv/bin/hlogap $args; sleep 30"
    sleep 4
    # The temporary paths differ per run: shown as <chip.toml> and <baseline.json>.
    tmux capture-pane -t capture -p -S - | sed -e "s#$CHIP#<chip.toml>#g" -e "s#$BASE#<baseline.json>#g" \
      | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' > "$OUT/$cmd-$cols.txt"
    tmux kill-session -t capture
  done
done
rm -f "$CHIP" "$BASE"
rm -rf "$CACHE"

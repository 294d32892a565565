#!/usr/bin/env bash
# bench/gpu_run.sh for runs longer than one device call: start it detached, then poll it.
#
#   bash bench/gpu_background.sh start statistical scale   # starts, then waits like `wait`
#   bash bench/gpu_background.sh wait                      # waits up to ~9 minutes more
#
# The detached run (setsid) outlives the call while the machine stays held; each call copies
# what it has so far into $OUT as one archive (bg.tgz) plus the log tail.
set -u
BG=/tmp/onlinesm-bg
case ${1:-wait} in
  start)
    shift
    rm -rf "$BG"; mkdir -p "$BG/out"
    OUT=$BG/out setsid nohup bash -c "bash bench/gpu_run.sh $*; touch $BG/done" > "$BG/log" 2>&1 < /dev/null &
    echo "started: gpu_run.sh $*" ;;
esac
start=$SECONDS
while [ ! -e "$BG/done" ] && [ $((SECONDS - start)) -lt ${WAIT_S:-540} ]; do sleep 5; done
[ -e "$BG/done" ] && echo "== finished" || echo "== still running after $((SECONDS - start)) s of waiting"
tail -40 "$BG/log"
tar czf "${OUT:-/tmp}/bg.tgz" -C "$BG" out log 2>/dev/null

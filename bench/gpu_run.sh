#!/usr/bin/env bash
# One call on a lent GPU machine: the runs a round of work must confirm there, in phases.
#
#   bash bench/gpu_run.sh checks third suite speed      # OUT=... collects the results
#
# checks: the default `onlinesm check` of each built-in kernel from a cold Triton cache (wall
#         time, compile count); third: bench/third_party.py; suite: bench/gpu_suite.py;
#         speed: bench/compile_time.py speed on this tree (and on .xfer/old when present);
#         scale: the thorough matrix on 1 and 2 GPUs (bench/scale.py);
#         statistical: bench/gpu_statistical.py, false alarms of the statistical tier (20 seeds);
#         tune: the softmax launch variants side by side (bench/softmax.py --tune; TUNE_NS the
#         lengths, TUNE_DTYPES the dtypes, TUNE_ONLY words that pick variants by name), each
#         checked for correctness in the same run; tune3: the tune three times and each
#         candidate's median (bench/medians.py); softmax3: three bench runs (medians;
#         SOFTMAX_NS, SOFTMAX_DTYPES choose the grid);
#         sweep: bench/softmax.py on SWEEP_K (40) row lengths drawn at random from 1k-64k
#         (--random, SWEEP_SEED, SWEEP_DTYPES), one run, and those below 90% of copy;
#         kernels: the kernel test files compiled on the GPU (SOFTMAX_TESTS: a -k filter), each
#         attention variant too;
#         attention: bench/attention.py with ATTN_ARGS (e.g. --tiles to time pinned configs);
#         gluon: the Gluon attention candidates (bench/gluon_attention.py): their GPU tests
#         (GLUON_TEST_S the limit), their bench against SDPA and onlinesm, and `onlinesm
#         check` on each; gluon_check: `onlinesm check` of onlinesm.kernels:attention on the
#         calls the Gluon kernel takes (S = 4096, D = GLUON_CHECK_D, 128 by default; ~450 s);
#         gluon_tune: the warp-specialized kernel's launch candidates
#         (bench/gluon_attention.py --bench-ws; GLUON_TUNE_ARGS e.g. "--seqs 4096 --dims 64");
#         ncu: Nsight Compute on the launches that miss their speed targets (bench/ncu_targets.py;
#         NCU_CASES: an extended regex of the cases to run, all by default), with each
#         instruction's samples (bench/ncu_source.py);
#         ab: a kernel change timed against the code before it, in the same call: bench/softmax.py
#         on this tree and on each .xfer/<name>/ (another commit's src/ and strategies/, made
#         with `mkdir -p .xfer/base && git archive HEAD src strategies | tar -x -C .xfer/base`;
#         untracked, so it travels with the tree), interleaved AB_RUNS times (3), then each
#         tree's medians (AB_NS, AB_DTYPES; AB_ONLY: also the --tune candidates so named);
#         attention_ab: the same for attention: bench/attention.py with ATTN_ARGS on this tree
#         and each .xfer/<name>/, interleaved AB_RUNS times (3), then each tree's medians of
#         x cuDNN (bench/attention.py --medians);
#         sanitize: kernel tests under compute-sanitizer (SANITIZE_TESTS, SANITIZE_TOOL).
# A run longer than one call's limit goes through bench/gpu_background.sh.
# The machine has torch and triton but not onlinesm: it runs from src/ (with strategies/
# linked in as onlinesm.strategies); wheels under .whl/ (Liger) are installed first.
set -u
export PYTHONUNBUFFERED=1
X=$(pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
link() { [ -e "$1/src/onlinesm/strategies" ] || ln -s "$1/strategies" "$1/src/onlinesm/strategies"; }
# ab_runs ROOT LIMIT COMMAND...: COMMAND (a bench writing into $OUT) on this tree and on each
# .xfer/<name>/ in turn, AB_RUNS times (3), each under LIMIT seconds, into ROOT/<tree>/run<i>
# (the tree of the call is "this"); its output in ROOT_<tree>_<i>.log.
ab_runs() {
  local root=$1 limit=$2 trees="$X" d t name i
  shift 2
  for d in "$X"/.xfer/*/src; do [ -d "$d" ] && trees="$trees $(dirname "$d")"; done
  rm -rf "$root"
  for i in $(seq 1 "${AB_RUNS:-3}"); do
    for t in $trees; do
      name=$(basename "$t"); [ "$t" = "$X" ] && name=this
      link "$t"
      PYTHONPATH=$t/src:/tmp/site OUT=$root/$name/run$i timeout "$limit" "$@" > "${root}_${name}_$i.log" 2>&1
      echo "== $(basename "$root") $name run $i: rc=$? $((SECONDS - start)) s"
    done
  done
}
link "$X"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$X/src:/tmp/site
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), 'x', torch.cuda.device_count())"
for phase in "$@"; do
  start=$SECONDS
  case $phase in
    checks)
      for op in softmax attention; do
        ( cd /tmp && TRITON_CACHE_DIR=/tmp/tc_check_$op timeout 240 python3 -m onlinesm check \
            onlinesm.kernels:$op --op $op --seed 0 -q ) > "$OUT/check_$op.txt" 2>&1
        echo "== check $op: rc=$? $((SECONDS - start)) s"; grep -a "onlinesm check\|compiles:" "$OUT/check_$op.txt"
        start=$SECONDS
      done ;;
    third)
      timeout 450 python3 bench/third_party.py --out "$OUT" > "$OUT/third_party.log" 2>&1
      echo "== third party: rc=$? $((SECONDS - start)) s"; grep -a "^[A-Za-z].* s$" "$OUT/third_party.log" ;;
    suite)
      ONLINESM_PIN_CONFIGS=1 timeout 240 python3 bench/gpu_suite.py --out "$OUT/suite" > "$OUT/gpu_suite.log" 2>&1
      echo "== gpu suite: rc=$? $((SECONDS - start)) s"; tail -4 "$OUT/gpu_suite.log" ;;
    speed)
      ( cd /tmp && timeout 150 python3 "$X/bench/compile_time.py" speed --label new ) > "$OUT/speed_new.txt" 2>&1
      echo "== speed (this tree): rc=$?"; grep -a "RESULT" "$OUT/speed_new.txt" | tail -1
      if [ -d "$X/.xfer/old/src" ]; then
        link "$X/.xfer/old"
        ( cd /tmp && PYTHONPATH=$X/.xfer/old/src timeout 150 python3 "$X/bench/compile_time.py" speed --label old ) > "$OUT/speed_old.txt" 2>&1
        echo "== speed (.xfer/old): rc=$?"; grep -a "RESULT" "$OUT/speed_old.txt" | tail -1
      fi ;;
    statistical)
      timeout 900 python3 bench/gpu_statistical.py --seeds 20 --budget 800 --out "$OUT" > "$OUT/statistical.log" 2>&1
      echo "== statistical: rc=$? $((SECONDS - start)) s"; tail -12 "$OUT/statistical.log" ;;
    scale)
      timeout 1500 python3 bench/scale.py --out "$OUT" ${SCALE_ARGS:-} > "$OUT/scale.log" 2>&1
      echo "== scale: rc=$? $((SECONDS - start)) s"; tail -15 "$OUT/scale.log" ;;
    tune)
      timeout 300 python3 bench/softmax.py --tune --only "${TUNE_ONLY:-}" --dtypes ${TUNE_DTYPES:-bfloat16,float32} --gb ${SOFTMAX_GB:-0.5} \
        --ns ${TUNE_NS:-1000,3000,4096,12288,32768,49152,65536,131072,262144} --budget-s ${SOFTMAX_BUDGET:-150} > "$OUT/softmax_tune.log" 2>&1
      echo "== softmax tune: rc=$? $((SECONDS - start)) s"; grep -a "^| " "$OUT/softmax_tune.log" | tail -70 ;;
    tune3)
      # the tune three times (TUNE_* as for tune; each run needs about a third of tune's
      # time once compiled), then each candidate's median % of copy (bench/medians.py)
      for i in 1 2 3; do
        OUT=$OUT/tune_run$i timeout ${TUNE3_RUN_S:-150} python3 bench/softmax.py --tune --only "${TUNE_ONLY:-}" \
          --dtypes ${TUNE_DTYPES:-bfloat16,float32} --gb ${SOFTMAX_GB:-0.5} --ns ${TUNE_NS:-21000,50257} \
          > "$OUT/tune_run$i.log" 2>&1
        echo "== softmax tune run $i: rc=$? $((SECONDS - start)) s"
      done
      python3 bench/medians.py --only "${TUNE_ONLY:-}" "$OUT"/tune_run*/softmax.json | tee "$OUT/tune_medians.md" ;;
    softmax3)
      for i in 1 2 3; do
        OUT=$OUT/softmax_run$i timeout 120 python3 bench/softmax.py --dtypes ${SOFTMAX_DTYPES:-bfloat16,float32} --gb 0.5 \
          --ns ${SOFTMAX_NS:-1000,3000,12288,49152} > "$OUT/softmax_run$i.log" 2>&1
        echo "== softmax run $i: rc=$? $((SECONDS - start)) s"; grep -a "^| [bf]" "$OUT/softmax_run$i.log" | head -30
      done ;;
    sweep)
      timeout ${SWEEP_S:-420} python3 bench/softmax.py --random ${SWEEP_K:-40} --seed ${SWEEP_SEED:-0} \
        --dtypes ${SWEEP_DTYPES:-bfloat16,float32} --gb 0.5 > "$OUT/sweep.log" 2>&1
      echo "== softmax sweep: rc=$? $((SECONDS - start)) s"; grep -a "^# --random\|^# below" "$OUT/sweep.log" ;;
    kernels)
      timeout 420 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernel_softmax.py ${SOFTMAX_TESTS:+-k "$SOFTMAX_TESTS"} > "$OUT/kernels_softmax.log" 2>&1
      echo "== softmax kernel tests: rc=$? $((SECONDS - start)) s"; tail -2 "$OUT/kernels_softmax.log"
      for variant in ${ATTN_VARIANTS-base}; do
        start=$SECONDS
        ONLINESM_ATTENTION_VARIANT=$variant timeout 200 python3 -m pytest -q -x -p no:cacheprovider \
          -m "not slow" tests/test_kernel_attention.py > "$OUT/kernels_attention_$variant.log" 2>&1
        echo "== attention kernel tests ($variant): rc=$? $((SECONDS - start)) s"; tail -2 "$OUT/kernels_attention_$variant.log"
      done ;;
    ncu)
      python3 bench/ncu_targets.py --list | grep -E "^(${NCU_CASES:-.*}) " | while read -r case regex; do
        # the third call, inside ncu_targets.py's NVTX range (past compiling and autotuning)
        # (also each instruction's warp-state samples: the source page, summed by
        # bench/ncu_source.py into the cycles a warp spends in each part of the kernel)
        timeout 240 ncu --clock-control none -k "regex:$regex" --nvtx --nvtx-include onlinesm_profile/ \
          --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
          --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
          --section SourceCounters --import-source no -f -o "/tmp/ncu_$case" \
          python3 bench/ncu_targets.py "$case" > "$OUT/ncu_${case}_run.log" 2>&1
        echo "== ncu $case: rc=$? $((SECONDS - start)) s"
        ncu -i "/tmp/ncu_$case.ncu-rep" --page details > "$OUT/ncu_$case.txt" 2>&1
        ncu -i "/tmp/ncu_$case.ncu-rep" --page source --csv --print-source sass 2>/dev/null \
          | gzip > "$OUT/ncu_${case}_source.csv.gz"
        python3 bench/ncu_source.py "$OUT/ncu_${case}_source.csv.gz" --top 10 > "$OUT/ncu_${case}_source.md" 2>&1
        grep -a -E "No kernels were profiled|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Block Size|Grid Size|Dynamic Shared Memory Per|L2 Hit Rate|Duration|Warp Cycles Per Issued|Issue Slots Busy|Stall" "$OUT/ncu_$case.txt" | head -24
        start=$SECONDS
      done ;;
    sanitize)
      # the kernel tests SANITIZE_TESTS picks (a -k filter) under compute-sanitizer's
      # SANITIZE_TOOL (memcheck: out-of-bounds and misaligned global accesses; racecheck:
      # shared-memory hazards), within SANITIZE_S seconds
      cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
      timeout "${SANITIZE_S:-300}" "${cs:-compute-sanitizer}" --tool "${SANITIZE_TOOL:-memcheck}" --error-exitcode 9 \
        --print-limit 20 python3 -m pytest -q -x -p no:cacheprovider tests/test_kernel_softmax.py \
        -k "${SANITIZE_TESTS:-long_rows_every_path and 9000}" > "$OUT/sanitize_${SANITIZE_TOOL:-memcheck}.log" 2>&1
      echo "== compute-sanitizer ${SANITIZE_TOOL:-memcheck}: rc=$? $((SECONDS - start)) s"
      grep -a -E "ERROR SUMMARY|passed|failed|Invalid|Race" "$OUT/sanitize_${SANITIZE_TOOL:-memcheck}.log" | head -12 ;;
    ab)
      tune=(); [ -n "${AB_ONLY:-}" ] && tune=(--tune --only "$AB_ONLY")
      ab_runs /tmp/ab "${AB_RUN_S:-120}" python3 bench/softmax.py ${tune[@]+"${tune[@]}"} \
        --dtypes "${AB_DTYPES:-bfloat16}" --gb 0.5 --ns "${AB_NS:-12289,50257}"
      for d in /tmp/ab/*/; do
        echo "### $(basename "$d")"; python3 bench/medians.py --only "${AB_ONLY:-}" "$d"run*/softmax.json
      done | tee "$OUT/ab_medians.md"
      tar czf "$OUT/ab_logs.tgz" /tmp/ab_*.log /tmp/ab 2>/dev/null ;;
    attention_ab)
      ab_runs /tmp/abattn "${AB_RUN_S:-150}" python3 bench/attention.py ${ATTN_ARGS:-}
      for d in /tmp/abattn/*/; do
        echo "### $(basename "$d")"; python3 bench/attention.py --medians "$d"run*/bench_attention.json
      done | tee "$OUT/attention_ab_medians.md"
      tar czf "$OUT/attention_ab_logs.tgz" /tmp/abattn_*.log /tmp/abattn 2>/dev/null ;;
    gluon)
      # The tests first, with a short limit: a kernel that deadlocks (mbarrier phases) stops
      # the phase there instead of hanging the bench too.
      timeout ${GLUON_TEST_S:-200} python3 -m pytest -q -x -p no:cacheprovider tests/test_kernel_attention.py -k gluon > "$OUT/gluon_tests.log" 2>&1
      rc=$?; echo "== gluon candidate tests: rc=$rc $((SECONDS - start)) s"; tail -2 "$OUT/gluon_tests.log"
      [ $rc -eq 0 ] || continue
      start=$SECONDS
      timeout 200 python3 bench/gluon_attention.py --bench > "$OUT/gluon_bench.log" 2>&1
      echo "== gluon candidate bench: rc=$? $((SECONDS - start)) s"; grep -a "^|" "$OUT/gluon_bench.log"
      for fn in attention attention_ws; do
        start=$SECONDS
        ( cd /tmp && timeout 120 python3 -m onlinesm check "$X/bench/gluon_attention.py:$fn" --op attention \
            --dtypes bfloat16,float16 --head-dims 64,128 --seq-multiple 128 --same-seq --no-mask \
            --max-seq-q 512 --max-seq-k 512 --unsupported "ValueError:gluon candidate" --seed 0 -q ) > "$OUT/gluon_check_$fn.txt" 2>&1
        echo "== onlinesm check of gluon $fn: rc=$? $((SECONDS - start)) s"; head -1 "$OUT/gluon_check_$fn.txt"; tail -2 "$OUT/gluon_check_$fn.txt"
      done ;;
    gluon_check)
      # The built-in attention on calls the Gluon kernel takes (S = 4096, or GLUON_CHECK_MIN_S
      # to GLUON_CHECK_MAX_S, from 256; no mask, Sq == Sk; e.g. GLUON_CHECK_MIN_S=256
      # GLUON_CHECK_MAX_S=896 for the shortest calls it takes): the property suite
      # through attention().
      # Its oracle is float64 on the CPU: about 450 s for the two dtypes.
      ( cd /tmp && timeout 540 python3 -m onlinesm check onlinesm.kernels:attention --op attention \
          --dtypes bfloat16,float16 --head-dims ${GLUON_CHECK_D:-128} --seq-multiple 128 --same-seq --no-mask \
          --min-seq-q ${GLUON_CHECK_MIN_S:-4096} --max-seq-q ${GLUON_CHECK_MAX_S:-4096} --min-seq-k ${GLUON_CHECK_MIN_S:-4096} \
          --max-seq-k ${GLUON_CHECK_MAX_S:-4096} --max-examples 2 --seed 0 -q ) > "$OUT/gluon_check_builtin.txt" 2>&1
      echo "== onlinesm check of onlinesm.kernels:attention (the Gluon kernel on): rc=$? $((SECONDS - start)) s"; head -1 "$OUT/gluon_check_builtin.txt"; tail -2 "$OUT/gluon_check_builtin.txt" ;;
    gluon_tune)
      timeout 300 python3 bench/gluon_attention.py --bench-ws ${GLUON_TUNE_ARGS:-} > "$OUT/gluon_tune.log" 2>&1
      echo "== gluon ws launch candidates: rc=$? $((SECONDS - start)) s"; grep -a "^|" "$OUT/gluon_tune.log" ;;
    attention)
      timeout 560 python3 bench/attention.py ${ATTN_ARGS:-} > "$OUT/attention.log" 2>&1
      echo "== attention: rc=$? $((SECONDS - start)) s"; grep -a "^| [bf]\|^check\|tiles .*Error" "$OUT/attention.log" | head -60 ;;
    *) echo "unknown phase $phase" ;;
  esac
done

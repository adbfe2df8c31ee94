#!/bin/sh
# invar demo recipe: every stage of the run that wrote this folder, rerunnable with only `invar`
# on PATH (install it with `cargo install --path crates/invar-cli`).
#
#   ./run.sh [--stage N] [--stop-stage M] [--nj N] [--cmd run|slurm] [--slurm-opts "OPTIONS"]
#
# Each stage is one `invar` command run in this folder, its output in logs/NN-name.log. A finished
# stage leaves .stages/NN.done and is skipped when the script runs again; a stage that was killed
# resumes (training commands with --resume, per-utterance stages continue their folder, the others
# start over with --force). --stage N reruns stage N and those after it from scratch, as in Kaldi's
# recipes; --stop-stage M stops after stage M. The last stage rebuilds report.md and results.json.
#
# --nj N runs each per-utterance stage (features, posteriors, supervectors, i-vectors) as N shards
# (`--shard K/N`, shard K's output in logs/NN-name.K.log), and the UBM's EM as N `gmm accumulate`
# shards per iteration joined by `gmm update` (the same bits as one `gmm train`; the iterations in
# ubm.em/). --cmd says where shards run: `run` (default) as processes on this machine, `slurm` as
# one `sbatch --array=1-N --wait` job array per stage, with the sbatch options of --slurm-opts or
# $INVAR_SLURM_OPTS (e.g. "-p cpu --mem 4G"). The other stages run where run.sh runs. The outputs
# are the same bytes for any N and either --cmd.
set -eu
cd "$(dirname "$0")"
stage=0
stop_stage=1000000
restage=0
nj=1
cmd=run
slurm_opts=${INVAR_SLURM_OPTS:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; restage=1; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    --nj) nj=$2; shift 2 ;;
    --cmd) cmd=$2; shift 2 ;;
    --slurm-opts) slurm_opts=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$(basename "$0")"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $nj in
  ''|*[!0-9]*|0*) echo "run.sh: --nj must be a whole number from 1, not '$nj'" >&2; exit 2 ;;
esac
case $cmd in
  run) ;;
  slurm)
    if ! command -v sbatch >/dev/null 2>&1; then
      echo "run.sh: --cmd slurm needs sbatch on PATH" >&2; exit 2
    fi ;;
  *) echo "run.sh: --cmd must be run or slurm, not '$cmd'" >&2; exit 2 ;;
esac
mkdir -p .stages logs

# One shard of a stage: shard.sh K N COMMAND... runs COMMAND with --shard K/N (when N > 1; K is
# the array task's index when it is `slurm`), `JOB` in an argument becoming K as in Kaldi's
# run.pl, and ends its output with the line `launch` checks.
cat > .stages/shard.sh <<'EOF'
#!/bin/sh
k=$1; n=$2; shift 2
if [ "$k" = slurm ]; then k=${SLURM_ARRAY_TASK_ID:?not a task of a Slurm job array}; fi
i=$#
for a do
  case $a in *JOB*) a=$(printf '%s\n' "$a" | sed "s/JOB/$k/g") ;; esac
  set -- "$@" "$a"
done
shift "$i"
if [ "$n" -gt 1 ]; then set -- "$@" --shard "$k/$n"; fi
# The command runs in the background so that a TERM (run.sh interrupted, or scancel) reaches it.
"$@" &
child=$!
trap 'kill "$child" 2>/dev/null' TERM HUP
wait "$child"
status=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done
echo "shard $k/$n: exit status $status"
exit "$status"
EOF

# excerpt FILE N: the error a command printed in the log FILE (from `Error:` to its backtrace,
# which RUST_BACKTRACE=1 adds) and the log's last line; the last N lines when it has no `Error:`.
excerpt() {
  msg=$(awk '/^Error:/ { p = 1 } /^Stack backtrace:/ { p = 0 } p && n++ < 12' "$1" 2>/dev/null)
  if [ -n "$msg" ]; then
    printf '%s\n' "$msg"
    last=$(tail -n 1 "$1")
    case $msg in *"$last") ;; *) printf '%s\n' "$last" ;; esac
  else
    tail -n "$2" "$1" 2>/dev/null || echo "(no log $1)"
  fi
}

# launch STEM COMMAND...: COMMAND as $nj shards through $cmd, shard K's output in STEM.K.log;
# fails unless every shard's log ends with its exit status 0.
launch() {
  lstem=$1; shift
  k=1
  while [ "$k" -le "$nj" ]; do rm -f "$lstem.$k.log"; k=$((k + 1)); done
  case $cmd in
    run)
      pids=""
      # Interrupted, run.sh stops its shards rather than leave them running.
      trap 'for pid in $pids; do kill "$pid" 2>/dev/null; done; exit 130' INT TERM HUP
      k=1
      while [ "$k" -le "$nj" ]; do
        sh .stages/shard.sh "$k" "$nj" "$@" > "$lstem.$k.log" 2>&1 &
        pids="$pids $!"
        k=$((k + 1))
      done
      for pid in $pids; do wait "$pid" || true; done
      trap - INT TERM HUP
      ;;
    slurm)
      echo "sbatch --array=1-$nj ${slurm_opts:+$slurm_opts }(in $PWD): $*"
      # $slurm_opts is split into words on purpose.
      # shellcheck disable=SC2086
      sbatch --wait --array="1-$nj" --job-name="invar-${lstem##*/}" --chdir="$PWD" \
        --output="$lstem.%a.log" $slurm_opts .stages/shard.sh slurm "$nj" "$@" \
        || echo "sbatch exited with status $?"
      ;;
  esac
  failed=""
  k=1
  while [ "$k" -le "$nj" ]; do
    if ! tail -n 1 "$lstem.$k.log" 2>/dev/null | grep -qx "shard $k/$nj: exit status 0"; then
      failed="$failed $k"
    fi
    k=$((k + 1))
  done
  if [ -n "$failed" ]; then
    for k in $failed; do
      echo "shard $k/$nj failed; the end of $lstem.$k.log:"
      excerpt "$lstem.$k.log" 8
    done
    return 1
  fi
  echo "$nj shards done ($cmd); their logs: $lstem.K.log"
}

# shards OUT COMMAND...: a per-utterance stage writing the folder OUT. With --nj 1 --cmd run the
# command itself, with this stage's rerun flag; else $nj shards through launch (a restage deletes
# OUT first, as --force would: a shard takes no --force).
shards() {
  out=$1; shift
  if [ "$nj" = 1 ]; then
    if [ "$cmd" = run ]; then "$@" $extra; return; fi
    launch "$stem" "$@" $extra; return
  fi
  if [ "$extra" = --force ]; then
    echo "restage: deleting $out"
    rm -rf -- "./$out" || return 1
  fi
  launch "$stem" "$@"
}

# ubm_em OUT ITERS COMMAND...: the UBM, COMMAND being `invar gmm train ... --out OUT --iters
# ITERS`. With --nj 1 --cmd run, that command. Otherwise EM in OUT.em/: the initial model (the
# command with --iters 0, into OUT.em/init), then per iteration NN `invar gmm accumulate` on $nj
# shards into one folder (OUT.em/stats-NN/stats.K-of-N.safetensors) and `invar gmm update` on
# that folder, joining them along the E-step's summation tree (OUT.em/NN: the bits of one `gmm
# train` iteration), stopping early when update says converged (gmm train's rule); the last model
# is then copied into OUT. A rerun continues from the last finished iteration.
ubm_em() {
  out=$1; iters=$2; shift 2
  if [ "$nj" = 1 ] && [ "$cmd" = run ]; then "$@" $extra; return; fi
  em=$out.em
  if [ "$extra" = --force ]; then
    echo "restage: deleting $em and $out"
    rm -rf -- "./$em" "./$out" || return 1
  fi
  feats=""; split=""; conf=""; prev=""
  for a do
    case $prev in --features) feats=$a ;; --split) split=$a ;; --config) conf=$a ;; esac
    prev=$a
  done
  if [ ! -e "$em/init/results.json" ]; then
    i=$#; prev=""
    for a do
      orig=$a
      case $prev in --out) a=$em/init ;; --iters) a=0 ;; esac
      set -- "$@" "$a"
      prev=$orig
    done
    shift "$i"
    echo "initial model: $* --force"
    "$@" --force > "$stem.init.log" 2>&1 || { excerpt "$stem.init.log" 8; return 1; }
  fi
  dir=$em/init
  previous=""
  it=1
  while [ "$it" -le "$iters" ]; do
    nn=$(printf %02d "$it")
    if [ ! -e "$em/$nn/results.json" ]; then
      # An unfinished iteration's statistics are made again, by this run's $nj shards.
      rm -rf -- "./$em/stats-$nn" || return 1
      echo "EM iteration $it: accumulate on $nj shards"
      launch "$stem.em$nn" invar gmm accumulate --ubm "$dir/ubm.safetensors" \
        --features "$feats" ${split:+--split "$split"} --out "$em/stats-$nn" || return 1
      echo "EM iteration $it: update"
      invar gmm update --stats "$em/stats-$nn" ${conf:+--config "$conf"} \
        ${previous:+--previous "$previous"} --out "$em/$nn" --force > "$stem.em$nn.log" 2>&1 \
        || { excerpt "$stem.em$nn.log" 8; return 1; }
    fi
    dir=$em/$nn
    previous=$dir
    if grep -q '"converged": true' "$dir/results.json"; then
      echo "EM converged at iteration $it"
      break
    fi
    it=$((it + 1))
  done
  mkdir -p "$out" || return 1
  for f in ubm.safetensors ubm.json results.json; do
    { cp "$dir/$f" "$out/.$f.tmp" && mv "$out/.$f.tmp" "$out/$f"; } || return 1
  done
  echo "UBM: $dir -> $out"
}

# step N NAME RERUN COMMAND...: runs COMMAND unless it is outside --stage/--stop-stage or done.
step() {
  n=$1; name=$2; rerun=$3; shift 3
  if [ "$n" -lt "$stage" ] || [ "$n" -gt "$stop_stage" ]; then return 0; fi
  mark=.stages/$(printf %02d "$n")
  if [ "$restage" = 1 ]; then rm -f "$mark.done"; fi
  if [ -e "$mark.done" ]; then echo "stage $n ($name): done, skipped"; return 0; fi
  extra=""
  if [ "$restage" = 1 ] && [ -e "$mark.started" ]; then
    [ "$rerun" = again ] || extra=--force
  elif [ -e "$mark.started" ]; then
    case "$rerun" in resume) extra=--resume ;; redo) extra=--force ;; esac
  fi
  stem=logs/$(printf %02d "$n")-$name
  log=$stem.log
  # The launchers read $extra themselves; the command they run is what the stage records.
  case $1 in
    shards) flags=""; shown=$(shift 2; printf '%s' "$*") ;;
    ubm_em) flags=""; shown=$(shift 3; printf '%s' "$*") ;;
    *) flags=$extra; shown=$* ;;
  esac
  echo "stage $n ($name): $shown $extra"
  : > "$mark.started"
  start=$(date +%s)
  if ! "$@" $flags > "$log" 2>&1; then
    echo "stage $n ($name) failed; the end of $log:" >&2
    # A launcher's log is already short: the failed shards and their errors.
    case $1 in
      shards|ubm_em) tail -n 20 "$log" >&2 ;;
      *) excerpt "$log" 15 >&2 ;;
    esac
    exit 1
  fi
  printf '%s\t%s\t%s\n' "$name" "$(( $(date +%s) - start ))" "$shown" > "$mark.done"
}


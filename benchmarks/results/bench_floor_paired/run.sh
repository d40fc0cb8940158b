#!/bin/bash
# Before (54e41c89, worktree /work/floor_before) and after (main) code, alternating, one process at a time.
# Run 2026-12-05 on the otherwise idle 2-core AMD EPYC. The before code's worktree:
#   git worktree add --detach /work/floor_before 54e41c89
# Both use main's benchmarks/speed/bench_floor.py; PYTHONPATH picks the package.
out=/work/main/benchmarks/results/bench_floor_paired
for i in 1 2 3; do
  for code in before after; do
    if [ $code = before ]; then dir=/work/floor_before; else dir=/work/main; fi
    (cd $dir && PYTHONPATH=$dir OMP_NUM_THREADS=1 /work/main/.venv/bin/python /work/main/benchmarks/speed/bench_floor.py \
      --settings zoo mlp:64:128 snippet --repeats 5 --learn-repeats 0 --json $out/${code}_$i.json > $out/${code}_$i.txt 2>&1)
  done
done

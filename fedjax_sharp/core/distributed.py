"""Multi-process (multi-host) runs through `jax.distributed`.

Every process runs the same program on the same config: the partition, cohorts and keys are
seeded, so they agree without communication. `jax.distributed.initialize` joins the processes;
`jax.devices()` then lists every process's devices and the engine's mesh (`engine.devices=0`:
all of them) spans the hosts, the cohort's clients split across it (`core.sharding`). Process 0
writes the run directory (config, metrics, summary, final models); the others write none of it
but save and restore its checkpoints with process 0.

    # on each of N hosts (or N processes on one machine), the same command with its own id:
    python experiments/run.py --config=configs/fashion_mnist_cnn.py --workdir=runs/mh \\
        --config.engine.devices=0 --config.engine.client_strategy=vmap \\
        --coordinator=host0:12355 --num_processes=N --process_id=I

On CPU the processes exchange through gloo (`jax_cpu_collectives_implementation`), which is how
the tests run two processes of two simulated devices each on one machine
(`tests/test_distributed.py`).

Checkpoints (`checkpoint_every > 0`) survive preemption: every process calls orbax's save and
restore together on `<workdir>/checkpoints/` (`training.checkpoints`), which must be a
filesystem all hosts share. The client table, a global `jax.Array` split by row blocks across
the processes, is written by its owners, each process its own rows; the replicated server state
once, the meta by process 0. After a kill, rerun the same command on every host: all processes
resume from the round process 0's newest complete checkpoint holds. The checkpoint records the
process count; resuming it with another `--num_processes` is refused (a one-line `WorkdirError`,
exit 2) naming both counts. A host-held client table (`engine.client_table='host'`) is refused
by multi-process runs.
"""
from __future__ import annotations

import jax


def initialize(coordinator: str, num_processes: int, process_id: int) -> None:
  """Joins this process to a `num_processes`-process run coordinated at `coordinator`
  ('host:port', served by process 0). Call before anything else touches JAX devices."""
  if num_processes < 1:
    raise ValueError(f"num_processes must be >= 1, got {num_processes}")
  if not 0 <= process_id < num_processes:
    raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id}")
  if num_processes == 1:
    return
  if not coordinator:
    raise ValueError("a multi-process run needs --coordinator=HOST:PORT (process 0's address)")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")   # CPU; no effect elsewhere
  jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def writes_files() -> bool:
  """True on the process that writes run directories (process 0)."""
  return jax.process_index() == 0

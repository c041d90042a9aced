"""Multi-process (multi-host) runs through `jax.distributed`.

Every process runs the same program on the same config: the partition, cohorts and keys are
seeded, so they agree without communication. `jax.distributed.initialize` joins the processes;
`jax.devices()` then lists every process's devices and the engine's mesh (`engine.devices=0`:
all of them) spans the hosts, the cohort's clients split across it (`core.sharding`). Process 0
writes the run directory; the others run with no workdir.

    # on each of N hosts (or N processes on one machine), the same command with its own id:
    python experiments/run.py --config=configs/fashion_mnist_cnn.py --workdir=runs/mh \\
        --config.engine.devices=0 --config.engine.client_strategy=vmap \\
        --coordinator=host0:12355 --num_processes=N --process_id=I

On CPU the processes exchange through gloo (`jax_cpu_collectives_implementation`), which is how
the tests run two processes of two simulated devices each on one machine
(`tests/test_distributed.py`). Checkpoints are not written by multi-process runs yet (the
client-state table is split across processes; gathering it is future work): such a run refuses
`checkpoint_every > 0` with that reason.
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

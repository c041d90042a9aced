"""The client axis (and a sweep's experiment axis) sharded across a device mesh.

    mesh = sharding.make_mesh(clients=8)                      # or experiments=2, clients=4
    engine = RoundEngine(algorithm, M, ExecutionConfig("vmap", local_loop="rolled"), mesh=mesh)

With a mesh, the engine places each round's inputs before calling the same jitted round:
the cohort's per-client arrays split along their client axis over the mesh's 'clients' axis,
the client-state table split by client (row blocks), the server state and the training set
replicated. XLA's SPMD partitioner then runs each device's clients on that device and turns
the aggregation (a weighted sum over clients) into a cross-device reduction. A sweep's stacked
experiments split along 'experiments' the same way. The computation is the unsharded one
(tested on 8 simulated CPU devices against one device); a cohort (or table) whose size does not
divide the axis is padded with padding clients (weight 0, never scattered) / unused rows.

One device (no mesh) is the default; `engine.devices` / `engine.experiment_devices` build the
mesh from a config. Several hosts: after `jax.distributed.initialize()` (`core.distributed`)
the mesh spans every process's `jax.devices()`; process 0 writes the run directory and every
process writes its own rows of the client table into the checkpoints.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

CLIENTS, EXPERIMENTS = "clients", "experiments"


def make_mesh(clients: int | None = None, experiments: int = 1, devices=None) -> Mesh:
  """A ('experiments', 'clients') mesh; `clients` defaults to the devices left over."""
  devices = list(devices if devices is not None else jax.devices())
  if clients is None:
    clients = len(devices) // experiments
  if clients < 1 or experiments < 1 or clients * experiments > len(devices):
    raise ValueError(f"a mesh of experiments={experiments} x clients={clients} needs "
                     f"{clients * experiments} devices; {len(devices)} available")
  grid = np.array(devices[:clients * experiments]).reshape(experiments, clients)
  return Mesh(grid, (EXPERIMENTS, CLIENTS))


def mesh_for(devices: int = 1, experiment_devices: int = 1) -> Mesh | None:
  """The mesh of a config's `engine.devices` (the 'clients' axis: 1 = no mesh, 0 = every
  device) and `engine.experiment_devices` (a sweep's 'experiments' axis); None for one device."""
  clients, experiments = int(devices), int(experiment_devices)
  if clients < 0:
    raise ValueError(f"engine.devices must be >= 0 (0 = all devices), got {clients}")
  if experiments < 1:
    raise ValueError(f"engine.experiment_devices must be >= 1, got {experiments}")
  if clients == 1 and experiments == 1:
    return None
  available = len(jax.devices())
  if clients == 0:
    clients = max(available // experiments, 1)
  if clients * experiments > available:
    raise ValueError(f"engine.devices={clients} x engine.experiment_devices={experiments} "
                     f"needs {clients * experiments} devices; {available} available")
  return make_mesh(clients=clients, experiments=experiments)


def axis_size(mesh: Mesh | None, name: str) -> int:
  return 1 if mesh is None or name not in mesh.axis_names else int(mesh.shape[name])


def padded(n: int, multiple: int) -> int:
  return int(math.ceil(n / multiple) * multiple)


def pad_cohort(cohort, num_clients: int, size: int):
  """`cohort` with padding clients appended up to `size` (id M, weight 0, masks False)."""
  extra = size - cohort.client_ids.shape[-1]
  if extra <= 0:
    return cohort
  axis = cohort.client_ids.ndim - 1          # the client axis (1 under a sweep's stacking)

  def pad(a, value=0):
    a = np.asarray(a)
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return np.pad(a, widths, constant_values=value)
  return cohort.replace(
      client_ids=pad(cohort.client_ids, num_clients), weights=pad(cohort.weights),
      num_examples=pad(cohort.num_examples), batch_idx=pad(cohort.batch_idx),
      example_mask=pad(cohort.example_mask), step_mask=pad(cohort.step_mask),
      rows=None if cohort.rows is None else pad(cohort.rows, size))


def pad_table(table, multiple: int):
  """Rows appended (zeros) so that the table's client axis divides `multiple`."""
  def pad(t):
    extra = padded(t.shape[0], multiple) - t.shape[0]
    return t if extra == 0 else jnp.concatenate([t, jnp.zeros((extra, *t.shape[1:]), t.dtype)])
  return jax.tree.map(pad, table)


def place(mesh: Mesh, tree, spec: P):
  """device_put of every leaf with `NamedSharding(mesh, spec)` (spec padded with None)."""
  def put(x):
    x = jnp.asarray(x) if not isinstance(x, jax.Array) else x
    if x.ndim == 0:
      return jax.device_put(x, NamedSharding(mesh, P()))
    return jax.device_put(x, NamedSharding(mesh, P(*spec[:x.ndim])))
  return jax.tree.map(put, tree)

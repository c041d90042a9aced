"""The 'host' client strategy: a round's jitted pieces dispatched from a short Python loop, its
clients spread over the process's devices.

Per round: `prepare` (broadcast, the cohort's client states) once; per client: `client_start`,
chunks of `host_chunk` local steps (chunks holding only padding steps are skipped: a masked step
changes nothing), `client_end` (once for all padding clients of one weight: their inputs are the
same); then `finish` (aggregation, server update, scatter) once. The
same pure functions as the single-jit round (`RoundEngine._round`), so the same numbers (tested).

Several devices (`ExecutionConfig.host_devices`; on a CPU, the CPU devices the process was given:
`backends.use_cpu_devices`): each client runs on one device, the longest clients first, each on
the device with the fewest local steps so far (`assign`: ragged cohorts stay balanced). JAX dispatches
asynchronously, so the loop queues every client's work and the devices compute side by side:
on XLA's CPU backend, whose thread scaling is poor for one step's small convolutions, two CPU
devices on two cores ran pfl-research's small-batch McMahan-CNN round and an even long-tail
Fashion-MNIST round faster (docs/performance.md). The
broadcast, the round's inputs and the training set are copied to each device (the training
set once per engine), the uploads come back to the first device for `finish`. Each device
compiles the per-client pieces once. A device computes a client's steps with the same program
as the first, so the round is the same bit for bit (tested).
"""
from __future__ import annotations

import jax
import numpy as np

from fedjax_sharp.core import tree


def assign(real_steps, num_devices: int) -> np.ndarray:
  """The device of each client: longest first, each to the least loaded device so far (its
  steps plus one for the client's start and end)."""
  load = np.zeros(num_devices)
  device = np.zeros(len(real_steps), np.int64)
  for c in np.argsort(-np.asarray(real_steps), kind="stable"):
    device[c] = int(np.argmin(load))
    load[device[c]] += real_steps[c] + 1
  return device


class Replicas:
  """Copies of the training data on the engine's extra devices, made once per data object (a
  host-fed round's batches are new every round and copied each time)."""

  def __init__(self):
    self._data, self._copies = None, []

  def of(self, data, devices):
    if self._data is not data:
      self._data = data   # a reference: the identity check stays valid
      self._copies = [data] + [jax.device_put(data, d) for d in devices[1:]]
    return self._copies


def host_round(engine, server_state, client_table, data, cohort, round_info, key):
  """`engine`'s round (`RoundEngine._round`'s result) from its separately jitted pieces."""
  bcast, client_states, infos, round_key = engine.compiled.prepare(
      server_state, client_table, cohort, round_info, key)
  round_info = round_info.replace(key=round_key)
  chunk = engine.execution.host_chunk
  batch_idx, example_mask, step_mask = (np.asarray(a) for a in
                                        (cohort.batch_idx, cohort.example_mask,
                                         cohort.step_mask))
  num_clients, num_steps, _ = batch_idx.shape
  # Each client's real steps first, in their order, with their own step ids (the sampler's plans
  # already have them there): the chunks after a client's last real step are all padding.
  step_ids = np.argsort(~step_mask.astype(bool), axis=1, kind="stable").astype(np.int32)
  batch_idx = np.take_along_axis(batch_idx, step_ids[..., None], 1)
  example_mask = np.take_along_axis(example_mask, step_ids[..., None], 1)
  step_mask = np.take_along_axis(step_mask, step_ids, 1)
  padded = -(-num_steps // chunk) * chunk
  if padded != num_steps:  # pad the plan to whole chunks with masked (no-op) steps
    pad = ((0, 0), (0, padded - num_steps), (0, 0))
    batch_idx, example_mask = np.pad(batch_idx, pad), np.pad(example_mask, pad)
    step_mask, step_ids = np.pad(step_mask, pad[:2]), np.pad(step_ids, pad[:2])
  real_steps = step_mask.sum(axis=1)
  devices = engine.host_devices
  # What every client reads, on every device (the first holds the originals).
  shared = [(bcast, round_info, round_key)] + [
      jax.device_put((bcast, round_info, round_key), d) for d in devices[1:]]
  datas = engine.replicas.of(data, devices)
  device_of = assign(real_steps, len(devices))
  # Padding clients (id M, no step) all compute the same output from the same inputs (a zero
  # state row, the same key): one per aggregation weight is computed, the rest reuse it (a
  # Poisson cohort pads ~2.7x m clients for m = 10).
  client_ids, weights = np.asarray(cohort.client_ids), np.asarray(cohort.weights)
  padding_outputs = {}
  outputs = []
  for c in range(num_clients):
    padding = real_steps[c] == 0 and client_ids[c] == engine.num_clients
    if padding and float(weights[c]) in padding_outputs:
      outputs.append(padding_outputs[float(weights[c])])
      continue
    d = int(device_of[c])
    (b, info_r, key_r), data_d = shared[d], datas[d]
    cstate, info = tree.index(client_states, c), tree.index(infos, c)
    if d:
      cstate, info = jax.device_put((cstate, info), devices[d])
    local, metrics, client_key = engine.compiled.client_start(
        b, cstate, info, info_r, data_d, batch_idx[c, 0], example_mask[c, 0], key_r)
    for k in range(-(-int(real_steps[c]) // chunk)):
      sl = slice(k * chunk, (k + 1) * chunk)
      local, metrics = engine.compiled.steps(
          local, metrics, info_r, data_d, step_ids[c, sl],
          batch_idx[c, sl], example_mask[c, sl], step_mask[c, sl], client_key)
    output = engine.compiled.client_end(local, b, cstate, info, info_r)
    outputs.append((*output, metrics))
    if padding:
      padding_outputs[float(weights[c])] = outputs[-1]
  if len(devices) > 1:
    outputs = [o if device_of[c] == 0 else jax.device_put(o, devices[0])
               for c, o in enumerate(outputs)]
  return engine.compiled.finish(server_state, client_table, tree.stack(outputs),
                            cohort, round_info)

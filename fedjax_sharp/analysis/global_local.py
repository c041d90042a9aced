"""Global versus local sharpness (FedGloSS Table 1 / Figure 1).

For a global model w and clients m: the top Hessian eigenvalue of
  - w on the global training loss (all clients' data),
  - w on each client's loss,
  - each client's LOCALLY TRAINED model w_m (local training from w on the client's data) on
    the client's own loss (FedGloSS Table 1's lambda_{1,l}) and on the global loss (its
    lambda_{1,g}; `local_on_global=False` skips it, the costliest column).
Local flatness (small lambda of w_m) does not imply global flatness (small lambda of w on the
global loss): the paper's argument for server-side SAM.

    out = global_vs_local(loss_fn, params, batches_of(indices), client_indices, local_train)

`local_train(params, m) -> params` trains client m from `params` (`run_analysis` builds it from
a run's config: one FedAvg round with that client alone and the run's client optimiser, step
count and learning rate of the last round).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from fedjax_sharp.analysis import hessian


def global_vs_local(loss_fn: Callable, params, batches_of: Callable[[np.ndarray], list],
                    client_indices: Sequence[np.ndarray], local_train: Callable,
                    clients: Sequence[int], global_examples: np.ndarray, iters: int = 20,
                    key=None, local_on_global: bool = True,
                    progress: hessian.Progress | None = None) -> dict:
  """{'global_on_global': float, 'global_on_client': [..], 'local_on_client': [..],
  'local_on_global': [..] (with `local_on_global`), 'clients': [..]} and each list's '_mean'
  and '_max' (top eigenvalues by power iteration, `iters` iterations).

  batches_of(indices) -> masked batches of those training examples; `global_examples`: the
  training indices standing for the global loss (all, or a class-stratified sample).
  `progress(done, total)` after every power iteration of every eigenvalue.
  """
  lists = ["global_on_client", "local_on_client"] + (["local_on_global"] if local_on_global
                                                      else [])
  total, done = (1 + len(lists) * len(clients)) * max(iters, 1), [0]

  def top(p, idx) -> float:
    report = None if progress is None else (
        lambda d, _: progress(done[0] + d, total))
    value = float(hessian.top_eigenvalues(loss_fn, p, batches_of(idx), k=1, iters=iters,
                                          key=key, progress=report)[0])
    done[0] += max(iters, 1)
    return value
  out = {"clients": [int(m) for m in clients], "global_on_global": top(params, global_examples)}
  out.update({key_: [] for key_ in lists})
  for m in clients:
    idx = np.asarray(client_indices[m])
    local = local_train(params, int(m))
    out["global_on_client"].append(top(params, idx))
    out["local_on_client"].append(top(local, idx))
    if local_on_global:
      out["local_on_global"].append(top(local, global_examples))
  for key_ in lists:
    values = np.array(out[key_])
    out[key_ + "_mean"] = float(values.mean())
    out[key_ + "_max"] = float(values.max())
  return out

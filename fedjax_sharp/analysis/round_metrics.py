"""The metrics `config.analysis.metrics` can ask for during training, as a table of functions.

`ROUND_METRICS[name](inputs)` returns `{record field: value}` for the global model after a
round; `training.hooks.RoundAnalysis` calls the ones a schedule names, and the config's
`analysis.metrics` accepts exactly the names of this table. A metric of your own is one entry:

    from fedjax_sharp.analysis import round_metrics

    def weight_norm(inputs):
      return {"weight_norm": float(optax.global_norm(inputs.params))}
    round_metrics.ROUND_METRICS["weight_norm"] = weight_norm

then `--config.analysis.metrics="('weight_norm',)" --config.analysis.every=5`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from fedjax_sharp.hyperparameters import declare


@dataclasses.dataclass
class MetricInputs:
  """What a round metric may read: the global model, the test batches of the schedule, the
  test cross-entropy `loss_fn(params, batch)`, the experiment (`apply_fn`, `dataset`,
  `client_indices`, `eval_preprocess`), which clients have trained so far, and the schedule's
  settings (`iters`, `rho`, `trace_probes`, `examples`)."""
  params: Any
  batches: list
  loss_fn: Callable
  experiment: Any
  trained: np.ndarray
  schedule: dict


def _lambda_max(inputs: MetricInputs) -> dict:
  from fedjax_sharp.analysis import hessian  # pylint: disable=g-import-not-at-top
  return {"lambda_max": float(hessian.top_eigenvalues(
      inputs.loss_fn, inputs.params, inputs.batches, k=1, iters=inputs.schedule["iters"])[0])}


def _hessian_trace(inputs: MetricInputs) -> dict:
  from fedjax_sharp.analysis import sharpness  # pylint: disable=g-import-not-at-top
  return {"hessian_trace": sharpness.hutchinson_trace(
      inputs.loss_fn, inputs.params, inputs.batches,
      num_probes=inputs.schedule["trace_probes"])["trace"]}


def _sam_sharpness(inputs: MetricInputs) -> dict:
  from fedjax_sharp.analysis import sharpness  # pylint: disable=g-import-not-at-top
  return {"sam_sharpness": sharpness.sam_sharpness(
      inputs.loss_fn, inputs.params, inputs.batches, rho=inputs.schedule["rho"])["sam_sharpness"]}


def _client_percentiles(inputs: MetricInputs) -> dict:
  from fedjax_sharp.analysis import clients  # pylint: disable=g-import-not-at-top
  exp = inputs.experiment
  return clients.model_client_percentiles(exp.apply_fn, inputs.params, exp.dataset,
                                          exp.client_indices, trained=inputs.trained,
                                          preprocess=exp.eval_preprocess)


# name -> metric; `analysis.metrics` is checked against these names.
ROUND_METRICS: dict[str, Callable[[MetricInputs], dict]] = {
    "lambda_max": _lambda_max,
    "hessian_trace": _hessian_trace,
    "sam_sharpness": _sam_sharpness,
    "client_percentiles": _client_percentiles,
}

# The config block `analysis`: which metrics run, how often, on what (`training.run_analysis`).
FIELDS = declare(
    every=(0, ">= 0", "analysis metrics every k rounds and at the last (0 = off)"),
    metrics=((), None, f"any of analysis.round_metrics.ROUND_METRICS ({list(ROUND_METRICS)})"),
    examples=(1000, ">= 0", "test examples the analysis uses"),
    rho=(0.05, ">= 0", "sam_sharpness radius"),
    trace_probes=(20, ">= 1", "hessian_trace Hutchinson probes"),
    iters=(20, ">= 1", "lambda_max power iterations"))

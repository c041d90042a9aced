"""Final-model analysis of a finished run (the geometry protocol), resumable part by part.

    python experiments/analyse.py --workdir=RUN                      # every part not yet stored
    python experiments/analyse.py --workdir=RUN --parts=hessian,sharpness --examples=0
    python experiments/analyse.py --workdir=RUN --check              # exit 1 if a part is missing

Reads RUN/config.json and RUN/final_params.msgpack (RUN/average_params.msgpack with
`--model=average`) and stores each part as soon as it is computed, so an interrupted analysis
continues where it stopped:
  hessian       top-k Hessian eigenvalues by power iteration    -> hessian.json '<model>'
  sharpness     SAM sharpness and the Hutchinson Hessian trace  -> analysis.json '<model>_sharpness'
  clients       per-client accuracy percentiles, worst client   -> analysis.json '<model>_clients'
  global_local  global vs local sharpness (FedGloSS Table 1)    -> analysis.json '<model>_global_local'
  landscape     2D filter-normalised loss surface (PNG + NPZ)   -> analysis.json '<model>_landscape'
The defaults are the protocol of the geometry study (docs/reproducing.md, "Geometry of the
long-tail Dir(0.1) models"): lambda_max, SAM sharpness (rho 0.05) and the trace (100 probes)
on the same 2,000 test examples; global vs local on the first 5 clients with a 1,000-example
stratified global sample; a 21 x 21 landscape. `compare.py --report_only` then tabulates every
stored part over seeds (geometry.md).
"""
from __future__ import annotations

import sys
import time

from absl import app, flags, logging

PARTS = ("hessian", "sharpness", "clients", "global_local", "landscape")

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished run directory.", required=True)
_MODEL = flags.DEFINE_enum("model", "final", ["final", "average"], "Which saved model.")
_PARTS = flags.DEFINE_list("parts", list(PARTS), f"Parts to compute, of {PARTS}.")
_FORCE = flags.DEFINE_bool("force", False, "Recompute parts that are already stored.")
_CHECK = flags.DEFINE_bool("check", False, "Only report which parts are stored; exit 1 if any "
                           "of --parts is missing.")
_EXAMPLES = flags.DEFINE_integer("examples", 2000, "Test examples for the Hessian, trace, SAM "
                                 "sharpness and landscape (0 = all).")
_K = flags.DEFINE_integer("k", 1, "Hessian eigenvalues to compute.")
_ITERS = flags.DEFINE_integer("iters", 20, "Power iterations (Hessian and global vs local).")
_RHO = flags.DEFINE_float("rho", 0.05, "Radius of the SAM sharpness.")
_PROBES = flags.DEFINE_integer("trace_probes", 100, "Rademacher probes of the trace.")
_GL_CLIENTS = flags.DEFINE_integer("gl_clients", 5, "Clients of the global vs local part.")
_GL_EXAMPLES = flags.DEFINE_integer("gl_examples", 1000, "Stratified training examples of the "
                                    "global loss in the global vs local part.")
_GRID = flags.DEFINE_integer("grid", 21, "Landscape grid points per direction.")


def stored_parts(run_dir: str, model: str) -> dict[str, bool]:
  from fedjax_sharp.training import run_analysis  # pylint: disable=g-import-not-at-top
  analysis = run_analysis.load_stored(run_dir)
  hessian = run_analysis.load_stored(run_dir, run_analysis.HESSIAN_FILE)
  return {part: (model in hessian) if part == "hessian" else (f"{model}_{part}" in analysis)
          for part in PARTS}


def main(argv):
  del argv
  from fedjax_sharp.training import loop, run_analysis  # pylint: disable=g-import-not-at-top
  unknown = sorted(set(_PARTS.value) - set(PARTS))
  if unknown:
    raise ValueError(f"--parts: {unknown} are not among {list(PARTS)}")
  run_dir, model = _WORKDIR.value, _MODEL.value
  have = stored_parts(run_dir, model)
  todo = [p for p in PARTS if p in _PARTS.value and (_FORCE.value or not have[p])]
  if _CHECK.value:
    for part in PARTS:
      print(f"{part:13s} {'stored' if have[part] else 'missing'}")
    sys.exit(1 if any(not have[p] for p in _PARTS.value) else 0)
  if not todo:
    logging.info("%s: every asked part is stored (--force recomputes)", run_dir)
    return
  exp = loop.build_experiment(run_analysis.load_run_config(run_dir))
  calls = {
      "hessian": lambda: run_analysis.run_hessian(
          run_dir, model=model, k=_K.value, iters=_ITERS.value, max_examples=_EXAMPLES.value,
          experiment=exp),
      "sharpness": lambda: run_analysis.run_sharpness(
          run_dir, model=model, rho=_RHO.value, trace_probes=_PROBES.value,
          examples=_EXAMPLES.value, experiment=exp),
      "clients": lambda: run_analysis.run_clients(run_dir, model=model, experiment=exp),
      "global_local": lambda: run_analysis.run_global_local(
          run_dir, model=model, clients=_GL_CLIENTS.value, iters=_ITERS.value,
          global_examples=_GL_EXAMPLES.value, experiment=exp),
      "landscape": lambda: run_analysis.run_landscape(
          run_dir, model=model, num=_GRID.value, examples=_EXAMPLES.value, experiment=exp),
  }
  for part in todo:
    t0 = time.time()
    calls[part]()
    logging.info("%s: %s stored (%.0f s)", run_dir, part, time.time() - t0)


if __name__ == "__main__":
  logging.set_verbosity(logging.INFO)
  from fedjax_sharp.training import cli as _cli
  app.run(_cli.guarded(main), flags_parser=_cli.flags_parser)

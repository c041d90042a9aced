"""Loss landscape and sharpness of a finished run's global model (the analysis toolbox).

    python experiments/landscape.py --workdir=runs/hetero/fedgmt/seed_0            # 21x21 surface
    python experiments/landscape.py --workdir=RUN --other=RUN2                      # + 1D path
    python experiments/landscape.py --workdir=RUN --sharpness --trace_probes=100    # + SAM, trace
    python experiments/landscape.py --workdir=RUN --global_local=10    # + global vs local lambda
    python experiments/landscape.py --workdir=RUN --clients            # + per-client percentiles

Reads RUN/config.json and RUN/final_params.msgpack; evaluates on the first --examples test
examples; writes RUN/landscape.png + .npz (filled contour and 3D surface along two
filter-normalised random directions, Li et al. 2018), RUN/interpolation.png + .npz with
--other (the loss from this run's model, t = 0, to the other's, t = 1), and RUN/analysis.json.
"""
from __future__ import annotations

import json

from absl import app, flags, logging

_WORKDIR = flags.DEFINE_string("workdir", None, "A run directory.", required=True)
_OTHER = flags.DEFINE_string("other", None, "Another run of the same model: 1D interpolation.")
_MODEL = flags.DEFINE_enum("model", "final", ["final", "average"], "Which saved model.")
_NUM = flags.DEFINE_integer("num", 21, "Grid points per axis.")
_SPAN = flags.DEFINE_float("span", 1.0, "The grid covers [-span, span] on both directions.")
_EXAMPLES = flags.DEFINE_integer("examples", 2000, "Test examples (0 = all).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the random directions.")
_SHARPNESS = flags.DEFINE_bool("sharpness", False, "Also SAM sharpness and the Hessian trace.")
_RHO = flags.DEFINE_float("rho", 0.05, "SAM sharpness radius.")
_PROBES = flags.DEFINE_integer("trace_probes", 100, "Hutchinson probes for the Hessian trace.")
_CLIENTS = flags.DEFINE_bool(
    "clients", False, "Also per-client accuracy percentiles, worst client, participation gap.")
_GLOBAL_LOCAL = flags.DEFINE_integer(
    "global_local", 0, "> 0: global vs local sharpness (FedGloSS Table 1) on this many clients.")


def main(argv):
  del argv
  from fedjax_sharp.training import loop, run_analysis
  exp = loop.build_experiment(run_analysis.load_run_config(_WORKDIR.value))
  out = {"landscape": run_analysis.run_landscape(
      _WORKDIR.value, other=_OTHER.value, model=_MODEL.value, num=_NUM.value, span=_SPAN.value,
      examples=_EXAMPLES.value, seed=_SEED.value, experiment=exp)}
  if _SHARPNESS.value:
    out["sharpness"] = run_analysis.run_sharpness(
        _WORKDIR.value, model=_MODEL.value, rho=_RHO.value, trace_probes=_PROBES.value,
        examples=_EXAMPLES.value, experiment=exp)
  if _CLIENTS.value:
    out["clients"] = run_analysis.run_clients(_WORKDIR.value, model=_MODEL.value, experiment=exp)
  if _GLOBAL_LOCAL.value:
    out["global_local"] = run_analysis.run_global_local(
        _WORKDIR.value, model=_MODEL.value, clients=_GLOBAL_LOCAL.value, experiment=exp)
  print(json.dumps(out, indent=2))


if __name__ == "__main__":
  logging.set_verbosity(logging.INFO)
  from fedjax_sharp.training import cli as _cli
  app.run(_cli.guarded(main), flags_parser=_cli.flags_parser)

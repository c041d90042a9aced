"""FedNSAM (Liu, Shang, Tian, Liu, Liu, "FedNSAM: Consistency of Local and Global Flatness for
Federated Learning", arXiv:2602.23827v1, 2026): global Nesterov momentum with local SAM.

Only the paper's abstract could be read (the stored copies of arxiv.org/abs/2602.23827 and of
its HTML version reach the abstract and the first lines of the introduction, not the algorithm
box, the hyperparameters or the tables): FedNSAM "introduc[es] global Nesterov momentum into the
local update" and "uses the global Nesterov momentum as the direction of local estimation of
client global perturbations and extrapolation". The rule is therefore the authors' code; the
default is their HEAD code, and the repositories' other versions are the `variant` option. The
same authors cite the work as "Consistency of local and global flatness for federated learning",
Proc. 33rd ACM International Conference on Multimedia (ACM MM 2025), pp. 3875-3883, doi
10.1145/3746027.3755226 (the reference lists of their later papers); that version was not read
either.
Sources (spec `new_algorithms.md` C): junkangLiu0/FedSWA @ f725be9 (`main_FedSWA.py`),
junkangLiu0/FedNSAM @ c3c9e90 (`main_FedNSAM.py`, `optimizer/Nesterov.py`) and @ d41b5e6
(`new_NSAM.py`, July 2025).

Server state: `w` and the server momentum `m` (`m^0 = 0`). Client state: none.

variant='n2' (default; the authors' HEAD code, `main_FedSWA.py` `update_NSAM` L1096-1130 and
`apply_weights_avgACG` L1317-1338). The server sends the extrapolated start `w_hat = w^t +
gamma m^t` (one vector; the code sends `w` and `m` and adds them on the client, L1102). Client
m starts from `y_0 = w_hat` and takes K local SAM steps with a fresh SGD:

    g = grad L(y_k; b),  e = rho g / (||g|| + 1e-12)            (core.sam; sam.py L19-25)
    g_s = clip(grad L(y_k + e; b), clip_norm)                   (global L2 norm, L1123)
    y_{k+1} = y_k - eta_t (g_s + weight_decay * y_k)            (SGD, momentum 0, L1106)

and uploads `Delta_m = y_K - w_hat` (from the extrapolated start, L1129). Server:

    Delta = sum_m p_m Delta_m,   m^{t+1} = gamma m^t + Delta,   w^{t+1} = w^t + m^{t+1}

(L1325-1336; `m^1 = Delta` in round 0, which is this with `m^0 = 0`). Equivalently
`w^{t+1}` is the average of the clients' endpoints and `m^{t+1} = w^{t+1} - w^t`.

variant='n1' (`main_FedNSAM.py` as written, L1355-1374): the same client, but the server's
loop reads the mean delta where the old momentum was meant (`momen_m[k] = gamma * v +
sum_weights[k]` over `sum_weights.items()`), so `m^{t+1} = (1 + gamma) Delta` for t >= 1
(`m^1 = Delta` in round 0, `momen_m == {}`), `w^{t+1} = w^t + m^{t+1}`. It looks unintended:
the same file keeps the recursive form as the unused `apply_weights_avgACG2`.

variant='n3' (July 2025, `new_NSAM.py` `update_FedNesterov` L1842-1863 with the July
`optimizer/Nesterov.py` L24-59): no SAM ascent and no start extrapolation. The server sends
`(w^t, m^t)` (two vectors); `y_0 = w^t` and every step takes the gradient at the Nesterov point

    y_{k+1} = y_k - eta_t (grad L(y_k + gamma m^t; b) + weight_decay * y_k)

with no clipping; upload `y_K - w^t`; the server is n2's (L957-976). `rho` is unused (its
term is commented out, L56). Read from the code, not run: under PyTorch >= 2.0 `zero_grad`
sets gradients to None and the July optimizer then skips the extrapolation; this is the
intended reading (extrapolation applied).

variant='n4' (the HEAD `optimizer/Nesterov.py` `first_step` L24-59, `e_w` L56, called by no
HEAD script; the one closest to the abstract): n3's loop with the gradient taken at

    y_k + gamma m^t - rho m^t / (||m^t|| + 1e-7)

i.e. Nesterov extrapolation along the global momentum and a SAM-type perturbation along
`-m/||m||`, one gradient per step. The round loop around it is n3's (its July caller), our
composition: no script runs it.

Defaults, all from the HEAD code (the paper's are unknown): gamma 0.85 (client extrapolation
hard-coded at L1099, server momentum at L1319; one field here, both N2 values equal); rho 0.05
(hard-coded at L1100: the README's `--rho` is ignored by the workers); client SGD with
momentum 0 and coupled weight decay 1e-3; clipping of the SAM gradient at global norm 10
(n1/n2; n3/n4 have none: `clip_norm=None` takes the variant's). The clip is PyTorch's
`clip_grad_norm_`, the code's (`core.optimizers.clip_by_global_norm`: `max / (norm + 1e-6)`,
capped at 1). Not part of the algorithm and left to the config: the round learning
rate (HEAD: cosine `0.5 eta_0 (1 + cos(pi t / T))` over T = 301 rounds, eta_0 = 0.1; July:
`eta_0 0.998^(t+1)`), K = 50 local steps (E = 5 epochs of B = 50 capped at `args.K`), 10 of
100 clients, uniform weights. The code averages BatchNorm running statistics with everything
else; here only the parameters are averaged.

Reductions (tested): `rho = 0`, `gamma = 0` and `clip_norm = 0` (FedAvg has no clipping) is FedAvg
with the same client optimiser exactly; round 0 (m = 0) is a FedSAM round. Communication: n1/n2 1
down (w_hat), 1 up; n3/n4 2 down (w, m), 1 up. Client compute: two forward/backward passes per step
(n1/n2), one (n3/n4).
"""
from __future__ import annotations

from typing import Annotated, Any

import flax.struct
import jax.numpy as jnp

from fedjax_sharp.algorithms import common, registration
from fedjax_sharp.algorithms.hyperparameters import Field, checked
from fedjax_sharp.core import hparams, optimizers, sam, tree
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm

VARIANTS = ("n2", "n1", "n3", "n4")
N4_NORM_EPS = 1e-7   # `grad_norm + 1e-7` in the HEAD optimizer/Nesterov.py L46


@flax.struct.dataclass
class FedNSAMServerState:
  params: Any    # w^t
  momentum: Any  # m^t (0 at the start)


@flax.struct.dataclass
class FedNSAMLocalState:
  params: Any     # y_k
  opt_state: Any  # local SGD (reset every round)
  momentum: Any   # n3/n4: m^t, constant during the round; () for n1/n2


@checked
def fed_nsam(apply_fn: common.ApplyFn, client_optimizer, *,
             rho: Annotated[float, Field(">= 0", "local SAM radius (authors' code, hard-coded; "
                                         "n4: the radius along -m/||m||; n3: unused)",
                                         sweepable=True)] = 0.05,
             gamma: Annotated[float, Field("[0, 1)", "Nesterov extrapolation and server "
                                           "momentum factor", sweepable=True)] = 0.85,
             clip_norm: Annotated[float | None, Field(
                 ">= 0", "clip the local gradient at this global norm (0: off; None: the "
                 "variant's, 10 for n1/n2, off for n3/n4)")] = None,
             variant: Annotated[str, Field(
                 doc="'n2' authors' HEAD code (default), 'n1' main_FedNSAM.py's server as "
                 "written, 'n3' July 2025 per-step Nesterov, 'n4' HEAD Nesterov.py perturbation",
                 choices=VARIANTS)] = "n2",
             name: str = "fednsam") -> FederatedAlgorithm:
  """FedNSAM; `client_optimizer` supplies the SGD update (momentum 0, weight decay 1e-3 by
  default through the registry); the SAM / Nesterov gradients are made here."""
  opt = common.as_client_optimizer(client_optimizer)
  if opt.is_sam:
    raise ValueError(f"algorithm.{name} makes its own SAM gradient: give it a plain ('sgd') "
                     f"client optimiser")
  if clip_norm is None:
    clip_norm = 10.0 if variant in ("n1", "n2") else 0.0
  clip_norm = float(clip_norm)
  extrapolate_start = variant in ("n1", "n2")
  loss_fn = common.cross_entropy_loss(apply_fn)
  values = common.hyperparameters(opt, rho=rho, gamma=gamma)

  def server_init(params):
    return FedNSAMServerState(params=params, momentum=tree.zeros_like(params))

  def broadcast(server_state, round_info):
    if extrapolate_start:
      gamma_t = hparams.of(round_info, values)["gamma"]
      return tree.axpy(gamma_t, server_state.momentum, server_state.params)   # w_hat
    return (server_state.params, server_state.momentum)

  def client_init(bcast, client_state, client_info, round_info):
    start, momentum = (bcast, ()) if extrapolate_start else bcast
    local = common.init_local(opt, start, round_info.learning_rate)
    return FedNSAMLocalState(params=local.params, opt_state=local.opt_state, momentum=momentum)

  def local_step(state, batch, key, round_info):
    hp = hparams.of(round_info, values)
    if extrapolate_start:
      (loss, logits), _, grads = sam.sam_value_and_grad(loss_fn, state.params, batch,
                                                        rho=hp["rho"])
    else:
      e = tree.scale(hp["gamma"], state.momentum)                       # n3: y + gamma m
      if variant == "n4":                                               # - rho m / ||m||
        e = tree.axpy(-hp["rho"], tree.normalize(state.momentum, N4_NORM_EPS), e)
      (loss, logits), grads = sam.grad_at(loss_fn, state.params, e, batch)
    grads = optimizers.clip_by_global_norm(grads, clip_norm)
    return common.optimizer_step(opt, state, grads), common.step_metrics(loss, logits, batch)

  def client_finalize(state, bcast, client_state, client_info, round_info):
    start = bcast if extrapolate_start else bcast[0]
    return tree.sub(state.params, start), client_state          # y_K - start

  def server_update(server_state, deltas_C, weights_C, mask_C, round_info):
    gamma_t = hparams.of(round_info, values)["gamma"]
    mean_delta = tree.weighted_sum(deltas_C, weights_C)
    if variant == "n1":
      factor = jnp.where(round_info.round == 0, 1.0, 1.0 + gamma_t)
      momentum = tree.scale(factor, mean_delta)
    else:
      momentum = tree.axpy(gamma_t, server_state.momentum, mean_delta)
    return FedNSAMServerState(params=tree.add(server_state.params, momentum),
                              momentum=momentum)

  return FederatedAlgorithm(
      name=name, server_init=server_init, client_state_init=lambda params: (),
      broadcast=broadcast, client_init=client_init, local_step=local_step,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda server_state: server_state.params,
      communication=Communication(down=1 if extrapolate_start else 2, up=1), hparams=values)


# The authors' local SGD: momentum 0, coupled weight decay 1e-3.
registration.register("fednsam", fed_nsam, client=registration.client_optimizers.own_sgd(1e-3),
                      title="FedNSAM",
                      paper='Liu et al., "FedNSAM: Consistency of Local and Global Flatness for '
                            'Federated Learning", arXiv:2602.23827, 2026',
                      weighting="uniform",
                      weighting_source="the authors' code: 1/|N_t| over the cohort "
                                       "(junkangLiu0/FedSWA, apply_weights_avgACG)")

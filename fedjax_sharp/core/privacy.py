"""Client-level differential privacy of the uploads: clipping and Gaussian noise inside the jitted
round (`with_dp`, any `FederatedAlgorithm`), and the `dp` config block (`FIELDS`).

What is protected: each sampled client's whole upload `u_m` (FedAvg's `w^t - w_m`, SCAFFOLD's
`(delta, control delta)`, ...), as DP-FedAvg (McMahan et al., ICLR 2018) and DP-FedSAM (Shi et
al., CVPR 2023) protect it: a client's participation changes what the server sees by a bounded
amount, hidden by Gaussian noise. One round, `m` real clients, clip norm `C`, noise multiplier
`sigma`:

    clip='global'      u_m <- u_m * min(1, C / ||u_m||)            (one L2 norm over the upload)
    clip='per_tensor'  every tensor l: u_ml <- u_ml * min(1, C / ||u_ml||)   (DP-FedSAM's code,
                       dpfedsam_api.py L76; the whole upload's norm is then <= C sqrt(L))
    noise='server'     z ~ N(0, sigma^2 C^2 I) once per round; the aggregate is
                       (sum_m u_m + z) / m  (DP-FedAvg: the noise is added to the sum of the
                       clipped updates and divided by the cohort size)
    noise='client'     every client adds its own z_m ~ N(0, sigma^2 C^2 / m I) before uploading
                       (DP-FedSAM's code, dpfedsam_api.py L73); the sum carries the same
                       N(0, sigma^2 C^2 I)

Both noise placements give the server the same distribution of the aggregate. 'server' noise is
applied by adding `z / n` to each of the `n` real uploads just before the algorithm's own server
update, which consumes the uploads only through weighted sums with equal weights `w` (or their
mask sums): the weighted sum then carries exactly `w z`, the mask sum `z`. With fixed-size
cohorts `w = 1/m`; under Poisson sampling (`core.cohort`) `w = 1/(q M)` whatever the realised
`n` (the fixed-denominator mean of TFF's DP-FedAvg: `(sum_m u_m + z) / (q M)`, sensitivity
`C s / (q M)`), and an empty draw's one weighted padding slot uploads zero and carries `z`
alone. 'client' noise takes `m` from the client's aggregation weight `1/m` (DP needs the uniform
weights: `aggregation='uniform'`; under Poisson sampling the sum of the shares would depend on
`n`, so that combination is refused by the config). Padding clients (weight 0) add nothing; a
slot that ran no local step uploads exactly zero. Without noise (sigma = 0) nothing is drawn,
and `C = inf` clips nothing: the round is then the algorithm's own program, bit for bit (XLA
fuses a multiplication by 1 or an addition of 0 differently, which moves results by an ulp).

Noise keys come from their own stream: `fold_in(round_key, STREAM_PRIVACY)` (the round key is
`fold_in(train_key, round)`, `RoundInfo.key`), split into a server key and a base that is folded
with the client id; client ids are < 2**31 - 1, so no client's training key equals it. A
resumed run draws the same noise.

An algorithm whose server weighs each upload by a data-dependent quantity, or uploads counts,
cannot be protected this way: it sets `FederatedAlgorithm.dp_unsupported` (FedCM and MoFedSAM,
the minimax algorithms), and `with_dp` refuses it naming `dp.enabled`. Every other algorithm's
whole upload is clipped jointly (several model-sized parts: one norm over all of them).

The accountant, the threat models and the solved noise multiplier: `core.accounting`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from fedjax_sharp.core import tree
from fedjax_sharp.core.algorithm import FederatedAlgorithm
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.hyperparameters import ON_OFF, check_value, declare

# The config block `dp`, the mechanism's and the accountant's fields (the rules between them and
# the rest of the config: `training.privacy_rules`).
FIELDS = declare(
    enabled=(False, ON_OFF, "client-level differential privacy of the uploads (the other dp "
             "fields apply only with it): each client's upload clipped and noised inside the "
             "round (docs/privacy.md)"),
    clip_norm=(1.0, "(0, inf]", "C, the L2 bound of each client's upload (inf: no clipping)"),
    noise_multiplier=(None, ">= 0", "sigma: noise std sigma * C on the sum of the clipped "
                      "uploads (None: 1, or solved from dp.target_epsilon; set one of the two)",
                      float),
    delta=(1e-5, "(0, 1)", "the delta of the reported epsilon(delta)"),
    clip=("global", ("global", "per_tensor"), "'global' (one norm over the whole upload) | "
          "'per_tensor' (every tensor clipped to C, DP-FedSAM's code)"),
    noise=("server", ("client", "server"), "'server' (one N(0, sigma^2 C^2) on the sum, "
           "DP-FedAvg) | 'client' (each client adds N(0, sigma^2 C^2 / m), DP-FedSAM's code)"),
    target_epsilon=(None, "> 0", "set: the noise multiplier is solved so that epsilon(delta) "
                    "after config.rounds rounds is this (leave dp.noise_multiplier unset; "
                    "summary.json records the solved value)", float),
    accountant=("auto", ("auto", "pld_poisson", "rdp", "rdp_poisson"),
                "'rdp' (fixed-size cohorts without replacement; replace-one) | 'rdp_poisson' | "
                "'pld_poisson' (Poisson sampling, add/remove-one) | 'auto' ('rdp' for fixed "
                "cohorts, 'pld_poisson' under Poisson sampling)"),
    record_client_metrics=(False, ON_OFF, "record the clients' unnoised train loss, accuracy "
                           "and step counts under DP (outside the guarantee)"),
    noise_cohort_size=(None, ">= 1", "simulate a cohort of N: the noise on the mean is what N "
                       "clients would get (sigma C / N) and the accountant sees N of "
                       "num_clients N / clients_per_round clients (pfl's noise_cohort_size)",
                       int),
    adaptive_clip=(False, ON_OFF, "adaptive clipping (Andrew et al. 2021): dp.clip_norm is C_0, "
                   "moved each round towards the dp.clip_quantile of the update norms"),
    clip_quantile=(0.5, "[0, 1]", "adaptive clipping: the target quantile of the update norms"),
    clip_lr=(0.2, "> 0", "adaptive clipping: C <- C exp(-clip_lr (unclipped fraction - "
             "quantile))"),
    clip_count_noise=(None, "> 0", "adaptive clipping: noise std of the count of unclipped "
                      "uploads, in clients (None: clients_per_round / 20); must exceed "
                      "dp.noise_multiplier / 2", float))
CLIPS = FIELDS["clip"].field.choices
NOISES = FIELDS["noise"].field.choices
# fold_in data of the privacy stream under the round key (client ids stay below it).
STREAM_PRIVACY = 2 ** 31 - 1


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """The clipping and noise applied to every upload (see the module docstring)."""
  clip_norm: float
  noise_multiplier: float
  clip: str = FIELDS["clip"].default
  noise: str = FIELDS["noise"].default
  prefix: str = "dp"     # the config block that set it (named in errors)
  # Adaptive clipping (Andrew et al., NeurIPS 2021): `clip_norm` is C_0, moved each round
  # towards the `clip_quantile` of the update norms at rate `clip_lr`, from a noised count of
  # the uploads that were not clipped (noise std `clip_count_noise`, in clients).
  adaptive: bool = False
  clip_quantile: float = FIELDS["clip_quantile"].default
  clip_lr: float = FIELDS["clip_lr"].default
  clip_count_noise: float = 1.0
  # m / N of `dp.noise_cohort_size`: the noise on the sum of the m uploads is scaled by it, so
  # that the mean carries the noise a cohort of N would (1: the run's own cohort).
  noise_scale: float = 1.0

  def __post_init__(self):
    p = self.prefix
    if not self.clip_norm > 0:
      raise ConfigError(f"{p}.clip_norm must be > 0, got {self.clip_norm}")
    if not self.noise_multiplier >= 0 or math.isinf(self.noise_multiplier):
      raise ConfigError(f"{p}.noise_multiplier must be a finite value >= 0, got "
                        f"{self.noise_multiplier}")
    if self.noise_multiplier > 0 and math.isinf(self.clip_norm):
      raise ConfigError(f"{p}.clip_norm must be finite when {p}.noise_multiplier > 0 (the noise "
                        f"is sigma * C), got {self.clip_norm}")
    for name in ("clip", "noise"):
      check_value(p, FIELDS[name], getattr(self, name))
    if self.adaptive:
      if self.clip != "global":
        raise ConfigError(f"{p}.adaptive_clip moves one clip norm for the whole upload: use "
                          f"{p}.clip='global', not {self.clip!r}")
      if self.noise_multiplier > 0 and not 2 * self.clip_count_noise > self.noise_multiplier:
        raise ConfigError(
            f"{p}.clip_count_noise={self.clip_count_noise:g} must exceed {p}.noise_multiplier / 2 "
            f"= {self.noise_multiplier / 2:g}: the count query and the update noise share the "
            f"budget of sigma (1/sigma^2 = 1/sigma_update^2 + 1/(2 sigma_count)^2)")

  @property
  def update_noise_multiplier(self) -> float:
    """The multiplier of the noise on the updates: sigma, or with adaptive clipping
    (sigma^-2 - (2 sigma_count)^-2)^-1/2, so that the updates and the clipped count together
    cost what one Gaussian of multiplier sigma costs (Andrew et al. 2021, Thm 1): the
    accountant keeps sigma."""
    sigma = self.noise_multiplier
    if not self.adaptive or sigma == 0:
      return sigma
    return (sigma ** -2 - (2 * self.clip_count_noise) ** -2) ** -0.5

  @property
  def noise_std(self) -> float:
    """sigma * C, the std of the noise on the sum of the clipped uploads (0 without noise; with
    adaptive clipping, that of round 0's C_0 and the update multiplier)."""
    return (0.0 if self.noise_multiplier == 0
            else self.update_noise_multiplier * self.clip_norm)


def clip(upload, clip_norm: float, mode: str = "global"):
  """`upload` scaled to L2 norm <= `clip_norm`: as one vector ('global') or tensor by tensor
  ('per_tensor'). Non-float leaves pass unchanged; a zero upload stays zero; `clip_norm = inf`
  returns `upload` itself (no operation: the program stays the algorithm's own, bit for bit).
  `clip_norm` may be traced (adaptive clipping)."""
  if isinstance(clip_norm, (int, float)) and math.isinf(clip_norm):
    return upload
  leaves, treedef = jax.tree.flatten(upload)

  def square_sum(x):   # in float32 at least (a bfloat16 upload), float64 in a float64 run
    return jnp.sum(jnp.square(x.astype(jnp.promote_types(x.dtype, jnp.float32))))

  def factor(sq):
    return jnp.minimum(1.0, clip_norm / jnp.maximum(jnp.sqrt(sq), jnp.finfo(sq.dtype).tiny))

  if mode == "global":
    sq = sum((square_sum(x) for x in leaves if tree.is_float(x)),
             jnp.zeros((), tree.float_dtype()))
    f = factor(sq)
    out = [x * f.astype(x.dtype) if tree.is_float(x) else x for x in leaves]
  elif mode == "per_tensor":
    out = [x * factor(square_sum(x)).astype(x.dtype) if tree.is_float(x) else x for x in leaves]
  else:
    raise ValueError(f"dp.clip={mode!r} is not one of {list(CLIPS)}")
  return jax.tree.unflatten(treedef, out)


def num_tensors(upload) -> int:
  """L, the float tensors of an upload (what 'per_tensor' clips one by one)."""
  return sum(1 for x in jax.tree.leaves(upload) if tree.is_float(x))


def gaussian_like(key, like, std):
  """N(0, std^2) noise shaped like the float leaves of `like` (zeros elsewhere)."""
  leaves, treedef = jax.tree.flatten(like)
  keys = jax.random.split(key, max(len(leaves), 1))
  out = [std * jax.random.normal(k, jnp.shape(x), jnp.result_type(x)) if tree.is_float(x)
         else jnp.zeros_like(x) for k, x in zip(keys, leaves)]
  return jax.tree.unflatten(treedef, out)


def noise_keys(round_key) -> tuple[jax.Array, jax.Array]:
  """(server key, base of the per-client keys) of one round's privacy stream."""
  if round_key is None:
    raise ValueError("the DP wrapper needs the engine's round key (RoundInfo.key): run the "
                     "algorithm through core.engine.RoundEngine")
  server_key, client_base = jax.random.split(jax.random.fold_in(round_key, STREAM_PRIVACY))
  return server_key, client_base


@flax.struct.dataclass
class AdaptiveClipState:
  """The server state of an algorithm under adaptive clipping: its own, and C_t."""
  inner: Any
  clip_norm: jax.Array


def adaptive_clip_update(clip_norm, unclipped_fraction, quantile: float, lr: float):
  """Andrew et al.'s geometric step: C <- C exp(-lr (b - quantile)), `b` the (noised)
  fraction of uploads the clip left unchanged; its fixed point is the `quantile` of the
  update norms."""
  return clip_norm * jnp.exp(-lr * (unclipped_fraction - quantile))


def _noise_on_real(uploads_C, z, mask_C):
  """`z / n` added to each of the n real uploads: the weighted sum with equal weights w then
  carries w z (w = 1/m, or 1/(q M) under Poisson sampling: the sum plus noise over the fixed
  denominator); the mask sum carries z."""
  share_C = mask_C / jnp.maximum(jnp.sum(mask_C), 1.0)
  return jax.tree.map(
      lambda u, n: u + (share_C.reshape((-1,) + (1,) * (u.ndim - 1)) * n[None]).astype(
          u.dtype) if tree.is_float(u) else u, uploads_C, z)


def with_dp(algorithm: FederatedAlgorithm, mechanism: Mechanism) -> FederatedAlgorithm:
  """`algorithm` whose uploads are clipped and noised by `mechanism` inside the round. With
  adaptive clipping the server state carries C_t (`AdaptiveClipState`), sent down with the
  algorithm's broadcast; each upload carries its clip indicator b_m - 1/2 (noised like the
  update, std `clip_count_noise`), and the server moves C by `adaptive_clip_update`."""
  if algorithm.dp_unsupported:
    raise ConfigError(f"{mechanism.prefix}.enabled: algorithm {algorithm.name!r} "
                      f"{algorithm.dp_unsupported}; use another algorithm or leave DP off")
  if algorithm.privacy is not None:
    raise ConfigError(f"{mechanism.prefix}.enabled: algorithm {algorithm.name!r} applies its own "
                      f"clipping and noise; leave {mechanism.prefix}.enabled False")
  adaptive = mechanism.adaptive
  sigma = mechanism.update_noise_multiplier * mechanism.noise_scale
  count_noise = mechanism.clip_count_noise * mechanism.noise_scale
  noised = mechanism.noise_multiplier > 0
  inner = (lambda state: state.inner) if adaptive else (lambda state: state)
  inner_bcast = (lambda bcast: bcast[0]) if adaptive else (lambda bcast: bcast)
  clip_norm_of = (lambda bcast: bcast[1]) if adaptive else (lambda bcast: mechanism.clip_norm)

  def server_init(params):
    state = algorithm.server_init(params)
    if not adaptive:
      return state
    return AdaptiveClipState(state, jnp.asarray(mechanism.clip_norm, tree.float_dtype()))

  def broadcast(server_state, round_info):
    bcast = algorithm.broadcast(inner(server_state), round_info)
    return (bcast, server_state.clip_norm) if adaptive else bcast

  def client_init(bcast, client_state, info, round_info):
    return algorithm.client_init(inner_bcast(bcast), client_state, info, round_info)

  def client_finalize(local, bcast, client_state, info, round_info):
    upload, new_state = algorithm.client_finalize(local, inner_bcast(bcast), client_state, info,
                                                  round_info)
    c = clip_norm_of(bcast)
    if adaptive:   # b_m - 1/2: the count query's sensitivity is 1/2
      upload = (upload, (tree.global_norm(upload) <= c).astype(tree.float_dtype()) - 0.5)
      upload = (clip(upload[0], c, mechanism.clip), upload[1])
    else:
      upload = clip(upload, c, mechanism.clip)
    # A padding slot (no local step) uploads exactly zero, its count too: the one an empty
    # Poisson draw weighs as a client (`core.cohort`) then carries the server's noise alone.
    upload = jax.tree.map(lambda u: jnp.where(info.num_steps > 0, u, jnp.zeros_like(u)), upload)
    if mechanism.noise == "client" and noised:
      # sigma C / sqrt(m), m = 1 / weight (uniform weights); padding clients (weight 0): 0.
      share = jnp.sqrt(jnp.maximum(info.weight, 0.0))
      key = jax.random.fold_in(noise_keys(round_info.key)[1], info.client_id)
      if adaptive:
        update_key, count_key = jax.random.split(key)
        upload = (tree.axpy(sigma * c * share, gaussian_like(update_key, upload[0], 1.0),
                            upload[0]),
                  upload[1] + count_noise * share
                  * jax.random.normal(count_key, (), upload[1].dtype))
      else:
        upload = tree.axpy(sigma * c * share, gaussian_like(key, upload, 1.0), upload)
    return upload, new_state

  def server_update(server_state, uploads_C, weights_C, mask_C, round_info):
    c = server_state.clip_norm if adaptive else mechanism.clip_norm
    if adaptive:
      uploads_C, counts_C = uploads_C
    if mechanism.noise == "server" and noised:
      key = noise_keys(round_info.key)[0]
      if adaptive:
        key, count_key = jax.random.split(key)
        counts_C = _noise_on_real(counts_C, count_noise * jax.random.normal(
            count_key, (), counts_C.dtype), mask_C)
      uploads_C = _noise_on_real(uploads_C, gaussian_like(key, tree.index(uploads_C, 0),
                                                          sigma * c), mask_C)
    new_state = algorithm.server_update(inner(server_state), uploads_C, weights_C, mask_C,
                                        round_info)
    if not adaptive:
      return new_state
    # The noised count's mean with the aggregation weights: 1 / m, or under Poisson sampling
    # the fixed denominator 1 / (q M) (TFF's expected_num_records), as the update's mean.
    unclipped = jnp.sum(weights_C * counts_C) + 0.5
    return AdaptiveClipState(new_state, adaptive_clip_update(
        c, unclipped, mechanism.clip_quantile, mechanism.clip_lr))

  if not adaptive:
    return dataclasses.replace(algorithm, client_finalize=client_finalize,
                               server_update=server_update, privacy=mechanism)

  def round_stats(server_state):
    stats = dict(algorithm.round_stats(server_state.inner)) if algorithm.round_stats else {}
    return {**stats, "dp_clip_norm": server_state.clip_norm}

  return dataclasses.replace(
      algorithm, server_init=server_init, broadcast=broadcast, client_init=client_init,
      client_finalize=client_finalize, server_update=server_update,
      eval_params=lambda state: algorithm.eval_params(state.inner), round_stats=round_stats,
      privacy=mechanism)


def upload_shape(algorithm: FederatedAlgorithm, params):
  """The abstract upload of one client (shapes and dtypes; nothing is computed)."""
  from fedjax_sharp.core.algorithm import ClientInfo, RoundInfo  # pylint: disable=g-import-not-at-top

  def one(params):
    info = RoundInfo.at(0, 0.1, key=jax.random.key(0))
    one_ = jnp.ones((), tree.float_dtype())
    client = ClientInfo(client_id=jnp.int32(0), num_examples=one_, num_steps=jnp.int32(1),
                        weight=one_)
    bcast = algorithm.broadcast(algorithm.server_init(params), info)
    state = algorithm.client_state_init(params)
    local = algorithm.client_init(bcast, state, client, info)
    return algorithm.client_finalize(local, bcast, state, client, info)[0]
  return jax.eval_shape(one, params)

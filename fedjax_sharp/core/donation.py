"""Buffer donation: the round donates the server state and the client table on every backend.

`RoundEngine` jits its round with `donate_argnums` for the server state and the client table,
so XLA updates them in place instead of holding two copies. Donation has one precondition:
no buffer may be passed twice. `jit(f, donate_argnums=...)(x, x)` fails with
"INVALID_ARGUMENT: Attempt to donate the same buffer twice in Execute()", on the CPU as on a
GPU. Two leaves share a buffer when a state is built eagerly from one array used twice, e.g.
`ServerState(params=params, h=zeros, s=zeros)`, or from the caller's own arrays (every
`server_init` returns `params` itself, which donation would then delete under the caller).

The engine makes that impossible (`unalias`): after `init` and after a checkpoint restore every
leaf that shares a buffer with an earlier leaf, or with a caller's array, is replaced by a copy.
Copying rather than refusing: sharing an immutable array is correct JAX, the hazard exists only
because the engine chose to donate, so the engine pays the one copy at start-up (a model-sized
copy, once per run). Sharing between two leaves of an algorithm's own state is still worth
knowing about (it is usually an `init` written for the eager case), so it is logged once with
the algorithm's name and both leaf paths. Outputs of a jitted function never share buffers (XLA
gives every output its own), so rounds cannot reintroduce sharing.
"""
from __future__ import annotations

from typing import Any, Iterable

from absl import logging
import jax
import jax.numpy as jnp


def buffer_ids(x) -> tuple:
  """The device buffers behind a leaf (one per addressable shard); () for non-arrays (NumPy
  arrays of a host table, Python scalars) and for empty arrays, which hold no buffer."""
  if not isinstance(x, jax.Array) or x.size == 0:
    return ()
  try:
    return tuple(s.data.unsafe_buffer_pointer() for s in x.addressable_shards)
  except Exception:  # pylint: disable=broad-except  # backends without raw pointers
    return (id(x),)


def shared_leaves(tree) -> list[tuple[str, str]]:
  """(earlier path, later path) for every leaf of `tree` that shares a buffer with an earlier
  one. Empty for a state that can be donated."""
  seen, pairs = {}, []
  for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
    name = jax.tree_util.keystr(path)
    for buf in buffer_ids(leaf):
      if buf in seen:
        pairs.append((seen[buf], name))
        break
    else:
      for buf in buffer_ids(leaf):
        seen[buf] = name
  return pairs


def unalias(tree, owner: str, reserved: Iterable[Any] = ()) -> Any:
  """`tree` with every leaf that shares a buffer with an earlier leaf, or with an array of
  `reserved` (the caller's, which must survive donation), replaced by a copy.

  `owner` names the state in the log line (e.g. "fedsmoo server state"): sharing between two
  leaves of `tree` is logged once per call with both paths; sharing with `reserved` is the
  normal case (`server_init` returning `params`) and is copied silently.
  """
  taken = {buf for leaf in jax.tree.leaves(reserved) for buf in buffer_ids(leaf)}
  reserved_taken = set(taken)
  first = {}
  internal = []

  def fix(path, leaf):
    bufs = buffer_ids(leaf)
    clash = [b for b in bufs if b in taken]
    if clash:
      if clash[0] not in reserved_taken:
        internal.append((first[clash[0]], jax.tree_util.keystr(path)))
      leaf = jnp.copy(leaf)
      bufs = buffer_ids(leaf)
    for b in bufs:
      taken.add(b)
      first.setdefault(b, jax.tree_util.keystr(path))
    return leaf

  out = jax.tree_util.tree_map_with_path(fix, tree)
  if internal:
    logging.warning("%s: %d leaves shared a buffer with another leaf (%s); copied them so the "
                    "round can donate the state (build each leaf from its own array in init to "
                    "avoid the copy)", owner, len(internal),
                    ", ".join(f"{a} and {b}" for a, b in internal))
  return out

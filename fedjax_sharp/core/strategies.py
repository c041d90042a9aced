"""How a round runs its clients: `Strategy` objects in one table, `STRATEGIES`.

A strategy is one of two kinds:

- a single program (`single_program = True`): the whole round is one jitted function
  (`RoundEngine.jitted_round`), and the strategy says how it maps the per-client computation
  over the cohort inside it (`over_clients(engine, fn, per_client)`: `fn` takes one client's
  slice of `per_client`, whose leaves have a leading client axis). Sweeps, `repeat_rounds` and
  a device mesh need this kind.
- dispatched from Python (`single_program = False`): `run_round(engine, ...)` runs the round
  from the engine's compiled pieces (`engine.compiled`: prepare, client_start, steps,
  client_end, finish) or its plain ones (`engine.prepare`, `engine.client_start`,
  `engine.batch`, `engine.run_steps`, `engine.finish`), as 'host' and 'debug' do.

Every strategy computes the same round (tests/test_engine.py). A strategy of your own is an
entry: `register_strategy(MyStrategy())`, then `ExecutionConfig(client_strategy='mine')`
(docs/adding_a_strategy.md).
"""
from __future__ import annotations

import jax

from fedjax_sharp.core import debugging, host_round, tree


class Strategy:
  """The interface (see the module docstring)."""
  name: str = ""
  single_program: bool = True

  def over_clients(self, engine, fn, per_client):
    """`fn` over every client slice of `per_client`, inside the round's jit."""
    raise NotImplementedError(f"strategy {self.name!r} runs its round from Python")

  def run_round(self, engine, server_state, client_table, data, cohort, round_info, key):
    """The round from the engine's pieces: (server state, client table, metric sums)."""
    raise NotImplementedError(f"strategy {self.name!r} is one jitted program")


class Vmap(Strategy):
  """Clients side by side: `jax.vmap`."""
  name = "vmap"

  def over_clients(self, engine, fn, per_client):
    return jax.vmap(fn)(per_client)


class Map(Strategy):
  """Clients one after another in one program: `lax.map`."""
  name = "map"

  def over_clients(self, engine, fn, per_client):
    return jax.lax.map(fn, per_client)


class ChunkedVmap(Strategy):
  """`lax.map` over vmapped chunks of `engine.execution.chunk_size` clients."""
  name = "chunked_vmap"

  def over_clients(self, engine, fn, per_client):
    return jax.lax.map(fn, per_client, batch_size=engine.execution.chunk_size)


class Unrolled(Strategy):
  """A Python loop over the clients inside the jit (one program, each client inlined)."""
  name = "unrolled"

  def over_clients(self, engine, fn, per_client):
    num = jax.tree.leaves(per_client)[0].shape[0]
    return tree.stack([fn(tree.index(per_client, c)) for c in range(num)])


class Host(Strategy):
  """Jitted pieces dispatched from Python, clients spread over devices (`core.host_round`)."""
  name = "host"
  single_program = False

  def run_round(self, engine, server_state, client_table, data, cohort, round_info, key):
    return host_round.host_round(engine, server_state, client_table, data, cohort, round_info,
                                 key)


class Debug(Strategy):
  """No jit: client by client, step by step, each stage checked and named
  (`core.debugging`)."""
  name = "debug"
  single_program = False

  def run_round(self, engine, server_state, client_table, data, cohort, round_info, key):
    return debugging.debug_round(engine, server_state, client_table, data, cohort, round_info,
                                 key)


STRATEGIES: dict[str, Strategy] = {}


def register_strategy(strategy: Strategy) -> Strategy:
  """Adds `strategy` to the table under `strategy.name` (replacing one of that name)."""
  if not strategy.name or strategy.name == "auto":
    raise ValueError(f"a strategy needs a name other than 'auto', got {strategy.name!r}")
  STRATEGIES[strategy.name] = strategy
  return strategy


for _strategy in (Vmap(), Map(), ChunkedVmap(), Unrolled(), Host(), Debug()):
  register_strategy(_strategy)


def get(name: str) -> Strategy:
  """The strategy registered as `name` (ValueError naming `engine.client_strategy`)."""
  if name not in STRATEGIES:
    raise ValueError(f"engine.client_strategy={name!r} is not one of "
                     f"{['auto', *STRATEGIES]}")
  return STRATEGIES[name]

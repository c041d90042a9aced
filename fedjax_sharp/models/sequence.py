"""Next-token models: fedjax's character LSTM (Shakespeare) and word LSTM (Stack Overflow).

Both are stateless pure functions `(params, x int [B, L]) -> logits [B, L, V]` (no dropout, no
batch statistics, the recurrent state starts at zero for every sequence), so the engine vmaps
them over clients like any classifier. The targets are per-token labels, whose loss and
accuracy masks `core.losses` describes.

The layers follow fedjax (`fedjax/models/shakespeare.py`, `stackoverflow.py`, Haiku):
- the LSTM is Haiku's `hk.LSTM`: one linear map of [x_t, h_{t-1}] to the gates (i, g, f, o),
  forget-gate bias +1, c_t = f c_{t-1} + sigmoid(i) tanh(g), h_t = sigmoid(o) tanh(c_t);
  `hk.DeepRNN` then applies tanh to each LSTM's output;
- initialisers are Haiku's defaults: embeddings truncated normal (stddev 1), weights truncated
  normal (stddev 1 / sqrt(fan_in)), biases zero.
The input projection of every time step is one matrix product before the recurrence; only the
recurrent product h_{t-1} W_h runs inside `lax.scan` over time.

V = `vocab_size`, which defaults (0) to the model's `num_classes`: the dataset's full
vocabulary, special tokens included (fedjax: 86 characters + 4 = 90 for Shakespeare, 10,000
words + 4 = 10,004 for Stack Overflow). Parameters: CharLSTM 820,522 with V = 90, WordLSTM
4,050,748 with V = 10,004: the counts fedjax's own model tests assert.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sharp.hyperparameters import Field


def _haiku_linear_init(fan_in: int):
  return nn.initializers.truncated_normal(stddev=1.0 / fan_in ** 0.5)


class LSTM(nn.Module):
  """One Haiku-style LSTM layer over a whole sequence: [B, L, D] -> hidden states [B, L, H]."""
  hidden: int

  @nn.compact
  def __call__(self, x):
    d, h_dim = x.shape[-1], self.hidden
    kernel = self.param("kernel", _haiku_linear_init(d + h_dim), (d + h_dim, 4 * h_dim))
    bias = self.param("bias", nn.initializers.zeros, (4 * h_dim,))
    kernel, bias = kernel.astype(x.dtype), bias.astype(x.dtype)
    gates_x = x @ kernel[:d] + bias                      # [B, L, 4H], all time steps at once
    w_h = kernel[d:]

    def step(carry, g_x):
      h, c = carry
      i, g, f, o = jnp.split(g_x + h @ w_h, 4, axis=-1)
      c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
      h = jax.nn.sigmoid(o) * jnp.tanh(c)
      return (h, c), h

    zeros = jnp.zeros((x.shape[0], h_dim), gates_x.dtype)
    _, hs = jax.lax.scan(step, (zeros, zeros), jnp.swapaxes(gates_x, 0, 1))
    return jnp.swapaxes(hs, 0, 1)


def _embed(tokens, vocab_size: int, features: int):
  return nn.Embed(vocab_size, features, name="embedding",
                  embedding_init=nn.initializers.truncated_normal(stddev=1.0))(
                      tokens.astype(jnp.int32))


class CharLSTM(nn.Module):
  """fedjax's Shakespeare model (McMahan et al., 2017): embedding 8, two LSTM layers of 256
  (each followed by tanh), a dense layer to the V logits of the next character."""
  num_classes: int = 90
  vocab_size: int = 0           # 0: num_classes
  embed: int = 8
  hidden: int = 256
  layers: int = 2
  # The fields of the config block `model.char_lstm` (defaults: the fields above).
  config_fields = {"embed": Field(">= 1", "embedding width"),
                   "hidden": Field(">= 1", "LSTM units per layer"),
                   "layers": Field(">= 1", "LSTM layers")}

  @nn.compact
  def __call__(self, tokens):
    v = self.vocab_size or self.num_classes
    h = _embed(tokens, v, self.embed)
    for i in range(self.layers):
      h = jnp.tanh(LSTM(self.hidden, name=f"lstm_{i}")(h))
    return nn.Dense(self.num_classes, kernel_init=_haiku_linear_init(self.hidden),
                    name="output")(h)


class WordLSTM(nn.Module):
  """fedjax's Stack Overflow model (Reddi et al., 2021): embedding 96, one LSTM of 670 (tanh),
  a dense projection to 96, a dense layer to the V logits of the next word."""
  num_classes: int = 10004
  vocab_size: int = 0           # 0: num_classes
  embed: int = 96
  hidden: int = 670
  config_fields = {"embed": Field(">= 1", "embedding width (and of the projection)"),
                   "hidden": Field(">= 1", "LSTM units")}

  @nn.compact
  def __call__(self, tokens):
    v = self.vocab_size or self.num_classes
    h = jnp.tanh(LSTM(self.hidden, name="lstm")(_embed(tokens, v, self.embed)))
    h = nn.Dense(self.embed, kernel_init=_haiku_linear_init(self.hidden), name="projection")(h)
    return nn.Dense(self.num_classes, kernel_init=_haiku_linear_init(self.embed),
                    name="output")(h)

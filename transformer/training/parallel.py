"""Spreading the train and eval steps over devices: a jit-compiled `Mesh` or classic `pmap`.

mesh (default): `jax.jit` over a Mesh with axes ('data', 'fsdp'). The batch is split over all
devices; parameters and optimizer state are sharded over 'fsdp' along their largest dimension
that the axis divides (replicated when fsdp = 1), which is FSDP/ZeRO-3 under XLA's SPMD.
pmap: state replicated on every local device, the batch split over a leading device axis, and
gradient sums combined with `psum` (the Flax examples' data parallelism).
Both compute the same global-batch update as one device.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from transformer.common.errors import UserError

PARALLELISMS = ("mesh", "pmap")


def check_parallelism(kind: str, fsdp: int) -> None:
    """train.parallelism and train.fsdp, as far as they can be checked without devices."""
    if kind not in PARALLELISMS:
        raise UserError(f"unknown train.parallelism {kind!r}; valid: {', '.join(PARALLELISMS)}")
    if not isinstance(fsdp, int) or fsdp < 1:
        raise UserError(f"train.fsdp={fsdp!r} must be a positive integer")
    if kind == "pmap" and fsdp != 1:
        raise UserError("train.fsdp > 1 needs train.parallelism='mesh'")


class Parallel:
    """Device layout for training; `compile_*` return step functions on global batches."""

    def __init__(self, kind: str = "mesh", fsdp: int = 1):
        check_parallelism(kind, fsdp)
        self.kind = kind
        self.devices = jax.devices()
        self.num_devices = len(self.devices)
        if self.num_devices % fsdp:
            raise UserError(
                f"train.fsdp={fsdp} must divide the device count {self.num_devices}; "
                f"set --config.train.fsdp to a divisor of it"
            )
        self.fsdp = fsdp
        mesh_devices = np.asarray(self.devices).reshape(self.num_devices // fsdp, fsdp)
        self.mesh = Mesh(mesh_devices, ("data", "fsdp"))
        self.batch_sharding = NamedSharding(self.mesh, P(("data", "fsdp")))
        self.replicated = NamedSharding(self.mesh, P())

    @property
    def local_devices(self):
        return jax.local_devices()

    # ------------------------------------------------------------------------------- state

    def param_sharding(self, x) -> NamedSharding:
        """Shard the largest dimension that 'fsdp' divides; replicate small or odd arrays."""
        if self.fsdp == 1 or x.ndim == 0:
            return self.replicated
        for dim in np.argsort(x.shape)[::-1]:
            if x.shape[dim] % self.fsdp == 0 and x.shape[dim] >= self.fsdp:
                spec = [None] * x.ndim
                spec[dim] = "fsdp"
                return NamedSharding(self.mesh, P(*spec))
        return self.replicated

    def state_shardings(self, state) -> Any:
        return jax.tree.map(self.param_sharding, state)

    def place_state(self, state):
        """Puts a host/default-device state where the compiled step expects it."""
        if self.kind == "pmap":
            n = len(self.local_devices)
            stacked = NamedSharding(
                Mesh(np.asarray(self.local_devices), ("devices",)), P("devices")
            )
            return jax.tree.map(
                lambda x: jax.device_put(jnp.broadcast_to(x, (n, *x.shape)), stacked), state
            )
        return jax.device_put(state, self.state_shardings(state))

    def logical_state(self, state):
        """The state as one copy (for checkpoints): pmap keeps a replica per device."""
        if self.kind == "pmap":
            return jax.tree.map(lambda x: x[0], state)
        return state

    # ------------------------------------------------------------------------------- batch

    def shard_batch(self, local_batch: dict[str, np.ndarray]):
        """This process's rows of the global batch -> arrays laid out for the step."""
        if self.kind == "pmap":
            n = len(self.local_devices)
            return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), local_batch)
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(self.batch_sharding, x), local_batch
        )

    # ------------------------------------------------------------------------------- steps

    def compile_train_step(self, make_step, state):
        """make_step(axis_name) -> train_step(state, batch, rng) -> (state, metrics)."""
        if self.kind == "pmap":
            step = make_step("devices")

            def per_device(state, batch, rng):
                rng = jax.random.fold_in(rng, jax.lax.axis_index("devices"))
                new_state, metrics = step(state, batch, rng)
                return new_state, metrics

            pmapped = jax.pmap(
                per_device, axis_name="devices", in_axes=(0, 0, None), donate_argnums=(0,)
            )

            def run(state, batch, rng):
                new_state, metrics = pmapped(state, batch, rng)
                return new_state, jax.tree.map(lambda x: x[0], metrics)

            return run
        shardings = self.state_shardings(state)
        return jax.jit(
            make_step(None),
            in_shardings=(shardings, self.batch_sharding, self.replicated),
            out_shardings=(shardings, self.replicated),
            donate_argnums=(0,),
        )

    def compile_eval_step(self, make_step, params):
        if self.kind == "pmap":
            pmapped = jax.pmap(make_step("devices"), axis_name="devices", in_axes=(0, 0))
            return lambda params, batch: jax.tree.map(lambda x: x[0], pmapped(params, batch))
        return jax.jit(
            make_step(None),
            in_shardings=(self.state_shardings(params), self.batch_sharding),
            out_shardings=self.replicated,
        )

"""The network a translator decodes with: the trained network's parameters in a network built
under a decode-time projection policy (`projection_policy.DecodeProjections`).

`decoding_network(trained, policy)` builds a new `Transformer` of the trained one's config,
backward-pass policy and instrumentation with `policy`'s linear layers: every variable the two
networks share by path (parameters, head masks) is the trained one's array, and every
`Projected` layer is made from the trained layers it names. The trained network is read,
never written. A translator builds it once per parameter set, in one compiled call, outside
its per-batch decode program.
"""

from __future__ import annotations

import functools

from flax import nnx

from transformer.model.ensemble import Ensemble
from transformer.model.projection_policy import Projected, ProjectionPolicy
from transformer.model.transformer import Transformer


def decoding_network(trained, policy: ProjectionPolicy):
    """`trained`'s weights in a Transformer whose linear layers `policy` chooses (an
    `Ensemble`: each member's decoding network)."""
    if isinstance(trained, Ensemble):
        return Ensemble([decoding_network(m, policy) for m in trained.members])
    abstract = nnx.eval_shape(
        lambda: Transformer(
            trained.cfg,
            rngs=nnx.Rngs(0),
            differentiation=trained.differentiation,
            instrumentation=trained.instrumentation,
            projections=policy,
        )
    )
    graphdef, state = nnx.split(abstract)
    trained_leaves = dict(nnx.to_flat_state(nnx.state(trained)))
    leaves = {}
    for path, module in nnx.iter_modules(abstract):
        if isinstance(module, Projected):
            copy = module.copy_of(_module_at(trained, path[:-1]), path[-1])
            for name, leaf in nnx.to_flat_state(nnx.state(copy)):
                leaves[(*path, *name)] = leaf
    for path, _ in nnx.to_flat_state(state):
        if path not in leaves:
            leaves[path] = trained_leaves[path]
    return nnx.merge(graphdef, nnx.from_flat_state(leaves))


def _module_at(root, path):
    """The submodule of root at an nnx path (attribute names and list indices)."""
    return functools.reduce(lambda m, k: m[k] if isinstance(k, int) else getattr(m, k), path, root)

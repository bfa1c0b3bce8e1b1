"""The training stream: Grain datasets from shuffled example ids to this process's batches.

The stream runs on the *global* sequence of kept training pairs (shuffled with
``train.seed``, a new permutation each epoch), which a `BatchPlanner` groups into global
batches of ``train.batch_size`` rows (pack, pad) or per-bucket row counts (bucket). Process
``shard_index`` of ``shard_count`` then materializes only its rows ``[shard_index * B /
shard_count, (shard_index + 1) * B / shard_count)`` of each global batch, so processes read
disjoint pairs whose union is the global batch, all processes agree on shapes (even with
bucketing), and the global stream does not depend on the number of processes. Iterator
state: ``get_state()`` is a small JSON-serialisable dict (the position in the shuffled stream
plus the ids waiting in the planner); ``set_state`` on a new iterator continues with exactly
the next batch, and refuses a state saved with other data settings. With subword sampling
(`transformer.data.sampling`) the stream carries positions instead of example ids, and each
plan takes its pairs' drawn segmentations along.
"""

from __future__ import annotations

from collections.abc import Callable

import grain
import numpy as np

from transformer.common.errors import UserError
from transformer.data.layout import BATCH_KEYS, BatchLayout
from transformer.data.planner import BatchPlanner
from transformer.data.sampling import Draws, SubwordSampler
from transformer.data.tokenized import TokenizedPairs

_STATE_VERSION = 1


def batch_stream(
    ids: grain.IterDataset,
    tokens: TokenizedPairs,
    layout: BatchLayout,
    *,
    shard_index: int,
    shard_count: int,
    check: dict,
    sampler: SubwordSampler | None = None,
) -> grain.IterDataset:
    """This process's batches from a stream of example ids (of stream positions with a
    ``sampler``); ``check``: the data settings a saved state must match (JSON-serialisable)."""
    if sampler is not None:
        plans = _PlanIterDataset(ids, lambda: _sampled_planner(layout, sampler), check)
        return plans.map(_MaterializeDrawn(tokens, layout, shard_index, shard_count))
    src_len, tgt_len = tokens.src_lengths, tokens.tgt_lengths
    plans = _PlanIterDataset(ids, lambda: (BatchPlanner(layout, src_len, tgt_len), None), check)
    return plans.map(_Materialize(tokens, layout, shard_index, shard_count))


def _sampled_planner(layout: BatchLayout, sampler: SubwordSampler):
    """A planner over one iterator's drawn segmentations, and those draws."""
    draws = Draws(sampler)
    return BatchPlanner(layout, draws.src_lengths, draws.tgt_lengths), draws


class _PlanIterDataset(grain.IterDataset):
    """Grain IterDataset turning a stream of example ids into batch plans."""

    def __init__(self, parent: grain.IterDataset, make_planner: Callable[[], tuple], check):
        super().__init__(parent)
        self._make_planner = make_planner  # -> (planner, its Draws or None)
        self._check = check

    def __iter__(self):
        return _PlanIterator(self._parent.__iter__(), *self._make_planner(), self._check)

    def __str__(self) -> str:
        return "PlanIterDataset"


class _PlanIterator(grain.DatasetIterator):
    def __init__(self, parent, planner: BatchPlanner, draws: Draws | None, check: dict):
        super().__init__(parent)
        self._planner = planner
        self._draws = draws
        self._pending: list[dict] = []
        self._exhausted = False
        self._check = check

    def __next__(self) -> dict:
        while not self._pending:
            if self._exhausted:
                raise StopIteration
            try:
                i = int(next(self._parent))
            except StopIteration:
                self._exhausted = True
                self._pending.extend(self._planner.flush())
                continue
            plan = self._planner.add(i)
            if plan is not None:
                self._pending.append(plan)
        plan = self._pending.pop(0)
        return plan if self._draws is None else self._draws.attach(plan)

    def get_state(self) -> dict:
        return {
            "version": _STATE_VERSION,
            "check": dict(self._check),
            "stream": self._parent.get_state(),
            "planner": self._planner.get_state(),
            "pending": [
                {"bucket": int(p["bucket"]), "ids": [list(map(int, r)) for r in p["ids"]]}
                for p in self._pending
            ],
            "exhausted": self._exhausted,
        }

    def set_state(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise UserError(
                "the saved data iterator state is not from this pipeline version; start the "
                "data stream afresh (drop the saved data state) or use the matching code"
            )
        saved = state["check"]
        if saved != self._check:
            diff = ", ".join(
                f"{k}: {saved.get(k)!r} -> {self._check.get(k)!r}"
                for k in {**saved, **self._check}
                if saved.get(k) != self._check.get(k)
            )
            raise UserError(
                f"the saved data iterator state belongs to other data settings ({diff}); "
                "restore with the original config or start the data stream afresh"
            )
        self._parent.set_state(state["stream"])
        self._planner.set_state(state["planner"])
        self._pending = [dict(p) for p in state["pending"]]
        self._exhausted = bool(state["exhausted"])

    def __str__(self) -> str:
        return "PlanIterator"


def fill_row(out: np.ndarray, seg: np.ndarray, pos: np.ndarray, r: int, pieces) -> None:
    """Writes ``pieces`` (token arrays) back to back into row ``r`` of ``out``, numbering them
    1, 2, ... in ``seg`` and counting 0, 1, ... per piece in ``pos`` (all [rows, width])."""
    at = 0
    for s, piece in enumerate(pieces, start=1):
        n = len(piece)
        out[r, at : at + n] = piece
        seg[r, at : at + n] = s
        pos[r, at : at + n] = np.arange(n)
        at += n


def empty_batch(rows: int, src_len: int, tgt_len: int) -> dict[str, np.ndarray]:
    """All-zero `BATCH_KEYS` arrays: ``src*`` [rows, src_len], ``tgt*`` [rows, tgt_len]."""
    return {
        k: np.zeros((rows, src_len if k.startswith("src") else tgt_len), np.int32)
        for k in BATCH_KEYS
    }


class _Materialize:
    """Plan -> this process's rows as a batch dict (a picklable Grain map function)."""

    def __init__(self, tokens: TokenizedPairs, layout: BatchLayout, shard_index, shard_count):
        self.tokens = tokens
        self.layout = layout
        self.shard_index = shard_index
        self.shard_count = shard_count

    def __call__(self, plan: dict) -> dict[str, np.ndarray]:
        b = int(plan["bucket"])
        rows = self.layout.rows(b) // self.shard_count
        s_len, t_len = self.layout.widths(b)
        start = self.shard_index * rows
        mine = plan["ids"][start : start + rows]
        batch = empty_batch(rows, s_len, t_len)
        tok = self._tokens(plan)
        for r, ids in enumerate(mine):
            fill_row(
                batch["src"],
                batch["src_segments"],
                batch["src_positions"],
                r,
                [tok.src(i) for i in ids],
            )
            fill_row(
                batch["tgt"],
                batch["tgt_segments"],
                batch["tgt_positions"],
                r,
                [tok.tgt(i) for i in ids],
            )
        return batch

    def _tokens(self, plan: dict):
        return self.tokens


class _MaterializeDrawn(_Materialize):
    """`_Materialize` for plans of stream positions that carry their drawn segmentations."""

    def _tokens(self, plan: dict) -> _PlanTokens:
        return _PlanTokens(plan["tokens"])


class _PlanTokens:
    """A plan's drawn segmentations with `TokenizedPairs`' ``src(k)`` / ``tgt(k)``."""

    def __init__(self, tokens: dict):
        self._tokens = tokens

    def src(self, k: int) -> np.ndarray:
        return self._tokens[k][0]

    def tgt(self, k: int) -> np.ndarray:
        return self._tokens[k][1]

"""BLEU and chrF per source-length bucket: where in the length distribution a model breaks.

Edges e_1 < e_2 < ... < e_k (source tokens, EOS included, as data.max_source_len counts them)
make k + 1 buckets: 1..e_1, e_1+1..e_2, ..., e_k+1 and longer. Each bucket is scored by
sacreBLEU on its own sentences (`metrics.score`); an empty bucket has no score.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformer.common.errors import UserError
from transformer.scoring import metrics

DEFAULT_EDGES = (10, 20, 30, 40)


def parse_edges(spec: str | Sequence[int]) -> tuple[int, ...]:
    """'10,20,30' (or a sequence) -> strictly increasing positive token counts."""
    if isinstance(spec, str):
        try:
            edges = tuple(int(x) for x in spec.split(",") if x.strip())
        except ValueError:
            raise UserError(
                f"--length_buckets={spec!r}: give increasing token counts, e.g. 10,20,30"
            ) from None
    else:
        edges = tuple(int(x) for x in spec)
    if not edges or edges[0] < 1 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise UserError(
            f"length bucket edges {list(edges)} must be positive and strictly increasing, "
            "e.g. 10,20,30"
        )
    return edges


def bucket_scores(
    source_lengths: Sequence[int],
    hypotheses: Sequence[str],
    references: Sequence[str],
    edges: Sequence[int] = DEFAULT_EDGES,
) -> list[dict]:
    """One dict per bucket: min_tokens, max_tokens (None for the last), sentences, bleu, chrf."""
    if not (len(source_lengths) == len(hypotheses) == len(references)):
        raise UserError("length buckets need one source length, hypothesis and reference each")
    edges = parse_edges(edges)
    bounds = list(zip((1, *(e + 1 for e in edges)), (*edges, None), strict=True))
    buckets = []
    for low, high in bounds:
        members = [
            i for i, n in enumerate(source_lengths) if n >= low and (high is None or n <= high)
        ]
        bucket = {
            "min_tokens": low,
            "max_tokens": high,
            "sentences": len(members),
            "bleu": None,
            "chrf": None,
        }
        if members:
            scores = metrics.score(
                [hypotheses[i] for i in members], [references[i] for i in members]
            )
            bucket.update(bleu=scores.bleu, chrf=scores.chrf)
        buckets.append(bucket)
    return buckets


def bucket_label(bucket: dict) -> str:
    low, high = bucket["min_tokens"], bucket["max_tokens"]
    return f"{low}+" if high is None else f"{low}-{high}"

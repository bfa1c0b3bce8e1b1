"""What a translation must hold, from the user's lines to a batch's arrays: target prefixes
(search.Prefix) and lexical constraints (constrained.Constraints), checked, tokenized and
padded to few static shapes (widths rounded up to 8) so that batches share compiled programs.

Characters the target vocabulary lacks become UNK when a prefix or phrase is tokenized, and
the output then starts with (or holds) UNK, not the text asked for: `check_vocabulary` warns
once per input line naming them, or refuses the line with strict_vocab."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from transformer.common.errors import UserError
from transformer.common.special_ids import EOS_ID, PAD_ID
from transformer.inference.constrained import Constraints
from transformer.inference.search import Prefix

WIDTH_MULTIPLE = 8


def tokenize_prefixes(tokenizer, prefixes, kept: Sequence[int], lines: int):
    """Target ids of prefixes[i] for each kept line i (None when prefixes is None)."""
    if prefixes is None:
        return None
    if len(prefixes) != lines:
        raise UserError(f"{len(prefixes)} target prefixes for {lines} lines; give one per line")
    return tokenizer.tokenize_batch([prefixes[i].strip() for i in kept])


def tokenize_constraints(tokenizer, constraints, kept: Sequence[int], lines: int):
    """Each kept line's phrases as target id lists, empty phrases dropped (None when
    constraints is None)."""
    if constraints is None:
        return None
    if len(constraints) != lines:
        raise UserError(f"{len(constraints)} constraint lists for {lines} lines; give one per line")
    phrases = [[p.strip() for p in constraints[i] if p.strip()] for i in kept]
    flat = tokenizer.tokenize_batch([p for line in phrases for p in line])
    out, start = [], 0
    for line in phrases:
        out.append([ids for ids in flat[start : start + len(line)] if ids])
        start += len(line)
    return out


def check_vocabulary(
    tokenizer, prefixes, constraints, kept: Sequence[int], line_ids, *, strict: bool = False
) -> None:
    """For each kept line kept[k] (numbered line_ids[k], from 0) whose prefix or constraint
    phrases hold characters outside the target vocabulary: one warning line on stderr
    naming the line and the characters, or with strict a UserError."""
    for line, i in zip(line_ids, kept, strict=True):
        what, texts = _forced_texts(prefixes, constraints, i)
        unknown = list(dict.fromkeys(c for t in texts for c in tokenizer.unknown_characters(t)))
        if not unknown:
            continue
        chars = ", ".join(repr(c) for c in unknown)
        where = (
            f"input line {line + 1}: the {what} has characters outside the target vocabulary "
            f"({chars})"
        )
        if strict:
            raise UserError(
                f"{where}; remove or replace them (without --strict_vocab they become <unk>)"
            )
        print(f"warning: {where}; they become <unk> in the output", file=sys.stderr, flush=True)


def _forced_texts(prefixes, constraints, i: int) -> tuple[str, list[str]]:
    """('target prefix' or 'constraint', the texts) line i forces; ('', []) for none."""
    if prefixes is not None:
        return "target prefix", [prefixes[i]]
    if constraints is not None:
        return "constraint", list(constraints[i])
    return "", []


def check(prefix_lists, constraint_lists, line_ids, max_len: int) -> None:
    """One prefix / constraint list per input, each leaving room for the EOS within
    max_len (model.max_len); not both at once."""
    if prefix_lists is not None and constraint_lists is not None:
        raise UserError("give target prefixes or lexical constraints, not both")
    if prefix_lists is not None:
        _check_lists("target prefix", [list(p) for p in prefix_lists], line_ids, max_len)
    if constraint_lists is not None:
        tokens = [[t for phrase in phrases for t in phrase] for phrases in constraint_lists]
        _check_lists("constraint", tokens, line_ids, max_len)


def _check_lists(what: str, token_lists, line_ids, max_len: int) -> None:
    if len(token_lists) != len(line_ids):
        raise UserError(
            f"{len(token_lists)} {what} lists for {len(line_ids)} inputs; give one per input"
        )
    for line, tokens in zip(line_ids, token_lists, strict=True):
        if len(tokens) + 1 > max_len:
            raise UserError(
                f"input line {line + 1}: {len(tokens)} {what} tokens leave no room for the EOS "
                f"within model.max_len={max_len}; shorten them"
            )
        if EOS_ID in tokens or PAD_ID in tokens:
            raise ValueError(f"input {line}: its {what} tokens hold the EOS or pad id")


def batch(prefix_lists, constraint_lists, chunk, *, rows: int) -> tuple[dict, int]:
    """(the translator's keyword arguments for the chunk's inputs: prefix or constraints and
    banks, the most tokens any input forces); ({}, 0) with neither."""
    if prefix_lists is not None:
        prefix = _prefix_batch([prefix_lists[i] for i in chunk], rows)
        return {"prefix": prefix}, int(prefix.lengths.max())
    if constraint_lists is not None:
        constraints = _constraint_batch([constraint_lists[i] for i in chunk], rows)
        total = int(constraints.total().max())
        return {"constraints": constraints, "banks": 1 + total}, total
    return {}, 0


def _prefix_batch(lists, rows: int) -> Prefix:
    width = _round_up(max(len(p) for p in lists))
    tokens = np.zeros((rows, width), np.int32)
    lengths = np.zeros(rows, np.int32)
    for r, ids in enumerate(lists):
        tokens[r, : len(ids)] = ids
        lengths[r] = len(ids)
    return Prefix(jnp.asarray(tokens), jnp.asarray(lengths))


def _constraint_batch(lists, rows: int) -> Constraints:
    count = max(1, max(len(phrases) for phrases in lists))
    width = _round_up(max((len(p) for phrases in lists for p in phrases), default=1))
    tokens = np.zeros((rows, count, width), np.int32)
    lengths = np.zeros((rows, count), np.int32)
    for r, phrases in enumerate(lists):
        for c, ids in enumerate(phrases):
            tokens[r, c, : len(ids)] = ids
            lengths[r, c] = len(ids)
    return Constraints(jnp.asarray(tokens), jnp.asarray(lengths))


def _round_up(n: int) -> int:
    return max(1, -(-n // WIDTH_MULTIPLE) * WIDTH_MULTIPLE)

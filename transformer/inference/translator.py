"""Translating text with a model's parameters: KV-cached greedy, sampling or beam search.

One `Translator` serves training's validation BLEU, eval.py and decode.py. A parameter set is
first made ready to decode (`Translator.prepare`, once per parameter set, in one compiled
call): the decoding network of the translator's projection policy, its decode-time weight
copies made from the trained parameters (transformer.model.decoding_network). Each batch then
runs as one compiled program: encode once, compute cross-attention keys/values once, then the
whole token loop in a `lax.while_loop` over a preallocated KV cache.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from transformer.common.errors import UserError
from transformer.common.special_ids import EOS_ID, PAD_ID
from transformer.data import source_batch, tokenize_sources
from transformer.inference import forcing, search
from transformer.inference.beam import beam_search
from transformer.inference.constrained import grid_beam_search
from transformer.inference.filters import filters_from_settings, parse_filters
from transformer.model.config import ModelConfig
from transformer.model.decoding_network import decoding_network
from transformer.model.projection_policy import (
    LAYOUTS,
    MEMORY_QUANTIZE,
    QUANTIZE,
    DecodeProjections,
    resolve_layout,
)

STRATEGIES = ("greedy", "sample", "beam")
# decode.cache_dtype: the self-attention cache and cross-attention keys/values as stored
# ('model': model.dtype); attention computes in model.dtype either way.
CACHE_DTYPES = ("model", "bfloat16")


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """The `decode` config section, validated."""

    strategy: str = "beam"
    beam_size: int = 4
    length_penalty: float = 0.6
    n_best: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    filters: str = ""
    num_samples: int = 1
    seed: int = 0
    max_len_a: float = 1.5
    max_len_b: int = 10
    min_len: int = 0
    batch_size: int = 64
    quantize: str = "none"
    encoder_quantize: str = "none"
    weight_layout: str = "auto"
    cache_dtype: str = "model"
    cache_start: int = 16

    def __post_init__(self):
        checks = [
            (
                self.strategy in STRATEGIES,
                f"unknown decode.strategy {self.strategy!r}; valid: " + ", ".join(STRATEGIES),
            ),
            (self.beam_size >= 1, f"decode.beam_size must be >= 1, got {self.beam_size}"),
            (
                1 <= self.n_best <= max(self.beam_size, 1) or self.strategy != "beam",
                f"decode.n_best={self.n_best} must be between 1 and beam_size={self.beam_size}",
            ),
            (self.temperature >= 0, f"decode.temperature must be >= 0, got {self.temperature}"),
            (self.top_k >= 0, f"decode.top_k must be >= 0 (0 = off), got {self.top_k}"),
            (0 < self.top_p <= 1, f"decode.top_p must be in (0, 1], got {self.top_p}"),
            (self.num_samples >= 1, f"decode.num_samples must be >= 1, got {self.num_samples}"),
            (self.batch_size >= 1, f"decode.batch_size must be >= 1, got {self.batch_size}"),
            (
                self.quantize in QUANTIZE,
                f"unknown decode.quantize {self.quantize!r}; valid: " + ", ".join(QUANTIZE),
            ),
            (
                self.encoder_quantize in MEMORY_QUANTIZE,
                f"unknown decode.encoder_quantize {self.encoder_quantize!r}; valid: "
                + ", ".join(MEMORY_QUANTIZE),
            ),
            (
                self.weight_layout in LAYOUTS,
                f"unknown decode.weight_layout {self.weight_layout!r}; valid: "
                + ", ".join(LAYOUTS),
            ),
            (
                self.cache_dtype in CACHE_DTYPES,
                f"unknown decode.cache_dtype {self.cache_dtype!r}; valid: "
                + ", ".join(CACHE_DTYPES),
            ),
            (self.min_len >= 0, f"decode.min_len must be >= 0, got {self.min_len}"),
            (
                self.cache_start >= 0,
                f"decode.cache_start must be >= 0 (0 = the whole cache from the first step), "
                f"got {self.cache_start}",
            ),
            (
                self.max_len_a >= 0 and self.max_len_b >= 0,
                "decode.max_len_a and decode.max_len_b must be >= 0",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(message)
        try:
            parse_filters(self.filters)
        except ValueError as e:
            raise UserError(f"decode.filters={self.filters!r}: {e}") from None

    @classmethod
    def from_config(cls, decode_config) -> DecodeSettings:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in dict(decode_config).items() if k in names}
        return cls(**values)

    @property
    def outputs_per_input(self) -> int:
        if self.strategy == "beam":
            return self.n_best
        return self.num_samples if self.strategy == "sample" else 1

    @property
    def rows_per_input(self) -> int:
        """Decoder rows per source: its beams, its samples, or 1."""
        if self.strategy == "beam":
            return self.beam_size
        return self.num_samples if self.strategy == "sample" else 1

    @property
    def projections(self) -> DecodeProjections:
        """The decoding network's projection policy (transformer.model.projection_policy):
        decode.weight_layout resolved for the rows of one decode step's products."""
        return DecodeProjections(
            step_layout=resolve_layout(self.weight_layout, self.batch_size * self.rows_per_input),
            step_quantize=self.quantize,
            memory_quantize=self.encoder_quantize,
        )


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A parameter set made ready to decode by `Translator.prepare`: the decoding network
    (graphdef, state), its weight copies made once."""

    graphdef: object
    state: object

    def network(self):
        return nnx.merge(self.graphdef, self.state)


@dataclasses.dataclass
class Translations:
    """hypotheses[i] holds the outputs for input i (n_best or num_samples of them)."""

    hypotheses: list[list[str]]
    scores: list[list[float]]
    num_truncated: int

    @property
    def best(self) -> list[str]:
        return [h[0] for h in self.hypotheses]


class Translator:
    """Translates with the model that (graphdef, params) from `nnx.split` describe.

    The methods take `params`, the state `graphdef` was split with, rather than a model, so
    one compiled program serves every parameter set of a run (averaged checkpoints, training's
    validation); or a `Prepared` from `prepare(params)`, which decodes many calls without
    making the weight copies again (decode.py's streaming batches). Whatever module state the
    model held at the split travels with it: head masks (research.head_masking) are in both
    the graphdef and the state, so masked decoding needs no argument of its own here.
    """

    def __init__(
        self, graphdef, model_cfg: ModelConfig, settings: DecodeSettings, src_tok, tgt_tok
    ):
        self.graphdef = graphdef
        self.model_cfg = model_cfg
        self.settings = settings
        self.src_tok = src_tok
        self.tgt_tok = tgt_tok
        self.filters = filters_from_settings(settings)  # greedy and beam: not sampling_only
        self._prepare_fn = nnx.jit(
            lambda p: decoding_network(nnx.merge(graphdef, p), settings.projections)
        )

    def prepare(self, params) -> Prepared:
        """`params` ready to decode: the decoding network with its weight copies (one compiled
        call; the trained parameters are read, never changed)."""
        if isinstance(params, Prepared):
            return params
        return Prepared(*nnx.split(self._prepare_fn(params)))

    # ------------------------------------------------------------------------- compiled core

    @property
    def _cache_dtype(self):
        return jnp.bfloat16 if self.settings.cache_dtype == "bfloat16" else None

    @functools.cached_property
    def _translate_fn(self):
        return jax.jit(self._translate_batch, static_argnames=("graphdef", "max_out", "banks"))

    def lower(self, prepared: Prepared, src, row_ids, max_out: int):
        """The batch program for these shapes, lowered for ahead-of-time compiling (the
        benchmarks); the compiled program is called as compiled(prepared.state, src, row_ids)."""
        return self._translate_fn.lower(
            prepared.state, src, row_ids, graphdef=prepared.graphdef, max_out=max_out
        )

    def _translate_batch(
        self, state, src, row_ids, prefix=None, constraints=None, *, graphdef, max_out, banks=1
    ):
        """src [B, S] (EOS-terminated, PAD_ID = padding) -> (tokens [B, R, max_out], scores [B, R]),
        by the decoding network (graphdef, state) of `prepare`; prefix: a search.Prefix per
        source ([B, P], [B]) each output starts with, or None; constraints: a
        constrained.Constraints per source every output holds (beam search in `banks` banks).

        R outputs per input: n_best (beam), num_samples (sample) or 1 (greedy).
        """
        s = self.settings
        model = nnx.merge(graphdef, state)
        src_segments = (src != PAD_ID).astype(jnp.int32)
        cross_kv = model.cross_kv(model.encode(src, src_segments=src_segments))
        if s.cache_dtype == "bfloat16":
            cross_kv = jax.tree.map(lambda a: a.astype(jnp.bfloat16), cross_kv)
        src_len = jnp.sum(src_segments, axis=1)
        max_lens = jnp.floor(s.max_len_a * src_len + s.max_len_b).astype(jnp.int32)  # [B]
        if prefix is not None:  # room for the prefix and max_len_b tokens after it
            max_lens = jnp.maximum(max_lens, prefix.lengths + max(s.max_len_b, 1))
        if constraints is not None:  # likewise for the constraint tokens
            max_lens = jnp.maximum(max_lens, constraints.total() + max(s.max_len_b, 1))
            return self._grid_search(
                model, cross_kv, src_segments, max_lens, constraints, max_out, banks
            )
        args = (model, cross_kv, src_segments, max_lens, prefix, max_out)
        if s.strategy == "beam":
            return self._beam_search(*args)
        return self._greedy_or_sample(*args, row_ids)

    def _growth(self, model, max_out: int) -> search.CacheGrowth:
        """The KV cache starts decode.cache_start positions long and doubles as the output
        grows, so each step attends to (and beam search reorders) about the filled part."""
        lengths = search.doubling_lengths(max_out, self.settings.cache_start)
        return search.CacheGrowth(lengths, model.grow_cache)

    def _init_cache(self, model, rows: int, growth: search.CacheGrowth):
        return model.init_cache(rows, growth.lengths[0], self._cache_dtype)

    def _beam_search(self, model, cross_kv, src_segments, max_lens, prefix, max_out: int):
        s = self.settings
        b, beam = src_segments.shape[0], s.beam_size
        growth = self._growth(model, max_out)
        out = beam_search(
            _decoder_step(model, cross_kv, src_segments),  # per source: shared by its beams
            self._init_cache(model, b * beam, growth),
            batch_size=b,
            beam_size=beam,
            max_len=max_out,
            max_lens=search.expand_to_beams(max_lens, beam),
            filters=self.filters,
            alpha=s.length_penalty,
            n_best=s.n_best,
            prefix=prefix,
            growth=growth,
        )
        return out.tokens, out.scores

    def _grid_search(self, model, cross_kv, src_segments, max_lens, constraints, max_out, banks):
        s = self.settings
        rows = src_segments.shape[0] * banks * s.beam_size
        growth = self._growth(model, max_out)
        out = grid_beam_search(
            _decoder_step(model, cross_kv, src_segments),  # per source: shared by its rows
            self._init_cache(model, rows, growth),
            constraints=constraints,
            beam_size=s.beam_size,
            max_len=max_out,
            max_lens=max_lens,
            filters=self.filters,
            alpha=s.length_penalty,
            n_best=s.n_best,
            banks=banks,
            growth=growth,
        )
        return out.tokens, out.scores

    def _greedy_or_sample(
        self, model, cross_kv, src_segments, max_lens, prefix, max_out: int, row_ids
    ):
        s = self.settings
        b = src_segments.shape[0]
        reps = s.num_samples if s.strategy == "sample" else 1
        callback = _decoder_step(model, cross_kv, src_segments)  # shared by a source's samples
        growth = self._growth(model, max_out)
        cache = self._init_cache(model, b * reps, growth)
        row_max = search.expand_to_beams(max_lens, reps)
        if prefix is not None:
            prefix = search.Prefix(*search.expand_to_beams(tuple(prefix), reps))
        common = dict(
            max_len=max_out, max_lens=row_max, filters=self.filters, prefix=prefix, growth=growth
        )
        if s.strategy == "greedy":
            out = search.greedy(callback, cache, **common)
        else:
            # One key per (sentence, sample): results never depend on the batch around them.
            sample_ids = row_ids[:, None] * reps + jnp.arange(reps)[None, :]
            keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(s.seed), i))(
                sample_ids.reshape(-1)
            )
            out = search.sample(callback, cache, rngs=keys, **common)
        return out.tokens.reshape(b, reps, max_out), out.scores.reshape(b, reps)

    # ------------------------------------------------------------------------------ text API

    def max_output_len(self, src_width: int, forced: int = 0) -> int:
        """Output positions of a batch: a * source width + b, and room for `forced` tokens
        (the longest prefix or constraint tokens) and max_len_b tokens more, within
        model.max_len."""
        s = self.settings
        from_source = math.floor(s.max_len_a * src_width + s.max_len_b)
        after_forced = forced + max(s.max_len_b, 1) if forced else 0
        return max(1, min(self.model_cfg.max_len, max(from_source, after_forced)))

    def translate_ids(
        self,
        params,
        id_lists: Sequence[Sequence[int]],
        line_ids: Sequence[int] | None = None,
        prefix_lists: Sequence[Sequence[int]] | None = None,
        constraint_lists: Sequence[Sequence[Sequence[int]]] | None = None,
    ):
        """EOS-terminated source id lists -> (token lists [n][R], scores [n][R]); params: the
        trained parameters or a `Prepared`.

        line_ids[i] numbers input i (default: i); sampling derives input i's random key from
        the seed and line_ids[i] alone, so its samples never depend on the batch around it.
        prefix_lists[i] (target ids, no EOS; may be empty): every output of input i starts
        with them, and its score counts their model log-probabilities. constraint_lists[i]:
        phrases (target id lists) every output of input i holds (beam search only).
        """
        s = self.settings
        prepared = self.prepare(params) if len(id_lists) else None
        line_ids = np.arange(len(id_lists)) if line_ids is None else np.asarray(line_ids)
        if len(line_ids) != len(id_lists):
            raise ValueError(f"{len(line_ids)} line ids for {len(id_lists)} inputs")
        forcing.check(prefix_lists, constraint_lists, line_ids, self.model_cfg.max_len)
        if constraint_lists is not None and s.strategy != "beam":
            raise UserError(
                f"lexical constraints need beam search; decode.strategy={s.strategy!r}: set "
                "--config.decode.strategy=beam"
            )
        order = np.argsort([len(x) for x in id_lists], kind="stable")  # similar lengths together
        results: list = [None] * len(id_lists)
        for start in range(0, len(order), s.batch_size):
            chunk = order[start : start + s.batch_size]
            longest = max(len(id_lists[i]) for i in chunk)
            width = min(_round_up(longest, 8), max(longest, self.model_cfg.max_len))
            batch = source_batch([id_lists[i] for i in chunk], s.batch_size, width)
            row_ids = np.zeros(s.batch_size, np.int32)
            row_ids[: len(chunk)] = line_ids[chunk]
            forced, longest_forced = forcing.batch(
                prefix_lists, constraint_lists, chunk, rows=s.batch_size
            )
            tokens, scores = self._translate_fn(
                prepared.state,
                jnp.asarray(batch["src"]),
                jnp.asarray(row_ids),
                graphdef=prepared.graphdef,
                max_out=self.max_output_len(width, longest_forced),
                **forced,
            )
            tokens, scores = np.asarray(tokens), np.asarray(scores)
            for r, i in enumerate(chunk):
                results[i] = ([_until_eos(t) for t in tokens[r]], scores[r].tolist())
        return [r[0] for r in results], [r[1] for r in results]

    def translate(
        self,
        params,
        lines: Sequence[str],
        first_id: int = 0,
        prefixes: Sequence[str] | None = None,
        constraints: Sequence[Sequence[str]] | None = None,
        strict_vocab: bool = False,
    ) -> Translations:
        """Raw source lines -> detokenized translations (empty line in, empty line out).

        first_id is the line number of lines[0] in the whole input (decode.py's streaming
        batches): line i is numbered first_id + i, empty lines included. prefixes[i]: text
        every translation of line i starts with (target side; '' = none); constraints[i]:
        phrases every translation of line i holds (beam search). A prefix or phrase with
        characters the target vocabulary lacks is a warning naming the line, or with
        strict_vocab a UserError (forcing.check_vocabulary).
        """
        ids, truncated = tokenize_sources(lines, self.src_tok, self.model_cfg.max_len)
        nonempty = [i for i, line in enumerate(lines) if line.strip()]
        line_ids = [first_id + i for i in nonempty]
        prefix_lists = forcing.tokenize_prefixes(self.tgt_tok, prefixes, nonempty, len(lines))
        phrase_lists = forcing.tokenize_constraints(self.tgt_tok, constraints, nonempty, len(lines))
        forcing.check_vocabulary(
            self.tgt_tok, prefixes, constraints, nonempty, line_ids, strict=strict_vocab
        )
        token_lists, scores = self.translate_ids(
            params, [ids[i] for i in nonempty], line_ids, prefix_lists, phrase_lists
        )
        reps = self.settings.outputs_per_input
        hypotheses = [[""] * reps for _ in lines]
        all_scores = [[0.0] * reps for _ in lines]
        for i, toks, sc in zip(nonempty, token_lists, scores, strict=True):
            hypotheses[i] = [self.tgt_tok.detokenize(t) for t in toks]
            all_scores[i] = sc
        return Translations(hypotheses, all_scores, truncated)


def _decoder_step(model, cross_kv, src_segments):
    """The search loops' step: (tokens [R], step, cache) -> (logits [R, V], cache), one token
    per row through the cached decoder; cross_kv and src_segments [B, S] are per source, each
    shared by its R / B rows (beams or samples)."""

    def tokens_to_logits(tokens, step, cache):
        logits, cache = model.decode(
            None, src_segments, tokens[:, None], cross_kv=cross_kv, cache=cache, cache_index=step
        )
        return logits[:, 0], cache

    return tokens_to_logits


def _until_eos(tokens: np.ndarray) -> list[int]:
    out = []
    for t in tokens.tolist():
        if t in (EOS_ID, PAD_ID):
            break
        out.append(t)
    return out


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m

"""eval.py's and decode.py's --ensemble: a restored run joined by the networks of other runs
(or other checkpoints of the same run) into one `model.ensemble.Ensemble`, decoded in one
compiled loop. The members must share the run's tokenizers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from flax import nnx

from transformer.common.errors import UserError
from transformer.evaluation.restore import RestoredRun, restore_run
from transformer.inference.translator import Translator
from transformer.model.ensemble import Ensemble
from transformer.training.checkpoint import UnreadableCheckpoint
from transformer.training.run_state import tokenizer_fingerprints

NAMED_CHECKPOINTS = ("latest", "best")


def parse_member(spec: str) -> tuple[str, str]:
    """'DIR' or 'DIR:latest|best|STEP' -> (DIR, checkpoint)."""
    workdir, _, checkpoint = spec.rpartition(":")
    if workdir and (checkpoint in NAMED_CHECKPOINTS or checkpoint.isdigit()):
        return workdir, checkpoint
    return spec, "latest"


def with_members(run: RestoredRun, specs: Sequence[str], overrides=()) -> RestoredRun:
    """`run` decoding as the ensemble of its network and the members `specs` name
    (parse_member); the decode settings and tokenizers stay `run`'s."""
    if not specs:
        return run
    members = [run]
    for spec in specs:
        members.append(_restore_member(spec, overrides))
        _check_tokenizers(run, members[-1])
    ensemble = Ensemble([nnx.merge(m.graphdef, m.params) for m in members])
    graphdef, params = nnx.split(ensemble, nnx.Param)
    # Every member must hold every position decoded: the shortest max_len bounds them all.
    model_cfg = dataclasses.replace(
        run.model_cfg, max_len=min(m.model_cfg.max_len for m in members)
    )
    data = run.data
    translator = Translator(
        graphdef, model_cfg, run.translator.settings, data.source_tokenizer, data.target_tokenizer
    )
    return dataclasses.replace(
        run,
        graphdef=graphdef,
        params=params,
        translator=translator,
        members=[(m.workdir, m.step) for m in members],
    )


def _restore_member(spec: str, overrides) -> RestoredRun:
    workdir, checkpoint = parse_member(spec)
    try:
        return restore_run(workdir, checkpoint=checkpoint, overrides=overrides)
    except UnreadableCheckpoint as e:  # another member is picked by --ensemble, not --checkpoint
        raise UnreadableCheckpoint(
            e.directory, e.step, e.reason, e.others, pick=f"--ensemble {workdir}:STEP"
        ) from None


def _check_tokenizers(run: RestoredRun, member: RestoredRun) -> None:
    ours, theirs = tokenizer_fingerprints(run.data), tokenizer_fingerprints(member.data)
    for side, fingerprint in ours.items():
        if theirs[side] != fingerprint:
            raise UserError(
                f"ensemble member {member.workdir}: its {side} tokenizer (fingerprint "
                f"{theirs[side]}) is not {run.workdir}'s ({fingerprint}); ensemble members "
                "must share tokenizers (runs trained with the same data.vocab_path)"
            )

"""Early stopping with patience (transformer/training/early_stopping.py): the counter against
closed-form and hand-worked cases, a tiny run that stops where the rule says and stays
stopped on rerun, the best checkpoint ranked by the validation score, and eval's default
checkpoint for such a run."""

import numpy as np
import pytest

from tests.helpers import tiny_config
from transformer.common.errors import UserError
from transformer.training import run_config
from transformer.training.checkpoint import Checkpointer
from transformer.training.early_stopping import EarlyStopping


def stop_index(scores, patience, min_delta=0.0) -> int | None:
    stopping = EarlyStopping(metric="bleu", patience=patience, min_delta=min_delta)
    for i, score in enumerate(scores):
        stopping.update(i, {"bleu": score})
        if stopping.exhausted:
            return i
    return None


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("patience", [1, 2, 4])
def test_with_no_min_delta_it_stops_when_the_last_patience_scores_are_no_record(seed, patience):
    """Closed form: stop at the first i whose last `patience` validations all stay at or
    below the best one before them."""
    scores = np.random.default_rng(seed).integers(0, 6, size=15).astype(float).tolist()
    expected = next(
        (
            i
            for i in range(patience, len(scores))
            if max(scores[i - patience + 1 : i + 1]) <= max(scores[: i - patience + 1])
        ),
        None,
    )
    assert stop_index(scores, patience) == expected


def test_min_delta_counts_small_gains_as_no_improvement():
    # 10 -> 10.4 (+0.4, not > 0.5: no improvement) -> 11 (+1 over the best 10: a new best)
    assert stop_index([10, 10.4, 11, 11.3, 11.5], patience=2, min_delta=0.5) == 4
    assert stop_index([10, 10.4, 10.2], patience=2, min_delta=0.5) == 2
    assert stop_index([10, 10.4, 10.2], patience=2, min_delta=0.0) is None


def test_loss_ranks_lower_as_better_and_the_state_round_trips():
    stopping = EarlyStopping(metric="loss", patience=2)
    for step, loss in [(10, 3.0), (20, 2.5), (30, 2.6)]:
        stopping.update(step, {"loss": loss})
    assert (stopping.best_step, stopping.since_best, stopping.exhausted) == (20, 1, False)
    assert stopping.score({"loss": 2.5}) > stopping.score({"loss": 2.6})
    resumed = EarlyStopping(metric="loss", patience=2)
    resumed.load(stopping.state())
    resumed.update(40, {"loss": 2.55})
    assert resumed.exhausted and resumed.best_step == 20


def test_best_checkpoint_is_the_best_score_not_the_latest(tmp_path):
    checkpoints = Checkpointer(str(tmp_path), keep=1)
    for step, score in [(1, 10.0), (2, 30.0), (3, 20.0), (4, None)]:
        checkpoints.save(step, {"x": np.full(3, step)}, {"i": step}, {"step": step}, score)
    checkpoints.wait()
    checkpoints.close()
    reopened = Checkpointer(str(tmp_path), read_only=True)
    assert reopened.all_steps() == [2, 4]  # the latest and the best are kept
    assert reopened.resolve_step("best") == 2 and reopened.resolve_step("latest") == 4
    reopened.close()


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("early_stopping_metric", "bleu4", "train.early_stopping_metric must be one of"),
        ("early_stopping_patience", -1, "train.early_stopping_patience must be an integer"),
        ("early_stopping_min_delta", -0.1, "train.early_stopping_min_delta must be >= 0"),
    ],
)
def test_bad_early_stopping_settings_are_one_line_errors(field, value, message):
    with pytest.raises(UserError, match=message):
        run_config.validate(tiny_config(**{f"train__{field}": value}))
    with pytest.raises(UserError, match="needs train.eval_bleu_sentences >= 1"):
        config = tiny_config(train__early_stopping_patience=2, train__eval_bleu_sentences=0)
        run_config.validate(config)


def test_a_run_stops_where_the_rule_says_and_stays_stopped(tmp_path):
    """Loss must fall by 10 nats to count, so only the first validation is a best: with
    validations every 10 steps and patience 2 the run stops at step 30, between its
    checkpoints at 20 and 40, and saves one there (and one at 10, its best validation)."""
    from transformer.common.metrics_file import read_metrics
    from transformer.evaluation.restore import restore_run
    from transformer.training.loop import train_and_evaluate

    workdir = str(tmp_path / "run")
    config = tiny_config(
        train__num_steps=100,
        train__eval_every=10,
        train__checkpoint_every=20,
        train__eval_bleu_sentences=0,
        train__early_stopping_patience=2,
        train__early_stopping_metric="loss",
        train__early_stopping_min_delta=10.0,
    )
    result = train_and_evaluate(config, workdir)
    assert (result.step, result.stopped_early) == (30, True)
    checkpoints = Checkpointer(workdir, read_only=True)
    assert checkpoints.all_steps() == [10, 20, 30]  # 10: a new best; 30: where it stopped
    assert checkpoints.resolve_step("best") == 10  # the only best: the first validation
    checkpoints.close()
    info = read_metrics(f"{workdir}/metrics.jsonl", kind="info")
    assert any(r["message"].startswith("early stopping at step 30") for r in info)
    again = train_and_evaluate(config, workdir)  # rerun: nothing more to train
    assert (again.step, again.stopped_early) == (30, True)
    assert restore_run(workdir).step == 10  # eval.py's default: the best checkpoint
    assert restore_run(workdir, checkpoint="latest").step == 30
    _a_sweep_counts_it_finished_once_evaluated(workdir, tmp_path)


def _a_sweep_counts_it_finished_once_evaluated(workdir: str, tmp_path):
    import json
    import os

    from transformer.evaluation.evaluator import evaluate
    from transformer.research.sweep.runs import Run, is_finished

    sweep_run = Run("early", 0, workdir, {}, {}, "base.py", "valid", num_steps=100)
    assert not is_finished(sweep_run)  # not evaluated yet
    evaluate(workdir, split="valid", overrides=["decode.strategy=greedy"])
    assert json.load(open(sweep_run.eval_json))["step"] == 10 and is_finished(sweep_run)
    other = tmp_path / "not_stopped"  # an evaluation before the last step, no early stop
    (other / "eval").mkdir(parents=True)
    (other / "eval" / "valid.json").write_text(json.dumps({"step": 10}))
    assert not is_finished(Run("x", 0, os.fspath(other), {}, {}, "base.py", "valid", num_steps=100))

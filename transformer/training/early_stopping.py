"""Early stopping with patience: training stops once the validation metric (BLEU or loss)
has not improved by `min_delta` for `patience` validations in a row.

The counter and the best value travel in every checkpoint's metadata (`state()` /
`load()`), and a validation always comes before the checkpoint of its step, so a run killed
and resumed from any checkpoint stops at the step an uninterrupted run stops at. `score`
turns a validation into the checkpoint's ranking metric (higher is better), which also
decides the `best` checkpoint that retention keeps and eval.py reads by default when early
stopping is on.
"""

from __future__ import annotations

import dataclasses

from transformer.common.errors import UserError

METRICS = ("bleu", "loss")
# The metrics.jsonl info row that ends a run early (sweeps read it: the run is finished).
STOPPED_MESSAGE = "early stopping at step"


@dataclasses.dataclass
class EarlyStopping:
    metric: str = "bleu"
    patience: int = 0  # validations without improvement before stopping; 0: never stop
    min_delta: float = 0.0  # improvement needed, in BLEU points or nats per token
    best: float | None = None  # the best score so far (higher is better)
    best_step: int | None = None
    since_best: int = 0  # validations since the best one

    @classmethod
    def from_config(cls, train) -> EarlyStopping:
        return cls(
            metric=train.early_stopping_metric,
            patience=int(train.early_stopping_patience),
            min_delta=float(train.early_stopping_min_delta),
        )

    @property
    def on(self) -> bool:
        return self.patience > 0

    def score(self, validation: dict) -> float | None:
        """The validation's ranking score, higher is better (BLEU, or minus the loss); None
        when the validation lacks the metric (no BLEU sentences decoded)."""
        if self.metric == "loss":
            return -float(validation["loss"])
        bleu = validation.get("bleu")
        return None if bleu is None else float(bleu)

    def update(self, step: int, validation: dict) -> None:
        """Counts one validation: a new best resets the count, anything else adds one."""
        score = self.score(validation)
        if score is None:
            return
        if self.best is None or score > self.best + self.min_delta:
            self.best, self.best_step, self.since_best = score, step, 0
        else:
            self.since_best += 1

    @property
    def exhausted(self) -> bool:
        return self.on and self.since_best >= self.patience

    def describe(self) -> str:
        best = -self.best if self.metric == "loss" else self.best
        return (
            f"validation {self.metric} has not improved by more than {self.min_delta} for "
            f"{self.since_best} validations (best {best:.4f} at step {self.best_step})"
        )

    def state(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "since_best": self.since_best}

    def load(self, state: dict | None) -> None:
        """The counter and best value a checkpoint carries (absent in older checkpoints)."""
        if state:
            self.best, self.best_step = state["best"], state["best_step"]
            self.since_best = int(state["since_best"])


def check_config(train) -> None:
    """train.early_stopping_* values, each bad one a one-line error."""
    if train.early_stopping_metric not in METRICS:
        raise UserError(
            f"train.early_stopping_metric must be one of {', '.join(METRICS)}, got "
            f"{train.early_stopping_metric!r}"
        )
    patience = train.early_stopping_patience
    if not isinstance(patience, int) or patience < 0:
        raise UserError(
            f"train.early_stopping_patience must be an integer >= 0 (0 = off), got {patience!r}"
        )
    if train.early_stopping_min_delta < 0:
        raise UserError(
            f"train.early_stopping_min_delta must be >= 0, got {train.early_stopping_min_delta}"
        )
    if patience and train.early_stopping_metric == "bleu" and train.eval_bleu_sentences < 1:
        raise UserError(
            "early stopping on validation BLEU needs train.eval_bleu_sentences >= 1; set it or "
            "use train.early_stopping_metric=loss"
        )

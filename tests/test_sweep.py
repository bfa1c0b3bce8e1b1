"""Sweep runner: variants x seeds in subprocesses, skip/resume, failures, results and plots."""

import csv
import json
import os

import pytest

from transformer.cli import sweep as sweep_cli
from transformer.common.errors import UserError
from transformer.research import sweep as sw
from transformer.research.sweep.runs import classify_failure

TINY = {  # tests/helpers.tiny_config as overrides of configs/default.py, shortened further
    "data.vocab_size": 200,
    "model.d_model": 32,
    "model.num_heads": 4,
    "model.d_ff": 64,
    "model.num_encoder_layers": 1,
    "model.num_decoder_layers": 1,
    "model.max_len": 64,
    "model.dropout_rate": 0.0,
    "data.synthetic_train_size": 1500,
    "data.synthetic_eval_size": 8,
    "data.max_source_len": 32,
    "data.max_target_len": 32,
    "train.batch_size": 16,
    "train.num_steps": 6,
    "train.warmup_steps": 2,
    "train.schedule": "rsqrt",
    "train.learning_rate": 3e-3,
    "train.log_every": 3,
    "train.eval_every": 3,
    "train.checkpoint_every": 6,
    "train.eval_bleu_sentences": 0,
    "decode.batch_size": 8,
    "decode.max_len_b": 5,
}


def _write_sweep(tmp_path, variants, seeds=(0, 1), parallel=2):
    path = tmp_path / "sweep_cfg.py"
    path.write_text(
        "def get_config():\n"
        f"    return {{'base': 'configs/default.py', 'overrides': {TINY!r},\n"
        f"            'variants': {variants!r}, 'seeds': {list(seeds)!r},\n"
        "            'eval_split': 'test', 'eval_overrides': {'decode.strategy': 'greedy'},\n"
        f"            'parallel': {parallel}}}\n"
    )
    return str(path)


def _attempts(log_path):
    with open(log_path) as f:
        return sum(line.startswith("=== 20") for line in f)


def test_grid_names_and_key_resolution(tmp_path):
    variants = sw.grid(norm_position=["pre", "post"], activation=["relu", "gelu"])
    assert list(variants)[0] == "norm_position=pre,activation=relu"
    assert len(variants) == 4
    assert sw.grid({"train.warmup_steps": [0, 100]}) == {
        "warmup_steps=0": {"train.warmup_steps": 0},
        "warmup_steps=100": {"train.warmup_steps": 100},
    }
    sweep = sw.load_sweep(_write_sweep(tmp_path, {"v": {"norm_position": "post"}}))
    assert sweep.variants == {"v": {"model.norm_position": "post"}}
    for bad in ({"seed": 1}, {"model.nope": 1}):  # ambiguous (train/decode), unknown
        with pytest.raises(UserError):
            sw.load_sweep(_write_sweep(tmp_path, {"v": bad}))
    assert classify_failure(2, "error: non-finite loss (nan) at step 7; ...") == "diverged"
    assert classify_failure(1, "Traceback ...\nValueError: boom") == "failed"


@pytest.mark.slow
def test_sweep_runs_resumes_records_failures_and_reports(tmp_path, capsys):
    variants = {
        "pre": {"model.norm_position": "pre"},
        "post": {"model.norm_position": "post", "model.activation": "gelu"},
        "bad": {"model.activation": "nonsense"},
    }
    config = _write_sweep(tmp_path, variants)
    workdir = str(tmp_path / "sweep")
    args = ["--config", config, "--workdir", workdir, "--poll_s", "1"]
    assert sweep_cli.main(args) == 0
    out = capsys.readouterr().out
    assert "[1/6] variant=pre seed=0: training" in out
    assert "[2/6] variant=post seed=0: training" in out  # seed-major: every variant's seed 0 first
    assert "FAILED (invalid config)" in out and "nonsense" in out
    for name in ("pre", "post"):
        for seed in (0, 1):
            run = os.path.join(workdir, name, str(seed))
            status = json.load(open(os.path.join(run, "status.json")))
            assert status["status"] == "done", status
            record = json.load(open(os.path.join(run, "eval", "test.json")))
            assert record["step"] == 6 and record["decode"]["strategy"] == "greedy"
            assert json.load(open(os.path.join(run, "config.json")))["train"]["seed"] == seed
    bad = json.load(open(os.path.join(workdir, "bad", "0", "status.json")))
    assert bad["status"] == "failed" and "nonsense" in bad["error"]
    rows = {r["variant"]: r for r in csv.DictReader(open(os.path.join(workdir, "results.csv")))}
    assert rows["pre"]["done"] == "2" and rows["bad"]["failed"] == "2"
    assert float(rows["post"]["bleu_std"]) >= 0 and int(rows["pre"]["params"]) > 0
    assert float(rows["pre"]["best_valid_loss"]) > 0 and float(rows["pre"]["tokens_per_s"]) > 0
    md = open(os.path.join(workdir, "results.md")).read()
    assert "| pre |" in md and "| post |" in md and "bad seed 0: failed" in md
    for png in ("valid_loss.png", "bleu.png", "length_bleu.png"):
        assert os.path.getsize(os.path.join(workdir, png)) > 1000

    # Interrupted after training, before its evaluation: only that run's eval reruns.
    done_evals = {
        (n, s): os.path.getmtime(os.path.join(workdir, n, str(s), "eval", "test.json"))
        for n in ("pre", "post")
        for s in (0, 1)
        if (n, s) != ("post", 1)
    }
    done_status = {
        key: open(os.path.join(workdir, key[0], str(key[1]), "status.json")).read()
        for key in done_evals
    }
    interrupted = os.path.join(workdir, "post", "1")
    os.remove(os.path.join(interrupted, "eval", "test.json"))
    os.remove(os.path.join(interrupted, "status.json"))
    assert sweep_cli.main(args) == 0
    out = capsys.readouterr().out
    assert out.count("skipped (finished)") == 3
    assert "FAILED (invalid config)" in out  # checked again in-process, no subprocess
    for (n, s), mtime in done_evals.items():
        assert os.path.getmtime(os.path.join(workdir, n, str(s), "eval", "test.json")) == mtime
        assert _attempts(os.path.join(workdir, n, str(s), "train.log")) == 1
        status_text = open(os.path.join(workdir, n, str(s), "status.json")).read()
        assert status_text == done_status[n, s]  # a finished run's status is not rewritten
    assert _attempts(os.path.join(interrupted, "train.log")) == 2  # resumed: nothing to train
    assert _attempts(os.path.join(interrupted, "eval.log")) == 2
    assert json.load(open(os.path.join(interrupted, "status.json")))["status"] == "done"
    from transformer.common.metrics_file import read_metrics

    steps = [r["step"] for r in read_metrics(interrupted) if r["kind"] == "train"]
    assert steps == [3, 6]  # not trained again

    # --report_only rebuilds the tables without running anything.
    os.remove(os.path.join(workdir, "results.md"))
    assert sweep_cli.main(args + ["--report_only"]) == 0
    assert os.path.exists(os.path.join(workdir, "results.md"))

    # --readme puts that table between the README's markers, with the command that made it.
    readme = tmp_path / "README.md"
    stale = "<!-- report:Sweep:start -->\nSTALE-SECTION\n<!-- report:Sweep:end -->"
    readme.write_text(f"# r\n{stale}\ntail\n")
    assert sweep_cli.main(args + ["--report_only", "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "STALE-SECTION" not in text and text.endswith("<!-- report:Sweep:end -->\ntail\n")
    assert "| pre |" in text and "| post |" in text and "\n# Sweep results" not in text
    assert f"--workdir {workdir} --report_only --readme {readme}`" in text
    readme.write_text("# no markers\n")
    assert sweep_cli.main(args + ["--report_only", "--readme", str(readme)]) == 2
    assert "report:Sweep:start" in capsys.readouterr().err


def test_eval_longer_than_reaches_eval_py_and_is_validated(tmp_path):
    path = _write_sweep(tmp_path, {"v": {}}, seeds=(0,))
    text = open(path).read().replace("'parallel'", "'eval_longer_than': 'train', 'parallel'")
    open(path, "w").write(text)
    sweep = sw.load_sweep(path)
    assert sweep.eval_longer_than == "train"
    (run,) = sw.plan_runs(sweep, str(tmp_path / "runs"))
    assert "--longer_than=train" in run.eval_command()
    for bad in ("'long'", "-3", "True"):
        open(path, "w").write(
            text.replace("'eval_longer_than': 'train'", f"'eval_longer_than': {bad}")
        )
        with pytest.raises(UserError, match="eval_longer_than"):
            sw.load_sweep(path)


def test_subword_sampling_is_a_sweep_axis(tmp_path):
    """data.spm_alpha is a field like any other: a bare name resolves to it, each arm's train
    command carries it, and a bad value is caught before any subprocess starts."""
    variants = {**sw.grid(spm_alpha=[0.0, 0.1]), "bad": {"data.spm_nbest": 1}}
    sweep = sw.load_sweep(_write_sweep(tmp_path, variants, seeds=(0,)))
    assert sweep.variants["spm_alpha=0.1"] == {"data.spm_alpha": 0.1}
    runs = {run.variant: run for run in sw.plan_runs(sweep, str(tmp_path / "runs"))}
    assert "--config.data.spm_alpha=0.1" in runs["spm_alpha=0.1"].train_command()
    assert not runs["spm_alpha=0.1"].config_error
    assert "data.spm_nbest=1 must be -1" in runs["bad"].config_error


def _finished_run(tmp_path, variant, seed, hyps, refs):
    """A Run whose eval files exist, as eval.py leaves them (step == num_steps)."""
    from transformer.research.sweep.runs import Run

    workdir = tmp_path / variant / str(seed)
    (workdir / "eval").mkdir(parents=True)
    (workdir / "eval" / "test.json").write_text(json.dumps({"step": 6, "bleu": 0, "chrf": 0}))
    (workdir / "eval" / "test.hyp.txt").write_text("\n".join(hyps) + "\n")
    (workdir / "eval" / "test.ref.txt").write_text("\n".join(refs) + "\n")
    return Run(variant, seed, str(workdir), {}, {}, "base.py", "test", num_steps=6)


def test_variants_meet_the_baseline_by_the_seed_aware_test_beside_sacrebleus_bootstrap(tmp_path):
    import random

    import sacrebleu
    from sacrebleu.significance import PairedTest

    from transformer.research.sweep.results import aggregate, write_report
    from transformer.research.sweep.spec import Sweep
    from transformer.scoring.metrics import sacrebleu_metrics

    rng = random.Random(0)
    words = "der die das Hund Katze sieht den roten Mann".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) for _ in range(40)]

    def noisy(p):
        return [
            " ".join(w if rng.random() > p else rng.choice(words) for w in r.split()) for r in refs
        ]

    hyps = {(v, s): noisy(p) for v, p in (("base", 0.5), ("good", 0.1)) for s in (0, 1, 2)}
    for seed in (0, 1, 2):  # 'same' differs from the baseline in two sentences per seed
        same = list(hyps[("base", seed)])
        same[seed] = same[seed + 3] = "der Hund"
        hyps[("same", seed)] = same
    runs = [_finished_run(tmp_path, v, s, h, refs) for (v, s), h in hyps.items()]
    sweep = Sweep(
        path="s.py",
        base="base.py",
        overrides={},
        seeds=[0, 1, 2],
        eval_split="test",
        variants={"base": {}, "good": {}, "same": {}},
        eval_overrides={},
        parallel=1,
        baseline="base",
    )
    table, per_run = aggregate(sweep, runs)
    rows = {r["variant"]: r for r in table}
    assert rows["base"]["bleu_delta"] is None and rows["base"]["bleu_sentence_delta"] is None
    bleu = {k: sacrebleu.corpus_bleu(h, [refs]).score for k, h in hyps.items()}
    p_values = {}
    for name in ("good", "same"):
        # The seed-aware difference: the arms' mean run BLEU, computed here by sacreBLEU.
        gap = sum(bleu[(name, s)] - bleu[("base", s)] for s in (0, 1, 2)) / 3
        assert rows[name]["bleu_delta"] == pytest.approx(gap, abs=1e-9)
        assert rows[name]["bleu_delta_low"] < gap < rows[name]["bleu_delta_high"]
        assert rows[name]["bleu_mdd"] > 0 and rows[name]["bleu_df"] >= 2
        p_values[name] = rows[name]["bleu_p"]
        # The test-set-only column is sacreBLEU's on the concatenated seeds, independently.
        pooled_base = sum((hyps[("base", s)] for s in (0, 1, 2)), [])
        pooled = sum((hyps[(name, s)] for s in (0, 1, 2)), [])
        systems = [("b", pooled_base), ("s", pooled)]
        test = PairedTest(systems, sacrebleu_metrics(), [refs * 3], test_type="bs", n_samples=1000)
        _, scores = test()
        expected = scores["BLEU"][1]
        assert rows[name]["bleu_sentence_p"] == pytest.approx(expected.p_value)
        sentence_gap = expected.score - scores["BLEU"][0].score
        assert rows[name]["bleu_sentence_delta"] == pytest.approx(sentence_gap)
    # Holm over the two variants' four one-sided hypotheses: the one-sided p-values in the
    # estimates' directions are p / 2, taken 4 and then 3 at a time.
    low, high = sorted(p_values.values())
    assert sorted(rows[n]["bleu_p_holm"] for n in p_values) == pytest.approx(
        [min(1, 2 * low), max(min(1, 2 * low), min(1, 1.5 * high))]
    )
    assert rows["good"]["bleu_significant"] and not rows["same"]["bleu_significant"]
    seed0 = next(r for r in per_run if (r["variant"], r["seed"]) == ("good", 0))
    assert seed0["bleu_delta"] > 0 and seed0["bleu_p"] < 0.05
    write_report(sweep, runs, str(tmp_path / "report"))
    md = open(tmp_path / "report" / "results.md").read()
    assert "| base | (base) |" in md and "| baseline |" in md
    good_row = next(line for line in md.splitlines() if line.startswith("| good |"))
    assert f"{rows['good']['bleu_delta']:+.2f} [" in good_row and ") * |" in good_row
    assert f"(p {rows['good']['bleu_sentence_p']:.3f})" in good_row
    assert os.path.getsize(tmp_path / "report" / "length_bleu.png") > 1000


def test_baseline_defaults_to_the_first_variant_and_must_be_one(tmp_path):
    path = _write_sweep(tmp_path, {"a": {"model.norm_position": "pre"}, "b": {}})
    assert sw.load_sweep(path).baseline == "a"
    text = open(path).read().replace("'parallel'", "'baseline': 'c', 'parallel'")
    open(path, "w").write(text)
    with pytest.raises(UserError, match="baseline 'c' is not a variant"):
        sw.load_sweep(path)


def test_matched_arm_has_the_baselines_parameter_count_by_the_analytic_formula(tmp_path):
    # An FFN layer holds W1, W2 and their biases (2 d f + f + d parameters); a gated one adds
    # Wg and its bias (3 d f' + 2 f' + d); nothing else changes, so equal counts need
    # f' = (2 d f + f) / (3 d + 2), about 2/3 of f.
    variants = {"relu": {}, "swiglu": {"model.activation": "swiglu"}}
    path = _write_sweep(tmp_path, variants)
    matched = {
        "swiglu_params": {"variant": "swiglu", "match": "params", "solve": "model.d_ff"},
        "swiglu_flops": {"variant": "swiglu", "match": "flops", "solve": "model.d_ff"},
    }
    text = open(path).read().replace("'parallel'", f"'matched': {matched!r}, 'parallel'")
    open(path, "w").write(text)
    sweep = sw.load_sweep(path)
    assert list(sweep.variants) == ["relu", "swiglu", "swiglu_params", "swiglu_flops"]
    d, f = TINY["model.d_model"], TINY["model.d_ff"]
    solved = sweep.variants["swiglu_params"]["model.d_ff"]
    assert abs(solved - (2 * d * f + f) / (3 * d + 2)) <= 0.5  # the closest integer
    assert sweep.variants["swiglu_params"]["model.activation"] == "swiglu"
    # FLOPs per token count the matrices only: 2 d f = 3 d f' gives f' = 2 f / 3.
    assert abs(sweep.variants["swiglu_flops"]["model.d_ff"] - 2 * f / 3) <= 0.5


@pytest.mark.slow
def test_a_matched_arm_that_cannot_match_is_a_user_error(tmp_path):
    variants = {"small": {}, "big": {"model.d_model": 64}}
    path = _write_sweep(tmp_path, variants)
    matched = {"m": {"variant": "big", "match": "params", "solve": "model.num_heads"}}
    text = open(path).read().replace("'parallel'", f"'matched': {matched!r}, 'parallel'")
    open(path, "w").write(text)
    with pytest.raises(UserError, match="matched variant 'm'"):
        sw.load_sweep(path)


def test_reference_scoring_reaches_eval_py_and_the_table(tmp_path):
    from transformer.research.sweep.results import write_report

    path = _write_sweep(tmp_path, {"a": {}})
    text = open(path).read()
    open(path, "w").write(text.replace("'parallel'", "'eval_score_references': True, 'parallel'"))
    sweep = sw.load_sweep(path)
    (run,) = sw.plan_runs(sweep, str(tmp_path / "w"), None)[:1]
    assert "--score_references" in run.eval_command()
    open(path, "w").write(text.replace("'parallel'", "'eval_score_references': 1, 'parallel'"))
    with pytest.raises(UserError, match="eval_score_references must be True or False"):
        sw.load_sweep(path)
    runs = []
    for seed, ppl in ((0, 4.0), (1, 5.0)):
        r = _finished_run(tmp_path, "a", seed, ["der Hund"], ["der Hund"])
        record = {"step": 6, "bleu": 0, "chrf": 0, "reference_scores": {"perplexity": ppl}}
        open(r.eval_json, "w").write(json.dumps(record))
        runs.append(r)
    sweep.variants = {"a": {}}
    table = write_report(sweep, runs, str(tmp_path / "report"))
    assert table[0]["test_perplexity"] == pytest.approx(4.5)
    md = open(tmp_path / "report" / "results.md").read()
    assert "| test perplexity |" in md and "| 4.50 |" in md


def test_a_run_kept_without_references_takes_them_from_references_file(tmp_path):
    from transformer.research.sweep.results import aggregate
    from transformer.research.sweep.spec import Sweep

    refs = ["der Hund sieht den Mann", "die Katze", "das rote Haus steht dort"]
    hyps = {"base": ["der Hund", "die Katze", "das Haus"], "alt": refs}
    runs = [_finished_run(tmp_path, v, 0, h, refs) for v, h in hyps.items()]
    sweep = Sweep(
        path="s.py",
        base="base.py",
        overrides={},
        seeds=[0],
        eval_split="test",
        variants={"base": {}, "alt": {}},
        eval_overrides={},
        parallel=1,
        baseline="base",
    )
    with_files = {r["variant"]: r for r in aggregate(sweep, runs)[0]}
    for run in runs:
        os.remove(os.path.join(run.workdir, "eval", "test.ref.txt"))
    with pytest.raises(UserError, match="--references FILE"):
        aggregate(sweep, runs)
    short = tmp_path / "short.txt"
    short.write_text("der Hund\n")
    sweep.references = str(short)
    with pytest.raises(UserError, match="has 1 lines but"):
        aggregate(sweep, runs)
    full = tmp_path / "refs.txt"
    full.write_text("\n".join(refs) + "\n")
    sweep.references = str(full)
    rows = {r["variant"]: r for r in aggregate(sweep, runs)[0]}
    one_seed = rows["alt"]["bleu_sentence_delta"]
    assert one_seed == with_files["alt"]["bleu_sentence_delta"] > 0
    assert rows["alt"]["bleu_delta"] is None  # one seed: no seed-aware test


def test_plot_lines_of_up_to_30_variants_all_look_different():
    from transformer.research.sweep.plots import line_style

    styles = {tuple(sorted(line_style(i).items())) for i in range(30)}
    assert len(styles) == 30
    assert line_style(0)["color"] == line_style(10)["color"]  # same colour, other style
    assert line_style(0)["linestyle"] != line_style(10)["linestyle"]

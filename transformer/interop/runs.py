"""Marian model directories as run directories and back.

`import_marian(src_dir, workdir)` turns a locally saved Hugging Face `MarianMTModel`
directory (what `MarianMTModel.save_pretrained` and `MarianTokenizer.save_pretrained` write:
config.json, model.safetensors or pytorch_model.bin, source.spm, target.spm, vocab.json) into
a run directory that eval.py, decode.py and train.py use as any other: `vocab/source.model`
and `vocab/target.model` (Marian's SentencePiece models with its rows reordered into this
project's ids, `marian_vocab`), an Orbax checkpoint at step 0 holding the parameters alone
(`run_state.WEIGHTS_ONLY`: training from it starts a fresh optimizer and data stream), and
`config.json`, whose `data.vocab_path` names the two models relative to the run (so the run
directory can be copied or moved) and whose data section is local text to point at a corpus
for evaluation splits or fine-tuning. An import that fails after it started writing removes
what it wrote and closes its checkpoint manager, so the same --workdir can be used again.

`export_marian(workdir, out_dir)` writes a run as such a directory again (vocab.json in our
ids, decoding from BOS), and optionally as a CTranslate2 model directory with the same
vocabulary and SentencePiece models beside it. `export_ctranslate2(workdir, out_dir)` writes
the CTranslate2 model alone, for runs Marian cannot express too (Pre-LN: the main job's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
import types
import warnings

import numpy as np

from transformer.common.errors import UserError
from transformer.common.fileio import make_workdir
from transformer.common.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from transformer.data.tokenizer import VOCAB_DIR, Tokenizer, build_tokenizers
from transformer.interop import marian, marian_vocab
from transformer.interop.extras import optional_import
from transformer.training import run_config
from transformer.training.checkpoint import Checkpointer
from transformer.training.run_state import WEIGHTS_ONLY, build_model, check_tokenizers

TOKENIZER_FILES = ("vocab.json", "source.spm", "target.spm")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SIDES = ("source", "target")


@dataclasses.dataclass
class MarianDir:
    """What a saved MarianMTModel directory holds, read without transformers."""

    path: str
    config: dict  # config.json
    tokenizer_config: dict  # tokenizer_config.json ({} when absent)
    vocab: dict[str, int]  # vocab.json
    spm: dict[str, bytes]  # {'source': source.spm, 'target': target.spm}
    tensors: dict[str, np.ndarray]  # the state dict


def read_marian_dir(path: str) -> MarianDir:
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise UserError(
            f"{path} is not a directory; give a MarianMTModel saved with save_pretrained"
        )
    for name in ("config.json", *TOKENIZER_FILES):
        if not os.path.isfile(os.path.join(path, name)):
            raise UserError(
                f"{path} has no {name}; save both the model and its tokenizer there "
                "(MarianMTModel.save_pretrained and MarianTokenizer.save_pretrained)"
            )
    tokenizer_config = _json(path, "tokenizer_config.json", missing={})
    if tokenizer_config.get("separate_vocabs") or os.path.isfile(f"{path}/target_vocab.json"):
        raise UserError(
            f"{path} has separate source and target vocabularies (separate_vocabs); only "
            "Marian models with one joint vocab.json can be imported"
        )
    return MarianDir(
        path,
        _json(path, "config.json"),
        tokenizer_config,
        _json(path, "vocab.json"),
        {side: _read(os.path.join(path, f"{side}.spm")) for side in SIDES},
        _read_tensors(path),
    )


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _json(directory: str, name: str, missing=None) -> dict:
    path = os.path.join(directory, name)
    if missing is not None and not os.path.isfile(path):
        return missing
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        raise UserError(f"{path} is not valid JSON ({e})") from None


def _read_tensors(path: str) -> dict[str, np.ndarray]:
    """The state dict as float32 NumPy arrays: safetensors when saved so (no PyTorch
    needed), else pytorch_model.bin through PyTorch."""
    found = [name for name in WEIGHT_FILES if os.path.isfile(os.path.join(path, name))]
    if not found:
        sharded = any(name.endswith(".index.json") for name in os.listdir(path))
        what = "sharded weights, which import-marian does not read" if sharded else "no weights"
        raise UserError(f"{path} has {what}; it needs {' or '.join(WEIGHT_FILES)}")
    file = os.path.join(path, found[0])
    if found[0].endswith(".safetensors"):
        tensors = optional_import("safetensors.numpy").load_file(file)
    else:
        torch = optional_import("torch")
        state = torch.load(file, map_location="cpu", weights_only=True)
        tensors = {k: v.float().numpy() for k, v in state.items()}
    return {k: np.asarray(v, np.float32) for k, v in tensors.items()}


# ---------------------------------------------------------------------------------- import


def import_marian(
    src_dir: str, workdir: str, *, source_lang: str | None = None, target_lang: str | None = None
) -> str:
    """Writes the run directory `workdir` (new or empty) of the Marian model in `src_dir`;
    returns workdir's absolute path."""
    workdir = os.path.abspath(os.path.expanduser(workdir))
    _check_new_workdir(workdir)
    src = read_marian_dir(src_dir)
    bias = src.tensors.get(marian.BIAS_NAME)
    has_bias = bias is not None and bool(np.any(bias != 0))
    model_cfg = marian.model_config_from_marian(src.config, output_bias=has_bias)
    langs = _languages(src, source_lang, target_lang)
    rows = src.config.get("vocab_size")
    if not isinstance(rows, int) or rows <= 0:
        raise UserError(f"config.json has vocab_size={rows!r}; it needs the model's row count")
    extra = _unlisted_pieces(src)
    vocab = marian_vocab.vocab_map(src.vocab, rows, _special_rows(src), extra)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=len(vocab.rows))
    marian.check_position_tables(model_cfg, src.tensors)
    params = _params_state(model_cfg, marian.params_from_marian(model_cfg, src.tensors, vocab.rows))
    with _removed_on_failure(workdir):  # a refused or failed import leaves nothing behind
        make_workdir(workdir)  # once everything is read and checked
        tokenizers = _write_tokenizers(src, vocab.pieces, workdir)
        origin = f"imported from the MarianMTModel in {src.path}"
        _save_weights(workdir, params, tokenizers, origin)
        config = _run_config(model_cfg, tokenizers, langs)
        run_config.save(config, workdir)  # last: a config.json marks a complete run
    return workdir


# What an import writes into its workdir.
IMPORT_ENTRIES = (VOCAB_DIR, "checkpoints", run_config.CONFIG_FILE)


@contextlib.contextmanager
def _removed_on_failure(workdir: str):
    """Removes what the import wrote (and the workdir, if it created it) when the block
    raises, so a retry into the same --workdir is not refused as 'already holds a run'."""
    existed = os.path.isdir(workdir)
    try:
        yield
    except BaseException:
        for name in IMPORT_ENTRIES:
            path = os.path.join(workdir, name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.exists(path):
                os.remove(path)
        if not existed and os.path.isdir(workdir) and not os.listdir(workdir):
            os.rmdir(workdir)
        raise


def _check_new_workdir(workdir: str) -> None:
    for name in (run_config.CONFIG_FILE, "checkpoints", VOCAB_DIR):
        if os.path.exists(os.path.join(workdir, name)):
            raise UserError(f"{workdir} already holds a run ({name}); import into a new --workdir")


def _languages(src: MarianDir, source_lang, target_lang) -> tuple[str, str]:
    """The data section's languages: the flags, else tokenizer_config.json's."""
    langs = (
        source_lang or src.tokenizer_config.get("source_lang"),
        target_lang or src.tokenizer_config.get("target_lang"),
    )
    if not all(langs):
        raise UserError(
            f"{src.path}/tokenizer_config.json names no source_lang and target_lang; give "
            "them with --source_lang and --target_lang"
        )
    return langs


# MarianTokenizer's special tokens: (tokenizer_config.json key, its default, our id).
TOKENIZER_SPECIALS = (
    ("pad_token", "<pad>", PAD_ID),
    ("unk_token", "<unk>", UNK_ID),
    ("eos_token", "</s>", EOS_ID),
)


def _special_rows(src: MarianDir) -> dict[int, int]:
    """{our special id: Marian id}: PAD, UNK and EOS where vocab.json puts the tokenizer's
    special tokens (pad and eos checked against config.json), BOS the decoder start."""
    rows = {}
    for key, default, ours in TOKENIZER_SPECIALS:
        piece = src.tokenizer_config.get(key, default)
        piece = piece.get("content") if isinstance(piece, dict) else piece  # an AddedToken
        rows[ours] = src.vocab.get(piece)
        config_id = src.config.get(key + "_id", rows[ours])
        if rows[ours] is None or rows[ours] != config_id:
            raise UserError(
                f"vocab.json puts the {key} {piece!r} at {rows[ours]!r} but config.json has "
                f"{key}_id={config_id!r}; the tokenizer does not belong to these weights"
            )
    if len(set(rows.values())) < 3:
        raise UserError(f"vocab.json gives pad, unk and eos the ids {rows}; they must differ")
    rows[BOS_ID] = src.config.get("decoder_start_token_id", rows[PAD_ID])
    return rows


def _unlisted_pieces(src: MarianDir) -> list[str]:
    pieces = []
    for side in SIDES:
        where = f"{src.path}/{side}.spm"
        for piece in marian_vocab.unlisted_pieces(src.spm[side], src.vocab, where):
            if piece not in pieces:
                pieces.append(piece)
    return pieces


def _params_state(model_cfg, flat: dict[str, np.ndarray]):
    """The nnx.State of our model's parameters holding the arrays `flat` names (by
    `marian.param_name`), each shape checked against the model's."""
    import jax
    from flax import nnx

    abstract = nnx.split(nnx.eval_shape(lambda: build_model(model_cfg, 0)), nnx.Param)[1]

    def fill(path, leaf):
        name = marian.param_name(path)
        value = flat[name]
        if value.shape != leaf.shape:
            raise UserError(
                f"the Marian weights give {name} the shape {value.shape} where config.json's "
                f"sizes need {leaf.shape}; the weights do not belong to this config.json"
            )
        return jax.numpy.asarray(value, leaf.dtype)

    return jax.tree_util.tree_map_with_path(fill, abstract)


def _write_tokenizers(src: MarianDir, pieces: list[str], workdir: str) -> dict[str, Tokenizer]:
    """vocab/source.model and vocab/target.model: each side's model with our ids."""
    tokenizers = {}
    for side in SIDES:
        where = f"{src.path}/{side}.spm"
        tokenizer = Tokenizer(marian_vocab.remapped_model(src.spm[side], pieces, where), where)
        tokenizer.save(os.path.join(workdir, VOCAB_DIR, f"{side}.model"))
        tokenizers[side] = tokenizer
    return tokenizers


def _save_weights(workdir: str, params, tokenizers: dict[str, Tokenizer], origin: str) -> None:
    """Checkpoint 0: the parameters alone, with the metadata training writes."""
    import jax

    meta = {
        "step": 0,
        "time": time.time(),
        "tokenizers": {side: tok.fingerprint for side, tok in tokenizers.items()},
        WEIGHTS_ONLY: origin,
    }
    state = {"step": jax.numpy.zeros((), jax.numpy.int32), "params": params}
    with _closing(Checkpointer(workdir, keep=1)) as checkpoints:
        checkpoints.save(0, state, {}, meta, None)
        checkpoints.wait()


@contextlib.contextmanager
def _closing(checkpoints: Checkpointer):
    """The checkpoint manager, closed (its background threads joined) however the block
    ends."""
    try:
        yield checkpoints
    finally:
        checkpoints.close()


def _run_config(model_cfg, tokenizers: dict[str, Tokenizer], langs: tuple[str, str]):
    """The run's config: the base config with the imported model, its two SentencePiece
    models as data.vocab_path (one id space, so one shared embedding; relative to the run,
    which data.tokenizer.resolve_vocab_path reads them from) and local-text data (data.path
    to set for evaluation splits or fine-tuning)."""
    config = run_config.get_base_config()
    for field, value in model_cfg.to_dict().items():
        config.model[field] = value
    d = config.data
    d.name, d.path = "parallel_text", ""
    d.source_lang, d.target_lang = langs
    d.vocab_path = ",".join(f"{VOCAB_DIR}/{side}.model" for side in SIDES)
    d.shared_vocab = True
    d.vocab_size = tokenizers["source"].vocab_size
    run_config.validate(config)
    return config


# ---------------------------------------------------------------------------------- export


@dataclasses.dataclass
class RunWeights:
    """A run's parameters at one checkpoint, with what an export needs beside them."""

    config: object
    model_cfg: object
    params: object
    step: int
    source_tokenizer: Tokenizer
    target_tokenizer: Tokenizer


def load_run_weights(workdir: str, checkpoint: str = "latest", check=None) -> RunWeights:
    """The parameters of checkpoint `checkpoint` (latest, best or a step) and the run's
    tokenizers, checked against the checkpoint's fingerprints; check(model_cfg) runs first,
    before anything is read."""
    from flax import nnx

    config = run_config.load(workdir)
    model_cfg = run_config.validate(config).model
    if check is not None:
        check(model_cfg)
    abstract = nnx.split(nnx.eval_shape(lambda: build_model(model_cfg, 0)), nnx.Param)[1]
    with _closing(Checkpointer(workdir, read_only=True)) as checkpoints:
        step = checkpoints.resolve_step(checkpoint)
        params, meta = checkpoints.restore_params(step, abstract)
    src, tgt = build_tokenizers(config.data, int(config.data.vocab_size), workdir, _no_texts)
    sides = types.SimpleNamespace(source_tokenizer=src, target_tokenizer=tgt)
    check_tokenizers(meta, sides, f"{workdir}/checkpoints/{step}")
    return RunWeights(config, model_cfg, params, step, src, tgt)


def _no_texts():
    raise UserError(
        "the run's vocabulary is missing (no vocab/*.model); restore the run's vocab/ "
        "directory or its data.vocab_path"
    )


@dataclasses.dataclass
class Exported:
    marian_dir: str | None
    ctranslate2_dir: str | None
    step: int
    notes: list[str]  # what the exported model computes differently, if anything


def export_marian(
    workdir: str,
    out_dir: str,
    *,
    checkpoint: str = "latest",
    ctranslate2_dir: str | None = None,
    quantization: str = "float32",
) -> Exported:
    """Writes the run's checkpoint as a MarianMTModel directory in out_dir and, if given, as
    a CTranslate2 model directory in ctranslate2_dir."""

    def check(model_cfg) -> None:
        """What Marian cannot express first (no package fixes it), then what is missing."""
        _check_marian(model_cfg)
        _check_export_packages(ctranslate2_dir, quantization)

    run = load_run_weights(workdir, checkpoint, check=check)
    vocab = marian_vocab.marian_vocab(run.source_tokenizer, run.target_tokenizer)
    notes = []
    if run.model_cfg.norm_eps != marian.HF_NORM_EPS:
        notes.append(
            f"the run's LayerNorm epsilon is {run.model_cfg.norm_eps:g} and MarianMTModel's "
            f"is fixed at {marian.HF_NORM_EPS:g}: the exported model's logits differ slightly"
        )
    _write_marian(run, vocab, out_dir)
    if ctranslate2_dir:
        _write_ctranslate2(run, ctranslate2_dir, quantization)
    return Exported(out_dir, ctranslate2_dir, run.step, notes)


def export_ctranslate2(
    workdir: str, out_dir: str, *, checkpoint: str = "latest", quantization: str = "float32"
) -> Exported:
    """Writes the run's checkpoint as a CTranslate2 model directory in out_dir, through
    CTranslate2's own model specification: no MarianMTModel in between, so runs Marian
    cannot express (Pre-LN, RMSNorm) export too."""
    from transformer.interop import ctranslate2_model

    _check_quantization(quantization)
    run = load_run_weights(workdir, checkpoint, check=ctranslate2_model.check_compatible)
    _write_ctranslate2(run, out_dir, quantization)
    return Exported(None, out_dir, run.step, [])


def _check_marian(model_cfg) -> None:
    """marian.check_compatible, pointing at export-ctranslate2 where that one can write the
    run."""
    from transformer.interop import ctranslate2_model

    try:
        marian.check_compatible(model_cfg)
    except UserError as e:
        try:
            ctranslate2_model.check_compatible(model_cfg)
        except UserError:
            raise e from None
        raise UserError(
            f"{e} (transformer-interop export-ctranslate2 writes this run as a CTranslate2 model)"
        ) from None


def _check_export_packages(ctranslate2_dir: str | None, quantization: str) -> None:
    """Before anything is read or written: what is missing fails the export, not half of it."""
    optional_import("torch")
    optional_import("transformers")
    if ctranslate2_dir:
        _check_quantization(quantization)


def _check_quantization(quantization: str) -> None:
    from transformer.interop.ctranslate2_model import QUANTIZATIONS

    optional_import("ctranslate2")
    if quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization={quantization} is not one of {', '.join(QUANTIZATIONS)}")


def _write_spm(run: RunWeights, directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for side in SIDES:
        tokenizer = getattr(run, f"{side}_tokenizer")
        with open(os.path.join(directory, f"{side}.spm"), "wb") as f:
            f.write(tokenizer.model_proto)


def _write_marian(run: RunWeights, vocab: dict[str, int], out_dir: str) -> None:
    """config.json, generation_config.json, model.safetensors and the tokenizer files."""
    transformers = optional_import("transformers")
    _write_spm(run, out_dir)
    vocab_path = os.path.join(out_dir, "vocab.json")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, indent=2)
    transformers.utils.logging.disable_progress_bar()
    model = marian.to_marian(run.model_cfg, run.params, dropout=None)
    model.save_pretrained(out_dir)
    with warnings.catch_warnings():  # sacremoses, which only source normalisation would use
        warnings.simplefilter("ignore")
        tokenizer = transformers.MarianTokenizer(
            os.path.join(out_dir, "source.spm"),
            os.path.join(out_dir, "target.spm"),
            vocab_path,
            source_lang=run.config.data.source_lang,
            target_lang=run.config.data.target_lang,
            model_max_length=run.model_cfg.max_len,
        )
    tokenizer.save_pretrained(out_dir)


# Beside a CTranslate2 model: translate_batch's keyword arguments that keep it within the
# run's model.max_len (ctranslate2_model.translate_options).
TRANSLATE_OPTIONS = "translate_options.json"


def _write_ctranslate2(run: RunWeights, out_dir: str, quantization: str) -> None:
    """The CTranslate2 model (sources get EOS appended, as the Translator appends it) with
    the SentencePiece models beside it, so pieces go in and come out, and the length limits
    translate_batch needs (TRANSLATE_OPTIONS)."""
    from transformer.interop.ctranslate2_model import save_ctranslate2, translate_options

    rows = run.model_cfg.vocab_size
    save_ctranslate2(
        run.model_cfg,
        run.params,
        out_dir,
        _tokens(run.source_tokenizer, rows),
        target_vocabulary=_tokens(run.target_tokenizer, rows),
        quantization=quantization,
        add_source_eos=True,
    )
    _write_spm(run, out_dir)
    with open(os.path.join(out_dir, TRANSLATE_OPTIONS), "w", encoding="utf-8") as f:
        json.dump(translate_options(run.model_cfg), f, indent=2)
        f.write("\n")


def _tokens(tokenizer: Tokenizer, rows: int) -> list[str]:
    """CTranslate2's vocabulary: the tokenizer's pieces in id order, then a name for each
    spare embedding row (model.vocab_size above the piece count), which no text produces."""
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    return pieces + [f"<spare_{i}>" for i in range(len(pieces), rows)]

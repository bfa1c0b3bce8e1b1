"""Training a run: the base config and its validation, the workdir's config.json
(base_config, run_config), loss (loss), the pure train/eval steps (steps), the optimiser and
learning-rate schedules (optim), data/model parallelism (parallel), Orbax checkpoints
(checkpoint) and their checksum manifests (checkpoint_manifest), the model and train state
a checkpoint holds (run_state), metrics.jsonl/TensorBoard logging (logger) and
`train_and_evaluate`, the training loop in named stages (loop).

Imports from: transformer.common, transformer.model, transformer.data, transformer.scoring,
transformer.inference.
"""

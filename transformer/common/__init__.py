"""Foundation shared by every layer: the one-line `UserError` and its rendering (`errors`),
crash-safe file writes (`fileio`), the machine name every measured speed records
(`machine`), the special token ids every layer agrees on (`special_ids`) and the format of a
run's `metrics.jsonl` with its reader (`metrics_file`), which training writes and evaluation
and the research tools read, a run's provenance record (`provenance`), the registries of
named classes (`registry`) and the import of the user's modules that add to them
(`plugins`). Nothing here knows about models, data or training code.

Imports from: nothing else in the package.
"""

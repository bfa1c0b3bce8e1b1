"""Foundation shared by every layer: the one-line `UserError` and its rendering (`errors`),
crash-safe file writes (`fileio`) and the special token ids every layer agrees on
(`special_ids`). Nothing here knows about models, data or training.

Imports from: nothing else in the package.
"""

"""From trained parameters to text: the search algorithms over a `tokens_to_logits`
function (search: greedy and sampling; beam: beam search), the filters that shape each
step's distribution (filters: min-length, temperature, top-k, top-p and the others in its
registry, composed in a chain), the `Translator` that tokenizes, batches, runs a search with
the model's KV cache and detokenizes (translator, with `DecodeSettings`), and decode.py's
line-streaming loop (streaming).

Imports from: transformer.common, transformer.model, transformer.data.
"""

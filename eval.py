"""The checkout's `python eval.py`: the `transformer-eval` console script, whose docstring
(transformer/cli/evaluate.py) gives the usage."""

from transformer.cli.evaluate import main

if __name__ == "__main__":
    main()

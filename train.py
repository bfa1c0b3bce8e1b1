"""The checkout's `python train.py`: the `transformer-train` console script, whose docstring
(transformer/cli/train.py) gives the usage."""

from transformer.cli.train import main

if __name__ == "__main__":
    main()

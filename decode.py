"""The checkout's `python decode.py`: the `transformer-decode` console script, whose docstring
(transformer/cli/decode.py) gives the usage."""

from transformer.cli.decode import main

if __name__ == "__main__":
    main()

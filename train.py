"""Train a Transformer from a config file.

    python train.py --config configs/default.py --workdir runs/default \
        [--config.section.field=value ...]

Rerunning with the same --workdir resumes from its latest checkpoint. Multi-host: pass
--coordinator_address/--num_processes/--process_id, or --distributed to let JAX read them
from the cluster environment (Slurm, TPU pods).
"""

from transformer.cli.train import main

if __name__ == "__main__":
    main()

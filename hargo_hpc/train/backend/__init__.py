"""Where the model trains: the DeepSpeed engine (`engine`, the only module of the project that
imports deepspeed), checkpoints and exact resume (`checkpoint`), and ranks (`distributed`:
the environment, the process group, the few collectives the loop needs)."""

"""The `gen` and `reward` phases' machinery: sampling G completions per prompt (`generate`:
the generation backend and its sampling parameters), one step's rollout as the loop carries it
(`generated`), rewards through the task registry and the handoff (`rewards`), and the local
bench workers a run may start (`local_workers`)."""

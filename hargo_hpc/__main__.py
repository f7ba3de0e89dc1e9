from hargo_hpc.cli import run

run()

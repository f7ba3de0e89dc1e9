from hargo_hpc.cli import main

main()

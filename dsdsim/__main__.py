from dsdsim.cli import main

main()

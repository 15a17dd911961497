from marinctl.cli import main

main()

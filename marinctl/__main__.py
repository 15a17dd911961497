from marinctl.cli import run

run()

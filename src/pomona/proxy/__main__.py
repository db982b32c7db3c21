import sys

from pomona.proxy.cli import cli_main

raise SystemExit(cli_main(sys.argv[1:]))

"""The `pomona` command line."""

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pomona")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="a short offline demo of what exists")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from pomona.demo import run

        return run()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

"""`python -m vtgatesim`."""

import argparse
import sys

from .cli import register

parser = argparse.ArgumentParser(prog="vtgatesim", description="VTGate test server")
sys.exit(register(parser)(parser.parse_args()))

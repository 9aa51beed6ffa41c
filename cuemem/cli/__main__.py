"""`python -m cuemem.cli`: the `cuemem` command."""

from . import app

app(prog_name="cuemem")

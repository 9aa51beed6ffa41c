"""`python -m cuemem`: the `cuemem` command."""

from .cli import app

app(prog_name="cuemem")

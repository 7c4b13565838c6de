"""`python -m agent.graph`: print the parameter file, or with --markdown the README's graph section; with
--readme PATH rewrite that section of the README at PATH in place."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.graph.render import markdown, params_yaml, with_graph_section


def main(argv: list[str]) -> None:
    """Write what `argv` asks for (see the module doc)."""
    if argv[:1] == ["--readme"]:
        readme = Path(argv[1])
        readme.write_text(with_graph_section(readme.read_text()))
    else:
        print(markdown() if argv == ["--markdown"] else params_yaml(), end="")


if __name__ == "__main__":
    main(sys.argv[1:])

"""The README's Python blocks, run as a newcomer pastes them: top to bottom, in one fresh
interpreter, in an empty folder (they write model files and pictures), with nothing defined
that the README does not define."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fences, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def test_python_blocks_are_found():
    blocks = python_blocks("intro\n```python\na = 1\n```\ntext\n```bash\nls\n```\n"
                           "```python\nb = a\n```\n")
    assert blocks == ["a = 1\n", "b = a\n"]


def test_the_readmes_python_blocks_run_top_to_bottom(tmp_path):
    blocks = python_blocks((ROOT / "README.md").read_text())
    assert len(blocks) >= 5, "the README's tour, training and deployment blocks"
    # each block is announced, so a failure names the block it happened in
    script = "".join(f"print('--- README block {i}', flush=True)\n{block}"
                     for i, block in enumerate(blocks))
    (tmp_path / "readme_blocks.py").write_text(script)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "readme_blocks.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    last_block = [line for line in done.stdout.splitlines() if line.startswith("--- README")]
    assert done.returncode == 0, (last_block[-1:], done.stderr[-3000:])
    assert len(last_block) == len(blocks)
    for written in ("model.mgm", "weights.mgm", "memory.svg", "remat.svg", "step.json",
                    "step.html"):
        assert (tmp_path / written).stat().st_size > 0, written

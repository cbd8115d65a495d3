"""What an export's C runtime weighs: its library built as a stripped shared object, and what
each kernel contributes (the code and data of the symbols each object file defines, from
``nm --size-sort``), as docs/c_runtime.md's table reports them.

    python -m mgegraph.deploy.sizes OUT [--cc aarch64-linux-gnu-gcc] [--cflags=-Os]

The library is what an application links: the runtime, the kernel table and the kernels, without
``model_run`` and without the weights (the blob).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ExportError
from .kernels import CONTRACTED

# same as the Makefile's: the loops round each step as the fused kernels do
BASE_FLAGS = ("-std=gnu11", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
              "-pthread", "-fPIC")


@dataclass(frozen=True)
class Sizes:
    """``library``: the stripped shared library's bytes; ``parts``: (source, bytes of its
    symbols' code and data), largest first."""

    library: int
    parts: tuple[tuple[str, int], ...]

    def table(self) -> str:
        """The figures as a Markdown table."""
        rows = ["| part | bytes |", "|---|---|", f"| the library, stripped | {self.library:,} |"]
        rows += [f"| {name} | {size:,} |" for name, size in self.parts]
        return "\n".join(rows)


def _tool(compiler: str, name: str) -> str:
    """The binutils tool ``name`` of ``compiler``'s target (aarch64-linux-gnu-nm for
    aarch64-linux-gnu-gcc), else the host's."""
    prefix = compiler.rsplit("-", 1)[0] + "-" if "-" in Path(compiler).name else ""
    found = shutil.which(prefix + name) or shutil.which(name)
    if not found:
        raise ExportError(f"sizes: no {prefix + name} or {name} on this machine")
    return found


def _run(command, cwd) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600,
                          check=False)
    if done.returncode != 0:
        raise ExportError(f"sizes: {' '.join(map(str, command[:3]))} failed: "
                          f"{(done.stderr or done.stdout).strip()[-800:]}")
    return done.stdout


def _symbol_bytes(nm: str, obj: Path) -> int:
    """The sizes of the symbols ``obj`` defines (code, data, read-only data, bss)."""
    out = _run([nm, "--size-sort", "--defined-only", str(obj)], obj.parent)
    return sum(int(line.split()[0], 16) for line in out.splitlines() if line.strip())


def measure(directory, compiler: str = "cc", cflags: str = "-O3") -> Sizes:
    """Build the export in ``directory`` as a stripped shared library with ``compiler`` and
    ``cflags``, in a folder of its own (the export is left as it was)."""
    directory = Path(directory)
    sources = ["mgr_runtime.c", "mgr_threads.c", "model_kernels.c",
               *sorted(str(p.relative_to(directory)) for p in directory.glob("kernels/*.c"))]
    nm, strip = _tool(compiler, "nm"), _tool(compiler, "strip")
    with tempfile.TemporaryDirectory(prefix="mgr-sizes-") as tmp:
        objects, parts = [], []
        for source in sources:
            obj = Path(tmp) / (source.replace("/", "_")[:-2] + ".o")
            contract = ["-ffp-contract=fast"] if source in CONTRACTED else []
            _run([compiler, *cflags.split(), *BASE_FLAGS, *contract, "-I", ".", "-I", "kernels",
                  "-c", source, "-o", str(obj)], directory)
            objects.append(obj)
            parts.append((source, _symbol_bytes(nm, obj)))
        library = Path(tmp) / "libmgr_model.so"
        # 4 KiB pages: aarch64's linker would pad the segments to 64 KiB
        _run([compiler, *cflags.split(), "-shared", "-Wl,-z,max-page-size=4096", "-o",
              str(library), *map(str, objects), "-lm", "-pthread"], directory)
        _run([strip, "--strip-all", str(library)], directory)
        size = library.stat().st_size
    return Sizes(size, tuple(sorted(parts, key=lambda p: -p[1])))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mgegraph.deploy.sizes",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="an export_c folder")
    parser.add_argument("--cc", default="cc", help="the C compiler (default cc)")
    parser.add_argument("--cflags", default="-O3", help="its flags (default -O3)")
    args = parser.parse_args(argv)
    print(measure(args.directory, args.cc, args.cflags).table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

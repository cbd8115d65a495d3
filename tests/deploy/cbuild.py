"""Building and running an export in the tests: the C compiler, model_run, the fuzz harness."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mgegraph.deploy import export_c

HERE = Path(__file__).parent
SANITIZE = "-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined " \
           "-fno-omit-frame-pointer"


def cc() -> str:
    """The C compiler, or the test skips (the C runtime needs one)."""
    found = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not found:
        pytest.skip("no C compiler (cc or gcc) on this machine")
    return found


def make(directory: Path, compiler: str | None = None, cflags: str = "-O2") -> Path:
    """``make`` in an export folder; the path of its model_run. Objects this session compiled
    before from the same command, source and headers are reused (``OBJECT_CACHE``)."""
    command = ["make", "-s", "-C", str(directory), f"CC={compiler or cc()}", f"CFLAGS={cflags}"]
    dry = subprocess.run([*command, "-n", "-B"], check=True, capture_output=True, text=True,
                         timeout=60)
    keys = {}
    for line in map(str.strip, dry.stdout.splitlines()):
        if found := _COMPILE.search(line):
            obj, source = found.groups()
            keys[directory / obj] = _object_key(directory, line, directory / source)
    for obj, key in keys.items():
        _from_cache(key, obj)
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    for obj, key in keys.items():
        _to_cache(key, obj)
    return directory / "model_run"


# -- compiled objects shared by the session's builds -------------------------------------------
# Design: most exports compile the same runtime and kernel sources with the same flags, and the
# compiler is most of a deploy test's time (a sanitised build ~20 s on the loaded 2-core CI
# machine). An object is keyed by its compile command's text (compiler and every flag), its
# source and every header that includes, so it is reused only where the compiler would get the
# same input; tests/deploy/conftest.py gives the session its folder (None: no reuse).
OBJECT_CACHE: Path | None = None
_COMPILE = re.compile(r" -c -o (\S+\.o) (\S+\.c)$")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _object_key(directory: Path, command: str, source: Path) -> str | None:
    if OBJECT_CACHE is None:
        return None
    digest = hashlib.sha256(command.encode())
    for path in _sources_of(directory.resolve(), source.resolve()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _sources_of(directory: Path, source: Path) -> list:
    """``source`` and the quoted headers it includes, transitively (searched as the compiler
    does: the including file's folder, then the Makefile's ``-I. -Ikernels``)."""
    found, todo = [], [source]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.append(path)
        for name in _INCLUDE.findall(path.read_text(errors="replace")):
            for folder in (path.parent, directory, directory / "kernels"):
                if (folder / name).is_file():
                    todo.append((folder / name).resolve())
                    break
    return found


def _from_cache(key: str | None, obj: Path) -> None:
    """The cached object at ``obj`` (newer than its sources: make keeps it); else no object
    there, so that one compiled with other flags cannot look up to date."""
    obj.unlink(missing_ok=True)
    if key is not None and (OBJECT_CACHE / key).exists():
        shutil.copyfile(OBJECT_CACHE / key, obj)


def _to_cache(key: str | None, obj: Path) -> None:
    if key is not None and not (OBJECT_CACHE / key).exists():
        shutil.copyfile(obj, OBJECT_CACHE / f"{key}.part")
        os.replace(OBJECT_CACHE / f"{key}.part", OBJECT_CACHE / key)


def model_run(directory: Path, feeds: dict, names, runner=(), env=None, options=()):
    """Run model_run on ``feeds`` (saved as .npy in ``directory``, in ``names``' order);
    returns the CompletedProcess and the outputs it wrote."""
    paths = []
    for name in names:
        paths.append(directory / f"in_{name}.npy")
        np.save(paths[-1], feeds[name])
    done = subprocess.run([*runner, str(directory / "model_run"), str(directory / "model.mgr"),
                           *map(str, paths), "-o", str(directory), *options],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    outputs = []
    k = 0
    while done.returncode == 0 and (directory / f"output{k}.npy").exists():
        outputs.append(np.load(directory / f"output{k}.npy"))
        k += 1
    return done, outputs


def exported_run(tmp_path, plan, feeds, threads=1, compiler=None, cflags="-O2", runner=()):
    """The exported plan's outputs through model_run."""
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, compiler, cflags)
    done, got = model_run(exported.directory, feeds, exported.input_names, runner=runner,
                          options=["--threads", str(threads)])
    assert done.returncode == 0, done.stderr
    return got


def build_fuzzer(directory: Path) -> Path:
    """blob_fuzz.c linked with the export's library as make builds it under ASan and UBSan
    (with the objects of the other sanitised builds where they match)."""
    return build_harness(directory, "blob_fuzz", SANITIZE)


def build_harness(directory: Path, name: str, cflags: str) -> Path:
    """``tests/deploy/<name>.c`` linked with the export's library, both built with ``cflags``
    (objects reused as ``make``'s are)."""
    make(directory, cflags=cflags)
    harness, obj = HERE / f"{name}.c", directory / f"{name}.o"
    command = [cc(), *cflags.split(), "-std=gnu11", "-I", ".", "-c", "-o", obj.name,
               str(harness)]
    key = _object_key(directory, " ".join(command), harness)
    _from_cache(key, obj)
    if not obj.exists():
        subprocess.run(command, check=True, cwd=directory, capture_output=True, timeout=300)
        _to_cache(key, obj)
    subprocess.run([cc(), *cflags.split(), "-o", name, obj.name, "libmgr_model.a", "-lm",
                    "-pthread"], check=True, cwd=directory, capture_output=True, timeout=300)
    return directory / name


def fuzz_blob(directory: Path, seeds, count: int) -> None:
    """blob_fuzz's ``count`` mutations of the export's blob per seed, under the sanitizers:
    none crashes, and a third at least are refused."""
    fuzzer = build_fuzzer(directory)
    for seed in seeds:
        done = subprocess.run([str(fuzzer), str(directory / "model.mgr"), str(seed), str(count)],
                              capture_output=True, text=True, timeout=600, check=False,
                              env=sanitizer_env())
        assert done.returncode == 0 and "Sanitizer" not in done.stderr, done.stderr[-3000:]
        loaded, refused = map(int, re.findall(r"loaded (\d+) refused (\d+)", done.stdout)[0])
        assert loaded + refused == count and refused > count // 3, done.stdout


def sanitizer_env() -> dict:
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "allocator_may_return_null=1:detect_leaks=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    return env


def assert_refused(directory: Path, cases: dict, feeds: dict, names) -> list:
    """Each corrupt blob of ``cases`` (name -> (bytes, what the error says)) refused by
    model_run, built under the sanitizers, with its message and no sanitizer report; then the
    blob that was there runs again. Returns that run's outputs."""
    blob = (directory / "model.mgr").read_bytes()
    for name, (bad, says) in cases.items():
        (directory / "model.mgr").write_bytes(bad)
        done, _ = model_run(directory, feeds, names, env=sanitizer_env())
        assert done.returncode == 1, (name, done.stderr)
        assert says in done.stderr and "Sanitizer" not in done.stderr, (name, done.stderr)
    (directory / "model.mgr").write_bytes(blob)
    done, outputs = model_run(directory, feeds, names, env=sanitizer_env())
    assert done.returncode == 0, done.stderr
    return outputs


# -- reading and patching a blob's instructions ------------------------------------------------
def blob_calls(blob: bytes) -> list:
    """(kernel name, offset of its first int, offset of its first float) of each instruction
    (docs/c_runtime.md's header and instruction records)."""
    field = lambda i: struct.unpack_from("<q", blob, 8 * i)[0]  # noqa: E731
    names = [blob[field(5) + 32 * k:field(5) + 32 * (k + 1)].rstrip(b"\0").decode()
             for k in range(field(4))]
    calls = []
    for i in range(field(8)):
        kernel, _, _, ints_at, _, floats_at = struct.unpack_from("<6q", blob, field(9) + 64 * i)
        calls.append((names[kernel], field(13) + 8 * ints_at, field(15) + 8 * floats_at))
    return calls


def patched(blob: bytes, at: int, value, fmt="<q") -> bytes:
    """``blob`` with ``value`` packed as ``fmt`` at byte ``at``."""
    out = bytearray(blob)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def run_on_random_floats(exported, seed=12):
    """Build ``exported``, run model_run on standard-normal float32 feeds of its plan's shapes:
    (the feeds, the outputs)."""
    rng = np.random.default_rng(seed)
    feeds = {name: rng.standard_normal(exported.plan.slots[slot].type.shape, dtype=np.float32)
             for name, slot in exported.plan.feeds.items()}
    make(exported.directory)
    done, got = model_run(exported.directory, feeds, exported.input_names)
    assert done.returncode == 0, done.stderr
    return feeds, got
